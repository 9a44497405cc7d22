"""The embedded dense store skips its tenant filter when it would keep every document (the
keyword store needs none: one index per tenant, tests/stores/test_tenant_indexes.py).

Property: on any interleaving of writes, publishes, deletes and searches, a search answers
exactly what the same search with its filter applied answers, whether or not the shortcut was
taken. Searches run right after writes (the case a stale "one tenant owns everything" would
get wrong) with the Edge store's quiet period set to zero, so every search may take it.
Then the cases that show the shortcut is taken at all, and where it must not be.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from retrieval_svc.stores import edge
from retrieval_svc.stores.base import Hit
from retrieval_svc.stores.edge import EdgeDenseStore
from tests.stores.conftest import DIM, chunk

VOCAB = ("parcel", "label", "refund", "customs", "tracking", "invoice", "courier", "pickup")
assert len(VOCAB) == DIM
TENANTS = ("acme", "Acme", "globex")

SETTINGS = settings(
    max_examples=60,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)


def _embed(text: str) -> npt.NDArray[np.float32]:
    out = np.zeros(DIM, dtype=np.float32)
    for word in text.split():
        out[VOCAB.index(word)] += 1.0
    return out


words = st.lists(st.sampled_from(VOCAB), min_size=1, max_size=5).map(" ".join)
# (op, tenant, document id, text, flag): flag is "publish" for writes, include_unpublished
# for searches.
ops = st.lists(
    st.tuples(
        st.sampled_from(["write", "write", "search", "search", "delete"]),
        st.sampled_from(TENANTS),
        st.sampled_from(["d0", "d1", "d2"]),
        words,
        st.booleans(),
    ),
    min_size=1,
    max_size=14,
)


def _key(hits: list[Hit]) -> list[tuple[str, str, str, float]]:
    return [(h.chunk.tenant, h.chunk.chunk_id, h.chunk.generation, round(h.score, 5)) for h in hits]


@pytest.fixture
def no_quiet_period(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(edge, "QUIET_SECONDS", 0.0)
    yield


def _dense_filtered(store: EdgeDenseStore, *args: Any) -> list[Hit]:
    """The same search with the filter forced on: the reference answer."""
    real = store._matches_every_point
    store._matches_every_point = lambda *a: False  # type: ignore[method-assign]
    try:
        return store.search(*args)
    finally:
        store._matches_every_point = real  # type: ignore[method-assign]


@SETTINGS
@given(sequence=ops)
def test_dense_shortcut_never_changes_a_search(
    tmp_path_factory: pytest.TempPathFactory, no_quiet_period: None, sequence: list[Any]
) -> None:
    store = EdgeDenseStore(tmp_path_factory.mktemp("edge"), DIM)
    try:
        for n, (op, tenant, doc, text, flag) in enumerate(sequence):
            if op == "write":
                c = chunk(tenant, doc, 0, generation=f"g{n}", text=text)
                store.upsert([c], np.stack([_embed(text)]))
                if flag:
                    store.publish(tenant, doc, c.generation)
            elif op == "delete":
                store.delete(tenant, doc)
            else:
                args = (tenant, _embed(text), 10, flag)
                got = store.search(*args)
                assert _key(got) == _key(_dense_filtered(store, *args))
                assert all(h.chunk.tenant == tenant for h in got)
    finally:
        store.close()


def _count_filtered_queries(store: EdgeDenseStore) -> list[bool]:
    """Spy on the shard: one entry per query, True when it carried a filter."""
    seen: list[bool] = []
    real = store._shard.query

    def query(request: Any) -> Any:
        seen.append(request.filter is not None)
        return real(request)

    store._shard = _ShardSpy(store._shard, query)  # type: ignore[assignment]
    return seen


class _ShardSpy:
    def __init__(self, shard: Any, query: Any) -> None:
        self._shard, self.query = shard, query

    def __getattr__(self, name: str) -> Any:
        return getattr(self._shard, name)


def test_dense_search_of_a_sole_published_tenant_runs_unfiltered(
    tmp_path: Path, no_quiet_period: None
) -> None:
    store = EdgeDenseStore(tmp_path / "edge", DIM)
    try:
        filtered = _count_filtered_queries(store)
        c = chunk("acme", "d0", 0, text="parcel label")
        store.upsert([c], np.stack([_embed(c.text)]))
        store.search("acme", _embed("parcel"), 5, False)  # staged: the filter hides it
        store.publish("acme", "d0", c.generation)
        hits = store.search("acme", _embed("parcel"), 5, False)
        assert [h.chunk.chunk_id for h in hits] == [c.chunk_id]
        store.search("globex", _embed("parcel"), 5, False)  # another tenant: filtered
        assert filtered == [True, False, True]
        # Any write voids the shortcut at once: a staged chunk of the same tenant, then a
        # second tenant's chunk, staged and then published.
        staged = chunk("acme", "d1", 0, generation="g2", text="parcel parcel")
        store.upsert([staged], np.stack([_embed(staged.text)]))
        hits = store.search("acme", _embed("parcel"), 5, False)
        assert [h.chunk.chunk_id for h in hits] == [c.chunk_id]
        g = chunk("globex", "d9", 0, text="parcel parcel")
        store.upsert([g], np.stack([_embed(g.text)]))
        hits = store.search("acme", _embed("parcel"), 5, True)
        assert {h.chunk.tenant for h in hits} == {"acme"}
        store.publish("globex", "d9", g.generation)
        hits = store.search("acme", _embed("parcel"), 5, False)
        assert [h.chunk.tenant for h in hits] == ["acme"]
        assert filtered[3:] == [True, True, True]
    finally:
        store.close()


def test_dense_search_filters_while_writes_are_recent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(edge, "QUIET_SECONDS", 3600.0)  # however slow the machine
    store = EdgeDenseStore(tmp_path / "edge", DIM)
    try:
        filtered = _count_filtered_queries(store)
        c = chunk("acme", "d0", 0, text="parcel")
        store.upsert([c], np.stack([_embed(c.text)]))
        store.publish("acme", "d0", c.generation)
        store.search("acme", _embed("parcel"), 5, False)
        assert filtered == [True]  # within QUIET_SECONDS of a write: no counting mid-ingest
    finally:
        store.close()


def test_the_dense_filter_verdicts_stay_bounded_however_many_tenants_are_searched(
    tmp_path: Path, no_quiet_period: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    # One verdict per tenant string ever searched, never dropped: ~200 MB a million tenants.
    monkeypatch.setattr(edge, "MAX_FILTER_VERDICTS", 8)
    store = EdgeDenseStore(tmp_path, DIM)
    try:
        c = chunk("acme", "d", 0, generation="g", text="refund label")
        store.upsert([c], np.stack([_embed("refund label")]))
        store.publish("acme", "d", "g")
        for i in range(50):
            assert store.search(f"t{i}", _embed("refund"), 5, False) == []
        assert len(store._matches_all) <= 8
        assert [h.chunk.chunk_id for h in store.search("acme", _embed("refund"), 5, False)] == [
            c.chunk_id
        ]
    finally:
        store.close()
