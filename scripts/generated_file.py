"""Shared by the generator scripts: write a generated file, or with --check fail if it is stale."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path


def write_or_check(
    render: Callable[[], str],
    out: Path,
    root: Path,
    script: str,
    argv: list[str] | None,
    description: str | None,
) -> int:
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--check", action="store_true", help="fail if the output is stale")
    args = ap.parse_args(argv)
    text = render()
    if args.check:
        if not out.exists() or out.read_text() != text:
            print(f"{out.relative_to(root)} is stale: run python scripts/{script}")
            return 1
        return 0
    out.write_text(text)
    print(f"wrote {out.relative_to(root)}")
    return 0
