"""Which file is this: its sha256, and a short one computed once per file version per process."""

from __future__ import annotations

import hashlib
from functools import lru_cache
from pathlib import Path


def file_digest(path: Path) -> str:
    """First 16 hex digits of the file's sha256."""
    stat = path.stat()
    return _digest(str(path), stat.st_size, stat.st_mtime_ns)


@lru_cache(maxsize=8)
def _digest(path: str, size: int, mtime_ns: int) -> str:
    # Keyed by size and mtime too, so a replaced file is hashed again; otherwise each caller in
    # this process (embedders, the gate's reader, eval rows) would re-read a 20+ MB model.
    del size, mtime_ns
    return sha256_file(Path(path))[:16]


def sha256_file(path: Path) -> str:
    """The file's full sha256 in hex, read in 1 MiB blocks (pins for downloads, manifests)."""
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
