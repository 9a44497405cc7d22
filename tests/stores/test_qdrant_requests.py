"""The Qdrant adapter's requests: bounded upserts, and a read-only open that writes nothing."""

from __future__ import annotations

from typing import Any

import numpy as np
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

    def upsert(self, collection_name: str, points: Any, **kw: Any) -> Any:
        self.upserts.append(len(points))
        return super().upsert(collection_name, points, **kw)

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
