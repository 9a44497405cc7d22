"""The embedded stores' data directory: one process at a time, and never written when full."""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

from candor.settings import RetrievalSettings
from retrieval_svc.stores.base import StoreMissing, StoreUnlistable

LOCK_NAME = ".candor.lock"


MIB = 1 << 20
DENSE_DIR, KEYWORD_DIR = "dense", "keyword"
"""Where Qdrant Edge and tantivy live under ``retrieval.data_dir``."""


class DataDirError(RuntimeError):
    """The embedded stores' data directory cannot be used; start-up stops with this message."""


class DataDirInUse(DataDirError):
    """Another process holds the embedded stores' data directory."""


class LowDiskSpace(DataDirError):
    """Too little free disk for an embedded store to write without risking a crash.

    Qdrant Edge writes through mmap into preallocated sparse files (a 2 x 32 MiB WAL, 32 MiB
    vector and payload pages, 4 MiB index maps: ~150 MiB of holes in a fresh shard); touching
    a hole on a full filesystem kills the process with SIGBUS instead of raising ENOSPC.
    """


def free_bytes(path: Path) -> int:
    """Bytes an unprivileged writer may still use on ``path``'s filesystem."""
    return shutil.disk_usage(path).free


def check_free_space(path: Path, floor_bytes: int, write_bytes: int = 0) -> None:
    """Raise LowDiskSpace unless ``path``'s filesystem keeps ``floor_bytes`` free after a write
    of about ``write_bytes``; a floor of 0 turns the check off."""
    if floor_bytes <= 0:
        return
    where = path
    while not where.exists() and where != where.parent:
        where = where.parent  # a store directory not created yet lives on its parent's disk
    free, need = free_bytes(where), floor_bytes + write_bytes
    if free < need:
        raise LowDiskSpace(
            f"not enough free disk for the embedded stores in {path}: {free} bytes free, "
            f"{need} needed (retrieval.min_free_disk_mb {floor_bytes // MIB} MiB"
            + (f" plus ~{write_bytes} for this write)" if write_bytes else ")")
            + "; free space on that filesystem (or move data_dir) and retry"
        )


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
                f"data_dir {path} is in use by another candor process (pid {holder}): "
                "stop it first (candor verify needs the server stopped too), or give this "
                "process its own data_dir"
            ) from None
        self._file.seek(0)
        # A clean release empties the file, so a pid still in it is a run that crashed or was
        # killed, possibly part-way through a write.
        self.unclean_pid = self._file.read().strip()
        self._file.seek(0)
        self._file.truncate()
        self._file.write(f"{os.getpid()}\n")
        self._file.flush()

    def release(self, clean: bool = True) -> None:
        """Let another process open the directory, marking a clean stop; idempotent.

        ``clean=False`` (a start or verify that failed) keeps the mark of an earlier run that
        did not stop cleanly: a restart on a still-full disk erased it, and the start after
        the disk was freed no longer said to run candor verify."""
        if not self._file.closed:
            self._file.seek(0)
            self._file.truncate()
            if not clean and self.unclean_pid:
                self._file.write(f"{self.unclean_pid}\n")
            self._file.flush()
            fcntl.flock(self._file, fcntl.LOCK_UN)
            self._file.close()


def embedded_dirs(settings: RetrievalSettings) -> list[Path]:
    """The directories the embedded stores write (each may be its own filesystem)."""
    data = Path(settings.data_dir)
    return [
        data / name
        for name, embedded in (
            (DENSE_DIR, settings.dense_backend == "edge"),
            (KEYWORD_DIR, settings.keyword_backend == "tantivy"),
        )
        if embedded
    ]


def check_start_space(settings: RetrievalSettings) -> None:
    """Refuse to open the embedded stores on a disk too full to open them safely."""
    for path in embedded_dirs(settings):
        check_free_space(path, settings.min_free_disk_mb * MIB)


@contextlib.contextmanager
def opening_data_dir(settings: RetrievalSettings) -> Iterator[None]:
    """Report a failure to open the embedded stores (a read-only or damaged data dir) as one
    DataDirError naming the directory, the store's own error chained, not as its traceback."""
    try:
        yield
    except (DataDirError, StoreMissing, StoreUnlistable):
        raise  # already say what is wrong (the directory, or a store's own state)
    except Exception as exc:
        if not embedded_dirs(settings):
            raise
        raise DataDirError(
            f"cannot open the data dir {settings.data_dir}: {type(exc).__name__}: {exc}"
        ) from exc


def lock_embedded(settings: RetrievalSettings) -> DataDirLock | None:
    """The data directory's lock when an embedded store lives there, else None."""
    if embedded_dirs(settings):
        return DataDirLock(Path(settings.data_dir))
    return None
