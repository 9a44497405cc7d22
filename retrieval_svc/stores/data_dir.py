"""One process at a time on the embedded stores' data directory."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from candor.settings import RetrievalSettings

LOCK_NAME = ".candor.lock"


class DataDirInUse(RuntimeError):
    """Another process holds the embedded stores' data directory."""


class DataDirLock:
    """An exclusive lock on ``path`` for as long as this process holds it open.

    Qdrant Edge and tantivy each lock their own files, but a second process met them as a
    34-line traceback ending in "Can't init WAL: Kind(WouldBlock)"; this says who holds what.
    """

    def __init__(self, path: Path) -> None:
        path.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._file = (path / LOCK_NAME).open("a+", encoding="utf-8")
        try:
            fcntl.flock(self._file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._file.seek(0)
            holder = self._file.read().strip() or "unknown"
            self._file.close()
            raise DataDirInUse(
                f"retrieval.data_dir {path} is in use by another candor process (pid {holder}): "
                "stop it first (candor verify needs the server stopped too), or give this "
                "process its own data_dir"
            ) from None
        self._file.seek(0)
        self._file.truncate()
        self._file.write(f"{os.getpid()}\n")
        self._file.flush()

    def release(self) -> None:
        """Let another process open the directory; idempotent."""
        if not self._file.closed:
            fcntl.flock(self._file, fcntl.LOCK_UN)
            self._file.close()


def lock_embedded(settings: RetrievalSettings) -> DataDirLock | None:
    """The data directory's lock when an embedded store lives there, else None."""
    if settings.dense_backend == "edge" or settings.keyword_backend == "tantivy":
        return DataDirLock(Path(settings.data_dir))
    return None
