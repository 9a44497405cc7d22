"""Files that must never be seen half-written: a crash or a full disk leaves the old one."""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path


def write_atomically(path: Path, data: bytes, mode: int = 0o644, *, replace: bool = True) -> None:
    """Write ``data`` to ``path`` through a synced temporary file in the same directory.

    The temporary file is created 0600 and only then given ``mode``, so a secret is never
    readable by others, even half-written. With ``replace=False`` an existing ``path`` is kept
    and ``FileExistsError`` raised: the file another process created first wins.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), mode)
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        if replace:
            os.replace(tmp, path)
        else:
            os.link(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
    # The rename is only durable once the directory entry is on disk too.
    fsync_dir(path.parent)


def fsync_dir(path: Path) -> None:
    """Put ``path``'s entries (files created, renamed or removed in it) on disk."""
    directory = os.open(path, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)
