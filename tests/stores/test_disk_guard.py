"""The embedded stores refuse a write the disk may not hold, before Qdrant Edge dies by SIGBUS."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from retrieval_svc.stores import data_dir
from retrieval_svc.stores.data_dir import MIB, LowDiskSpace, check_free_space
from retrieval_svc.stores.edge import EdgeDenseStore
from retrieval_svc.stores.tantivy_store import TantivyKeywordStore
from tests.helpers import run_with_file_size_limit
from tests.stores.conftest import DIM, chunk, vec, vecs


@pytest.fixture
def free(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """The free bytes every filesystem reports, settable by the test."""
    disk = {"free": 10 * MIB}
    monkeypatch.setattr(data_dir, "free_bytes", lambda path: disk["free"])
    return disk


def test_the_floor_names_the_directory_and_the_bytes(tmp_path: Path, free: dict[str, int]) -> None:
    check_free_space(tmp_path, 10 * MIB)  # exactly the floor left: fine
    with pytest.raises(LowDiskSpace) as err:
        check_free_space(tmp_path / "dense", 256 * MIB, 1000)
    assert str(err.value).startswith(
        f"not enough free disk for the embedded stores in {tmp_path / 'dense'}: "
        f"{10 * MIB} bytes free, {256 * MIB + 1000} needed (retrieval.min_free_disk_mb 256 MiB "
        "plus ~1000 for this write)"
    )
    free["free"] = 0
    check_free_space(tmp_path, 0)  # 0: off


def test_edge_refuses_writes_below_the_floor_and_changes_nothing(
    tmp_path: Path, free: dict[str, int]
) -> None:
    store = EdgeDenseStore(tmp_path, DIM, min_free_bytes=8 * MIB)
    try:
        store.upsert([chunk("a", "d1", 0)], vecs(vec(1)))
        store.publish("a", "d1", "g1")
        free["free"] = 8 * MIB  # the floor, but not the write on top of it
        with pytest.raises(LowDiskSpace, match=str(tmp_path)):
            store.upsert([chunk("a", "d2", 0)], vecs(vec(1)))
        free["free"] = 8 * MIB - 1
        with pytest.raises(LowDiskSpace):
            store.delete("a", "d1")
        # Publishing finishes a write the keyword store committed: refused at the full floor,
        # its documents were live in one arm only. It may use half the floor, no more.
        free["free"] = 10 * MIB
        store.upsert([chunk("a", "d1", 0, generation="g2")], vecs(vec(1)))
        free["free"] = 4 * MIB - 1
        with pytest.raises(LowDiskSpace):
            store.publish("a", "d1", "g2")
        free["free"] = 4 * MIB
        store.publish("a", "d1", "g2")
        assert [(c.document_id, c.generation, c.published) for c in store.inventory()] == [
            ("d1", "g2", True)
        ]
    finally:
        store.close()


def test_tantivy_refuses_writes_below_the_floor_and_changes_nothing(
    tmp_path: Path, free: dict[str, int]
) -> None:
    store = TantivyKeywordStore(tmp_path, min_free_bytes=8 * MIB)
    try:
        store.replace("a", "d1", [chunk("a", "d1", 0)])
        free["free"] = 8 * MIB - 1
        with pytest.raises(LowDiskSpace, match=str(tmp_path)):
            store.replace("a", "d2", [chunk("a", "d2", 0)])
        with pytest.raises(LowDiskSpace):
            store.delete("a", "d1")
        assert [c.document_id for c in store.inventory()] == ["d1"]
    finally:
        store.close()


def test_tantivy_drops_a_failed_writes_files_and_writes_again_without_a_restart(
    tmp_path: Path,
) -> None:
    # Writes past 64 KiB in one file fail (EFBIG), as they would on a full disk.
    child = run_with_file_size_limit(
        f"""
        import os, resource
        from pathlib import Path
        from retrieval_svc.stores.base import Chunk
        from retrieval_svc.stores.tantivy_store import TantivyKeywordStore

        def chunks(doc, n):
            return [
                Chunk("a", f"{{doc}}#{{i}}", "p", doc, "", f"word{{i}} " * 50, 1, "", "g")
                for i in range(n)
            ]

        path = Path({str(tmp_path)!r})
        store = TantivyKeywordStore(path)
        store.replace("a", "small", chunks("small", 1))
        before = set(os.listdir(path))
        try:
            store.replace("a", "big", chunks("big", 3000))
        except ValueError as exc:
            print("failed:", exc)
        print("left behind:", sorted(set(os.listdir(path)) - before))
        _, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
        resource.setrlimit(resource.RLIMIT_FSIZE, (hard, hard))  # space freed
        store.replace("a", "big", chunks("big", 3000))
        print("count:", store.count())
        """,
        64 * 1024,
    )
    lines = child.stdout.splitlines()
    assert len(lines) == 3, child.stderr
    assert lines[0].startswith("failed: ") and "File too large (os error 27)" in lines[0]
    # The failed segment's files would hold the space the next write needs.
    assert lines[1] == "left behind: []"
    assert lines[2] == "count: 3001"


def test_a_dead_tantivy_writer_is_reported_with_the_disk_it_writes_to(
    tmp_path: Path, free: dict[str, int]
) -> None:
    store = TantivyKeywordStore(tmp_path)
    store.replace("a", "d0", [chunk("a", "d0", 0)])
    tenant = store._open["a"]
    writer = tenant.writer

    class Killed:
        """A writer whose worker thread died of an I/O error (tantivy loses which one)."""

        def __getattr__(self, name: str) -> object:
            return getattr(writer, name)

        def commit(self) -> None:
            raise ValueError(
                "An error occurred in a thread: 'An index writer was killed.. A worker thread "
                "encountered an error (io::Error most likely) or panicked.'"
            )

    tenant.writer = Killed()  # type: ignore[assignment]
    free["free"] = 0
    with pytest.raises(OSError, match=rf"writer in {tmp_path}/\S+ died .*\(0 bytes free") as err:
        store.replace("a", "d1", [chunk("a", "d1", 0)])
    assert err.value.errno == errno.EIO
    tenant.writer = writer
    store.replace("a", "d1", [chunk("a", "d1", 0)])
    assert store.count() == 2
    store.close()
