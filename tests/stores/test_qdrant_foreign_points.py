"""A point candor did not write, in candor's Qdrant collection, does not stop `verify`."""

from __future__ import annotations

import numpy as np
from qdrant_client import QdrantClient, models

from retrieval_svc.stores.base import Chunk
from tests.stores.conftest import DIM, quiet_qdrant_store


def test_inventory_skips_points_without_candors_payload() -> None:
    client = QdrantClient(":memory:")
    store = quiet_qdrant_store(client, "candor-foreign")
    chunk = Chunk("acme", "doc#p0c0", "doc#p0", "doc", "Doc", "text", 1, "", "g1")
    store.upsert([chunk], np.ones((1, DIM), dtype=np.float32))
    client.upsert(
        "candor-foreign",
        points=[models.PointStruct(id=12345, vector=[1.0] * DIM, payload={"owner": "someone"})],
    )
    assert [(c.tenant, c.document_id) for c in store.inventory()] == [("acme", "doc")]
