"""Regenerate the committed Python stubs from protos/ (the one way to do it).

Usage: python scripts/gen_protos.py [--check]
--check regenerates into a temporary tree and fails if the committed stubs differ.
"""

from __future__ import annotations

import filecmp
import sys
import tempfile
from importlib import resources
from pathlib import Path

from grpc_tools import protoc

ROOT = Path(__file__).resolve().parent.parent
PROTOS = ROOT / "protos"
PACKAGES = ["candor/common/v1", "candor/retrieval/v1", "candor/gate/v1", "candor/generator/v1"]
SUFFIXES = ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py")


def generate(out: Path) -> None:
    well_known = str(resources.files("grpc_tools") / "_proto")
    files = sorted(str(p.relative_to(PROTOS)) for p in PROTOS.rglob("*.proto"))
    args = [
        "protoc",
        f"-I{PROTOS}",
        f"-I{well_known}",
        f"--python_out={out}",
        f"--pyi_out={out}",
        f"--grpc_python_out={out}",
        *files,
    ]
    if protoc.main(args) != 0:
        raise SystemExit("protoc failed")
    for pkg in PACKAGES:
        parts = Path(pkg).parts
        for i in range(1, len(parts) + 1):
            init = out.joinpath(*parts[:i], "__init__.py")
            if i > 1 and not init.exists():
                init.write_text("")


def generated_files(tree: Path) -> set[str]:
    return {
        str(p.relative_to(tree))
        for pkg in PACKAGES
        for p in (tree / pkg).glob("*")
        if p.name.endswith(SUFFIXES) or p.name == "__init__.py"
    }


def main() -> int:
    if "--check" not in sys.argv:
        generate(ROOT)
        print("regenerated:", ", ".join(sorted(generated_files(ROOT))))
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        fresh = Path(tmp)
        generate(fresh)
        want, have = generated_files(fresh), generated_files(ROOT)
        stale = sorted(want ^ have) + sorted(
            f for f in want & have if not filecmp.cmp(fresh / f, ROOT / f, shallow=False)
        )
    if stale:
        print("generated stubs are stale; run `make protos`:", *stale, sep="\n  ")
        return 1
    print("generated stubs are current")
    return 0


if __name__ == "__main__":
    sys.exit(main())
