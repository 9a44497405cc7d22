"""The embedded stores refuse a write the disk may not hold, before Qdrant Edge dies by SIGBUS."""

from __future__ import annotations

from pathlib import Path

import pytest

from retrieval_svc.stores import data_dir
from retrieval_svc.stores.data_dir import MIB, LowDiskSpace, check_free_space
from retrieval_svc.stores.edge import EdgeDenseStore
from retrieval_svc.stores.tantivy_store import TantivyKeywordStore
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
            store.publish("a", "d1", "g1")
        with pytest.raises(LowDiskSpace):
            store.delete("a", "d1")
        assert [(c.document_id, c.published) for c in store.inventory()] == [("d1", True)]
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
