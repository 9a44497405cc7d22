"""tantivy keeps one index per tenant: a tenant's scores are what they would be alone in the
store, whatever others write; indexes and writers open and close as tenants come and go; a
store written as one shared index is split into per-tenant ones when opened, and a crash during
the split loses nothing."""

from __future__ import annotations

import gc
import shutil
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import tantivy
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from retrieval_svc.stores import data_dir, tantivy_store
from retrieval_svc.stores.base import Hit
from retrieval_svc.stores.data_dir import LowDiskSpace
from retrieval_svc.stores.tantivy_store import (
    LEGACY_MARKER,
    TENANTS_DIR,
    TantivyKeywordStore,
    migrate_to_tenant_indexes,
    tenant_dir_name,
)
from tests.stores.conftest import chunk

VOCAB = ("parcel", "label", "refund", "customs", "tracking", "invoice", "courier", "pickup")
TENANTS = ("acme", "Acme", "globex")

words = st.lists(st.sampled_from(VOCAB), min_size=1, max_size=5).map(" ".join)
ops = st.lists(
    st.tuples(
        st.sampled_from(["write", "write", "search", "delete"]),
        st.sampled_from(TENANTS),
        st.sampled_from(["d0", "d1", "d2"]),
        words,
    ),
    min_size=1,
    max_size=16,
)


def _key(hits: list[Hit]) -> list[tuple[str, str, float]]:
    # Equal scores may come in either order.
    return sorted((h.chunk.chunk_id, h.chunk.generation, round(h.score, 5)) for h in hits)


@settings(
    max_examples=40,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(sequence=ops)
def test_a_tenants_results_are_what_it_would_get_alone(
    tmp_path_factory: pytest.TempPathFactory, sequence: list[Any]
) -> None:
    shared = TantivyKeywordStore(tmp_path_factory.mktemp("shared"))
    alone = {t: TantivyKeywordStore(tmp_path_factory.mktemp(f"alone-{t}")) for t in TENANTS}
    try:
        for n, (op, tenant, doc, text) in enumerate(sequence):
            for store in (shared, alone[tenant]):
                if op == "write":
                    store.replace(tenant, doc, [chunk(tenant, doc, 0, f"g{n}", text=text)])
                elif op == "delete":
                    store.delete(tenant, doc)
            if op == "search":
                got = shared.search(tenant, text, 10)
                assert _key(got) == _key(alone[tenant].search(tenant, text, 10))
                assert all(h.chunk.tenant == tenant for h in got)
        assert shared.count() == sum(s.count() for s in alone.values())
    finally:
        for store in (shared, *alone.values()):
            store.close()


def test_another_tenants_documents_leave_scores_unchanged(tmp_path: Path) -> None:
    store = TantivyKeywordStore(tmp_path)
    try:
        store.replace("t", "doc", [chunk("t", "doc", 0, text="quokka habitat notes")])
        store.replace("t", "pad", [chunk("t", "pad", 0, text="unrelated filler text")])
        (before,) = [h.score for h in store.search("t", "quokka", 5)]
        store.replace_many(
            [("u", f"d{i}", [chunk("u", f"d{i}", 0, text="quokka quokka")]) for i in range(50)]
        )
        (after,) = [h.score for h in store.search("t", "quokka", 5)]
        assert after == before
        assert len(store.search("u", "quokka", 100)) == 50
    finally:
        store.close()


def test_reads_of_a_tenant_with_no_index_make_no_directory(tmp_path: Path) -> None:
    store = TantivyKeywordStore(tmp_path)
    try:
        assert store.search("nobody", "parcel", 5) == []
        assert store.get("nobody", ["x#p0c0"]) == []
        assert store.holds("nobody", [("x#p0c0", "g1")]) == set()
        assert store.delete("nobody", "x") == 0
        assert list((tmp_path / TENANTS_DIR).iterdir()) == []
    finally:
        store.close()


def test_tenant_directories_keep_case_and_dots_apart() -> None:
    names = {tenant_dir_name(t) for t in ("acme", "Acme", "a.b", "a-b", "a_b", "a..")}
    assert len({n.lower() for n in names}) == 6


@pytest.mark.parametrize("tenant", ["", ".", "..", "../x", "a/b", "a b", "x" * 65])
def test_a_name_the_services_refuse_is_no_directory(tmp_path: Path, tenant: str) -> None:
    store = TantivyKeywordStore(tmp_path)
    try:
        with pytest.raises(ValueError, match="not a tenant id"):
            store.replace(tenant, "d", [chunk(tenant, "d", 0)])
        with pytest.raises(ValueError, match="not a tenant id"):
            store.search(tenant, "text", 5)
    finally:
        store.close()
    assert sorted(p.name for p in tmp_path.rglob("*")) == [TENANTS_DIR]


def test_indexes_and_writers_close_past_their_limits_and_reopen(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tantivy_store, "OPEN_INDEXES", 2)
    monkeypatch.setattr(tantivy_store, "OPEN_WRITERS", 1)
    store = TantivyKeywordStore(tmp_path)
    tenants = [f"t{i}" for i in range(5)]
    try:
        for round_ in range(2):
            for t in tenants:
                store.replace(t, f"d{round_}", [chunk(t, f"d{round_}", 0, text=f"parcel {t}")])
                assert sum(o.writer is not None for o in store._open.values()) <= 1
        assert len(store._open) <= 2
        for t in tenants:
            assert sorted(h.chunk.document_id for h in store.search(t, "parcel", 5)) == [
                "d0",
                "d1",
            ]
        assert store.count() == 10
        assert store.delete("t0", "d0") == 1 and store.count() == 9
    finally:
        store.close()
    reopened = TantivyKeywordStore(tmp_path)
    try:
        assert reopened.count() == 9
        assert len(reopened.inventory()) == 9
    finally:
        reopened.close()


def test_a_read_does_not_wait_while_another_tenants_index_is_being_created(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Retrieve asks `holds` on its event loop: an index created slowly (a network volume's
    # fsync) for another tenant's first write must not hold every request up.
    store = TantivyKeywordStore(tmp_path)
    store.replace("acme", "d0", [chunk("acme", "d0", 0, text="parcel")])
    creating, release = threading.Event(), threading.Event()
    real_init = tantivy_store._Tenant.__init__

    def slow_init(self: Any, tenant: str, path: Path, schema: tantivy.Schema) -> None:
        if tenant == "globex":
            creating.set()
            release.wait(30)
        real_init(self, tenant, path, schema)

    monkeypatch.setattr(tantivy_store._Tenant, "__init__", slow_init)
    first_write = threading.Thread(
        target=store.replace, args=("globex", "d0", [chunk("globex", "d0", 0, text="courier")])
    )
    first_write.start()
    try:
        assert creating.wait(30)
        held, read = ("d0#p0c0", "g1"), list[set[tuple[str, str]]]()
        reader = threading.Thread(target=lambda: read.append(store.holds("acme", [held])))
        reader.start()
        reader.join(10)
        assert read == [{held}], "the read waited for the other tenant's index"
    finally:
        release.set()
        first_write.join(30)
    try:
        assert [h.chunk.document_id for h in store.search("globex", "courier", 5)] == ["d0"]
        assert store.count() == 2
    finally:
        store.close()


def _os_threads() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("Threads:"):
            return int(line.split()[1])
    raise AssertionError("no thread count in /proc/self/status")


def _threads_once_watchers_end() -> int:
    """The thread count after closed indexes' file-watcher threads end (within a second)."""
    gc.collect()
    time.sleep(1.5)
    return _os_threads()


def test_start_up_counts_each_tenant_without_opening_its_index(tmp_path: Path) -> None:
    # Every open index starts a file-watcher thread: opening 2,000 tenants' at start-up
    # peaked at about 1,500 threads, and under a pids limit tantivy panicked.
    store = TantivyKeywordStore(tmp_path)
    for t in range(40):
        docs = [(f"t{t}", f"d{i}", [chunk(f"t{t}", f"d{i}", 0, text="parcel")]) for i in range(3)]
        store.replace_many(docs)
    store.delete("t0", "d0")
    store.delete("t7", "d2")
    store.close()
    del store
    before = _threads_once_watchers_end()
    reopened = TantivyKeywordStore(tmp_path)
    try:
        assert _os_threads() - before < 10, "start-up opened the tenants' indexes"
        assert reopened.count() == 40 * 3 - 2
        assert [h.chunk.document_id for h in reopened.search("t0", "parcel", 5)] != []
        assert reopened.holds("t7", [("d2#p0c0", "g1"), ("d1#p0c0", "g1")]) == {("d1#p0c0", "g1")}
    finally:
        reopened.close()


def test_an_inventory_of_many_tenants_lets_the_file_watchers_of_its_reads_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # `candor verify` reads every tenant: back to back, 2,000 tenants peaked at 1,019 threads.
    monkeypatch.setattr(tantivy_store, "INVENTORY_BATCH", 20)
    store = TantivyKeywordStore(tmp_path)
    store.replace_many(
        [(f"t{t}", "d", [chunk(f"t{t}", "d", 0, text="parcel")]) for t in range(120)]
    )
    store.close()
    del store
    before = _threads_once_watchers_end()
    reopened = TantivyKeywordStore(tmp_path)
    peak, done = [0], threading.Event()

    def sample() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], _os_threads())
            time.sleep(0.005)

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        listed = reopened.inventory()
    finally:
        done.set()
        sampler.join()
        reopened.close()
    assert sorted(c.tenant for c in listed) == sorted(f"t{t}" for t in range(120))
    # Two batches' watchers at most (one ending, one reading), not one per tenant.
    assert peak[0] - before <= 2 * 20 + 5, f"{peak[0] - before} threads over {before}"


def test_a_tenant_index_removed_while_running_fails_one_write_clearly_then_starts_anew(
    tmp_path: Path,
) -> None:
    store = TantivyKeywordStore(tmp_path)
    try:
        store.replace("acme", "d0", [chunk("acme", "d0", 0, text="parcel")])
        store.replace("globex", "d0", [chunk("globex", "d0", 0, text="parcel")])
        shutil.rmtree(tmp_path / TENANTS_DIR / tenant_dir_name("acme"))
        with pytest.raises(OSError, match="keyword index of tenant 'acme' is gone"):
            store.replace("acme", "d1", [chunk("acme", "d1", 0, text="courier")])
        assert store.count() == 1  # globex's; acme's chunks went with its directory
        # Not stuck: the next write makes a new index (not "LockBusy", not another writer).
        store.replace("acme", "d1", [chunk("acme", "d1", 0, text="courier")])
        assert [h.chunk.document_id for h in store.search("acme", "courier", 5)] == ["d1"]
        assert store.count() == 2
    finally:
        store.close()


def test_a_panic_opening_an_index_is_an_error_the_arm_can_degrade_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = TantivyKeywordStore(tmp_path)
    store.replace("acme", "d0", [chunk("acme", "d0", 0, text="parcel")])
    store.close()
    reopened = TantivyKeywordStore(tmp_path)

    class PanicException(BaseException):  # pyo3's, as tantivy raises it
        pass

    def panics(*args: object, **kwargs: object) -> None:
        raise PanicException("Failed to spawn meta file watcher thread")

    monkeypatch.setattr(tantivy_store.tantivy, "Index", panics)
    with pytest.raises(OSError, match="thread limit") as raised:
        reopened.search("acme", "parcel", 5)
    assert isinstance(raised.value.__cause__, PanicException)
    monkeypatch.undo()
    assert [h.chunk.document_id for h in reopened.search("acme", "parcel", 5)] == ["d0"]
    reopened.close()


def test_two_deletes_of_one_document_at_once_report_it_deleted_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = TantivyKeywordStore(tmp_path)
    store.replace("acme", "d0", [chunk("acme", "d0", 0, text="parcel")])
    first_counted, release = threading.Event(), threading.Event()
    real_check = tantivy_store.check_free_space

    def first_waits(*args: Any, **kwargs: Any) -> None:
        # The first delete has counted the document and is about to commit: hold it there.
        if not first_counted.is_set():
            first_counted.set()
            release.wait(30)
        real_check(*args, **kwargs)

    monkeypatch.setattr(tantivy_store, "check_free_space", first_waits)
    results: list[int] = []
    first = threading.Thread(target=lambda: results.append(store.delete("acme", "d0")))
    second = threading.Thread(target=lambda: results.append(store.delete("acme", "d0")))
    first.start()
    try:
        assert first_counted.wait(30)
        second.start()
        second.join(0.5)  # it counts only once the first has committed, so it waits here
    finally:
        release.set()
        first.join(30)
        if second.is_alive() or second.ident is not None:
            second.join(30)
    try:
        assert sorted(results) == [0, 1]
        assert store.count() == 0
    finally:
        store.close()


def _legacy_store(path: Path, documents: dict[str, list[str]]) -> None:
    """A store as candor wrote it before one index per tenant: every tenant in one index at
    the store's top level."""
    path.mkdir(parents=True, exist_ok=True)
    index = tantivy.Index(tantivy_store._schema(), path=str(path))
    writer = index.writer(heap_size=50_000_000, num_threads=1)
    for tenant, texts in documents.items():
        for i, text in enumerate(texts):
            writer.add_document(tantivy_store._document(chunk(tenant, f"d{i}", 0, text=text)))
    writer.commit()
    # A deleted tenant leaves its term behind until its segment merges.
    writer.add_document(tantivy_store._document(chunk("gone", "d0", 0)))
    writer.commit()
    writer.delete_documents_by_term("tenant", "gone")
    writer.commit()
    writer.wait_merging_threads()


LEGACY = {
    "acme": ["parcel label", "refund window", "customs form"],
    "globex": ["parcel parcel courier"],
}


def _opened_count(path: Path) -> int:
    """How many chunks the store at ``path`` holds once opened (and split, if need be)."""
    store = TantivyKeywordStore(path)
    try:
        return store.count()
    finally:
        store.close()


def test_a_shared_index_is_split_per_tenant_when_opened(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _legacy_store(tmp_path, LEGACY)
    monkeypatch.setattr(tantivy_store, "MIGRATION_PAGE", 2)  # acme's three chunks: two pages
    (tmp_path / ".candor.lock").write_text("1\n")  # the data dir's lock is not the index's
    store = TantivyKeywordStore(tmp_path)
    try:
        assert store.count() == 4
        assert sorted(h.chunk.document_id for h in store.search("acme", "parcel refund", 5)) == [
            "d0",
            "d1",
        ]
        assert [h.chunk.text for h in store.search("globex", "courier", 5)] == [
            "parcel parcel courier"
        ]
        assert {(c.tenant, c.document_id) for c in store.inventory()} == {
            ("acme", "d0"),
            ("acme", "d1"),
            ("acme", "d2"),
            ("globex", "d0"),
        }
    finally:
        store.close()
    left = sorted(p.name for p in tmp_path.iterdir())
    assert left == [".candor.lock", TENANTS_DIR], "the old index's files are gone"
    assert sorted(p.name for p in (tmp_path / TENANTS_DIR).iterdir() if p.is_dir()) == sorted(
        tenant_dir_name(t) for t in LEGACY
    )


def test_a_split_leaves_out_a_tenant_id_the_services_refuse_and_says_so(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Written before tenant ids were checked at the door: no request can name it, and as a
    # directory name "../x" would be a path out of the store.
    _legacy_store(tmp_path, {**LEGACY, "../x": ["parcel escaped"]})
    with caplog.at_level("ERROR", logger="candor.retrieval"):
        assert _opened_count(tmp_path) == 4
    refused = [r for r in caplog.records if getattr(r, "tenant", None) == "../x"]
    assert [getattr(r, "chunks", None) for r in refused] == [1]
    assert sorted(p.name for p in (tmp_path / TENANTS_DIR).iterdir() if p.is_dir()) == sorted(
        tenant_dir_name(t) for t in LEGACY
    )
    assert not (tmp_path / "x").exists() and not (tmp_path.parent / "x").exists()


def test_a_split_cut_short_starts_again_and_one_renamed_only_cleans_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _legacy_store(tmp_path, LEGACY)
    real_rename = Path.rename

    def crash(self: Path, target: Path) -> Path:
        raise OSError("killed before the rename")

    monkeypatch.setattr(Path, "rename", crash)
    with pytest.raises(OSError, match="killed"):
        migrate_to_tenant_indexes(tmp_path, tantivy_store._schema())
    assert (tmp_path / LEGACY_MARKER).exists() and not (tmp_path / TENANTS_DIR).exists()
    assert not (tmp_path / f"{TENANTS_DIR}.migrating").exists(), "its space given back"
    monkeypatch.setattr(Path, "rename", real_rename)

    # Killed after the rename, before the old files were removed: the split is complete.
    real_unlink = Path.unlink
    monkeypatch.setattr(Path, "unlink", lambda self, missing_ok=False: crash(self, self))
    with pytest.raises(OSError, match="killed"):
        migrate_to_tenant_indexes(tmp_path, tantivy_store._schema())
    assert (tmp_path / LEGACY_MARKER).exists() and (tmp_path / TENANTS_DIR).exists()
    assert not (tmp_path / f"{TENANTS_DIR}.migrating").exists()
    monkeypatch.setattr(Path, "unlink", real_unlink)

    assert _opened_count(tmp_path) == 4
    assert not (tmp_path / LEGACY_MARKER).exists()


def test_a_shared_index_written_after_the_split_stops_start_up_rather_than_go(
    tmp_path: Path,
) -> None:
    _legacy_store(tmp_path, LEGACY)
    TantivyKeywordStore(tmp_path).close()  # split
    # A rollback: an earlier candor finds no shared index, makes a new one and writes to it.
    _legacy_store(tmp_path, {"acme": ["written during the rollback"]})

    with pytest.raises(RuntimeError, match="not the one they were split from"):
        TantivyKeywordStore(tmp_path)
    assert (tmp_path / LEGACY_MARKER).exists(), "nothing of it was deleted"

    # Moved aside, as the message says: the per-tenant indexes open as they were.
    backup = tmp_path.parent / "backup"
    backup.mkdir()
    for f in tmp_path.iterdir():
        if f.is_file() and f.name != ".candor.lock":
            f.rename(backup / f.name)
    assert _opened_count(tmp_path) == 4


def test_an_empty_shared_index_beside_the_split_is_removed(tmp_path: Path) -> None:
    _legacy_store(tmp_path, LEGACY)
    TantivyKeywordStore(tmp_path).close()
    tantivy.Index(tantivy_store._schema(), path=str(tmp_path))  # an earlier candor's empty one

    assert _opened_count(tmp_path) == 4
    assert not (tmp_path / LEGACY_MARKER).exists()


def test_a_split_without_the_room_for_it_is_refused_before_it_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _legacy_store(tmp_path, LEGACY)
    old_size = sum(f.stat().st_size for f in tmp_path.iterdir() if f.is_file())
    monkeypatch.setattr(data_dir, "free_bytes", lambda path: old_size // 2)

    with pytest.raises(LowDiskSpace, match="not enough free disk"):
        TantivyKeywordStore(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_dir()) == []
    assert (tmp_path / LEGACY_MARKER).exists()


def test_a_split_that_fails_part_way_gives_its_space_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _legacy_store(tmp_path, LEGACY)
    real_split = tantivy_store._split

    def full_disk(path: Path, building: Path, schema: tantivy.Schema) -> int:
        real_split(path, building, schema)
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(tantivy_store, "_split", full_disk)
    with pytest.raises(OSError, match="No space left"):
        TantivyKeywordStore(tmp_path)
    assert not (tmp_path / f"{TENANTS_DIR}.migrating").exists()
    assert (tmp_path / LEGACY_MARKER).exists()


class _CommitFails:
    """A writer whose commit fails and whose rollback fails too."""

    def __init__(self, writer: tantivy.IndexWriter) -> None:
        self._writer = writer

    def __getattr__(self, name: str) -> Any:
        return getattr(self._writer, name)

    def commit(self) -> None:
        raise RuntimeError("the commit failed")

    def rollback(self) -> None:
        raise RuntimeError("the rollback failed")


def test_a_failed_rollback_leaves_the_writes_own_error_and_the_next_write_works(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = TantivyKeywordStore(tmp_path)
    real = tantivy_store._Tenant.new_writer

    def failing(self: Any) -> Any:
        self.writer = _CommitFails(real(self))
        return self.writer

    try:
        monkeypatch.setattr(tantivy_store._Tenant, "new_writer", failing)
        # Not "LockBusy" from a second writer opened while the first still held the lock.
        with pytest.raises(RuntimeError, match="the commit failed"):
            store.replace("acme", "d", [chunk("acme", "d", 0, text="parcel")])
        monkeypatch.setattr(tantivy_store._Tenant, "new_writer", real)
        store.replace("acme", "d", [chunk("acme", "d", 0, text="parcel")])
        assert [h.chunk.document_id for h in store.search("acme", "parcel", 5)] == ["d"]
    finally:
        store.close()
