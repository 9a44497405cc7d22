"""The Qdrant adapter's requests: bounded upserts, and a read-only open that writes nothing."""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import pytest
from qdrant_client import QdrantClient

from retrieval_svc.stores import qdrant_store
from retrieval_svc.stores.base import Chunk
from retrieval_svc.stores.qdrant_store import QdrantDenseStore
from tests.stores.conftest import DIM, quiet_qdrant_store


class Recording(QdrantClient):
    """The real in-memory client, recording the write requests it is sent."""

    def __init__(self) -> None:
        super().__init__(":memory:")
        self.upserts: list[int] = []
        self.indexes: list[str] = []
        self.query_timeouts: list[int | None] = []

    def upsert(self, collection_name: str, points: Any, **kw: Any) -> Any:
        self.upserts.append(len(points))
        return super().upsert(collection_name, points, **kw)

    def query_points(self, collection_name: str, **kw: Any) -> Any:
        self.query_timeouts.append(kw.get("timeout"))
        return super().query_points(collection_name, **kw)

    def create_payload_index(self, collection_name: str, field_name: str, **kw: Any) -> Any:
        self.indexes.append(field_name)
        return super().create_payload_index(collection_name, field_name, **kw)


def _chunks(n: int) -> list[Chunk]:
    return [
        Chunk("t", f"d#p{i}c0", f"d#p{i}", "d", "D", f"text {i}", 1, "", "g1") for i in range(n)
    ]


def test_a_large_write_goes_in_bounded_requests_and_lands_whole() -> None:
    client = Recording()
    store = quiet_qdrant_store(client, "candor-batches")
    n = 2 * qdrant_store._UPSERT_BATCH + 7
    store.upsert(_chunks(n), np.ones((n, DIM), dtype=np.float32))
    assert client.upserts == [qdrant_store._UPSERT_BATCH] * 2 + [7]
    assert store.count() == n


def test_a_read_only_open_creates_no_payload_index() -> None:
    client = Recording()
    client.create_collection(
        "candor-bare",
        vectors_config=qdrant_store.models.VectorParams(
            size=DIM, distance=qdrant_store.models.Distance.COSINE
        ),
    )
    QdrantDenseStore(client, "candor-bare", DIM, create=False)
    assert client.indexes == []
    QdrantDenseStore(client, "candor-bare", DIM)
    assert set(client.indexes) == set(qdrant_store._PAYLOAD_INDEXES)


def test_a_collection_remembers_its_embedder_and_refuses_another() -> None:
    # A pod's data dir starts empty in Kubernetes: only the collection can say which embedder
    # filled it. Another of the same size was accepted, and both wrote into one collection.
    client = QdrantClient(":memory:")
    QdrantDenseStore(client, "candor-kb", DIM, embedder="cohere-embed-v4.0/1024")
    assert client.get_collection("candor-kb").config.metadata == {
        qdrant_store.EMBEDDER_KEY: "cohere-embed-v4.0/1024"
    }
    QdrantDenseStore(client, "candor-kb", DIM, embedder="cohere-embed-v4.0/1024")  # reopens
    with pytest.raises(qdrant_store.CollectionMismatch, match=r"cohere-embed-english-v3\.0"):
        QdrantDenseStore(client, "candor-kb", DIM, embedder="cohere-embed-english-v3.0")


def test_a_collection_that_names_no_embedder_is_adopted_but_not_by_a_read_only_open() -> None:
    client = QdrantClient(":memory:")
    QdrantDenseStore(client, "candor-old", DIM)  # built before collections named theirs
    QdrantDenseStore(client, "candor-old", DIM, create=False, embedder="minilm")
    assert not client.get_collection("candor-old").config.metadata
    QdrantDenseStore(client, "candor-old", DIM, embedder="minilm")
    assert client.get_collection("candor-old").config.metadata == {
        qdrant_store.EMBEDDER_KEY: "minilm"
    }


@pytest.mark.parametrize(("arm_timeout", "sent"), [(None, None), (2.0, 2), (0.3, 1)])
def test_a_search_asks_qdrant_to_give_up_when_the_arm_does(
    arm_timeout: float | None, sent: int | None
) -> None:
    # With only the client's timeout (5 s, sized for writes) a slow Qdrant kept each search the
    # arm had abandoned at 2 s holding one of the arm's four threads.
    client = Recording()
    store = QdrantDenseStore(client, "candor-search", DIM, search_timeout_seconds=arm_timeout)
    # Distinct scores: a tie at the limit is read with a second, longer query.
    vectors = np.random.default_rng(0).random((3, DIM), dtype=np.float32)
    store.upsert(_chunks(3), vectors)
    assert store.search("t", np.ones(DIM, dtype=np.float32), 2, include_unpublished=True)
    assert client.query_timeouts == [sent]


def test_the_factory_gives_the_qdrant_store_the_arm_timeout(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from candor.settings import load_settings
    from retrieval_svc.stores.factory import open_dense

    seen: dict[str, Any] = {}

    def opened(settings: Any, dim: int, **kw: Any) -> str:
        seen.update(kw)
        return "store"

    monkeypatch.setattr(QdrantDenseStore, "from_settings", opened)
    env = {
        "CANDOR_RETRIEVAL__DENSE_BACKEND": "qdrant",
        "CANDOR_RETRIEVAL__ARM_TIMEOUT_SECONDS": "1.5",
    }
    assert open_dense(load_settings(env=env).retrieval, DIM) == "store"  # type: ignore[comparison-overlap]
    assert seen["search_timeout_seconds"] == 1.5


class Slow(Recording):
    def query_points(self, collection_name: str, **kw: Any) -> Any:
        time.sleep(0.6)
        return super().query_points(collection_name, **kw)


def test_the_queries_that_read_a_tie_share_the_searchs_budget() -> None:
    # Each query of a widening search (copies of one text tied at the limit) was given the
    # whole budget: at 1 s per query it held its thread for ~4 s after the arm gave up.
    client = Slow()
    store = QdrantDenseStore(client, "candor-ties", DIM, search_timeout_seconds=1.0)
    store.upsert(_chunks(40), np.ones((40, DIM), dtype=np.float32))  # all tied
    started = time.monotonic()
    with pytest.raises(TimeoutError, match="budget"):
        store.search("t", np.ones(DIM, dtype=np.float32), 2, include_unpublished=True)
    assert client.query_timeouts == [1, 1]
    assert time.monotonic() - started < 1.5
    # Without a budget the tie is read whole.
    unbounded = QdrantDenseStore(client, "candor-ties", DIM, create=False)
    client.query_timeouts.clear()
    assert len(unbounded.search("t", np.ones(DIM, dtype=np.float32), 2, True)) == 2
    assert len(client.query_timeouts) > 2 and set(client.query_timeouts) == {None}
