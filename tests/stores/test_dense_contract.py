"""The DenseStore contract, run against every dense backend (see conftest.DENSE_BACKENDS)."""

from __future__ import annotations

import math
from pathlib import Path
from types import SimpleNamespace
from unittest import mock

import numpy as np
import pytest
from qdrant_client import QdrantClient, models
from qdrant_client.conversions.conversion import RestToGrpc

from candor.settings import QdrantSettings
from retrieval_svc.stores.base import DenseStore, Hit, StoredChunk
from retrieval_svc.stores.edge import EdgeDenseStore, point_id
from retrieval_svc.stores.qdrant_store import CollectionMismatch, QdrantDenseStore
from tests.stores.conftest import (
    DIM,
    Backend,
    chunk,
    quiet_qdrant_store,
    vec,
    vecs,
)

X, Y, Z = vec(1), vec(0, 1), vec(0, 0, 1)


def _publish(store: DenseStore, chunks_and_vectors: list[tuple[str, str, list[float]]]) -> None:
    """Write and publish one-chunk documents: (tenant, document_id, vector components)."""
    for tenant, doc, values in chunks_and_vectors:
        store.upsert([chunk(tenant, doc, 0)], vecs(vec(*values)))
        store.publish(tenant, doc, "g1")


def _ids(hits: list[Hit]) -> list[str]:
    return [h.chunk.chunk_id for h in hits]


def _inventory(store: DenseStore) -> set[StoredChunk]:
    items = store.inventory()
    assert len(items) == len(set(items)), "inventory lists a chunk twice"
    assert store.count() == len(items), "count() disagrees with inventory()"
    return set(items)


# --- search -----------------------------------------------------------------------------------


def test_search_is_best_first_with_cosine_scores(dense_store: DenseStore) -> None:
    _publish(
        dense_store,
        [("t", "exact", [1, 0]), ("t", "near", [3, 1]), ("t", "far", [0, 1]), ("t", "opp", [-1])],
    )
    # Not unit length: the score must be cosine, not a dot product.
    hits = dense_store.search("t", vec(2, 0), limit=10, include_unpublished=False)

    assert _ids(hits) == ["exact#p0c0", "near#p0c0", "far#p0c0", "opp#p0c0"]
    scores = [h.score for h in hits]
    assert scores == sorted(scores, reverse=True)
    assert all(-1.0 - 1e-5 <= s <= 1.0 + 1e-5 for s in scores)
    expected = [1.0, 3 / math.sqrt(10), 0.0, -1.0]
    assert scores == pytest.approx(expected, abs=1e-5)


def test_search_returns_the_whole_chunk(dense_store: DenseStore) -> None:
    c = chunk("t", "doc", 0, generation="gen-1", text="body text", title="Title", source_kind=3)
    dense_store.upsert([c], vecs(X))
    dense_store.publish("t", "doc", "gen-1")

    (hit,) = dense_store.search("t", X, limit=5, include_unpublished=False)

    assert hit.chunk == c


def test_search_respects_limit(dense_store: DenseStore) -> None:
    _publish(dense_store, [("t", f"d{i}", [1, i / 10]) for i in range(5)])

    hits = dense_store.search("t", X, limit=2, include_unpublished=False)

    assert _ids(hits) == ["d0#p0c0", "d1#p0c0"]


@pytest.mark.parametrize("write_order", ["first_to_last", "last_to_first", "one_batch_reversed"])
def test_chunks_tied_at_the_limit_are_cut_by_chunk_id(
    dense_store: DenseStore, write_order: str
) -> None:
    # Copies of one text embed alike. Which of them make the list must not follow where the
    # store keeps them (both stores kept the first or the last written).
    tied = [f"d{i:02}" for i in range(12)]
    _publish(dense_store, [("t", "best", [1, 0])])
    if write_order == "one_batch_reversed":
        dense_store.upsert([chunk("t", d, 0) for d in reversed(tied)], vecs(*[vec(1, 1)] * 12))
        for d in tied:
            dense_store.publish("t", d, "g1")
    else:
        order = tied if write_order == "first_to_last" else tied[::-1]
        _publish(dense_store, [("t", d, [1, 1]) for d in order])

    hits = dense_store.search("t", vec(1, 0.2), limit=5, include_unpublished=False)

    assert _ids(hits) == ["best#p0c0", "d00#p0c0", "d01#p0c0", "d02#p0c0", "d03#p0c0"]
    assert len({h.score for h in hits[1:]}) == 1, "the copies should tie"


def test_search_with_limit_zero_is_empty(dense_store: DenseStore) -> None:
    _publish(dense_store, [("t", "doc", [1])])

    assert dense_store.search("t", X, limit=0, include_unpublished=True) == []


def test_search_of_an_empty_tenant_is_empty(dense_store: DenseStore) -> None:
    _publish(dense_store, [("t", "doc", [1])])

    assert dense_store.search("nobody", X, limit=5, include_unpublished=True) == []


# --- staging and publishing -----------------------------------------------------------------


def test_staged_chunks_are_invisible_until_published(dense_store: DenseStore) -> None:
    dense_store.upsert([chunk("t", "doc", 0), chunk("t", "doc", 1)], vecs(X, Y))

    assert dense_store.search("t", X, limit=5, include_unpublished=False) == []
    staged = dense_store.search("t", X, limit=5, include_unpublished=True)
    assert _ids(staged) == ["doc#p0c0", "doc#p0c1"]
    assert {s.published for s in dense_store.inventory()} == {False}

    dense_store.publish("t", "doc", "g1")

    assert _ids(dense_store.search("t", X, limit=5, include_unpublished=False)) == [
        "doc#p0c0",
        "doc#p0c1",
    ]
    assert {s.published for s in dense_store.inventory()} == {True}


def test_publishing_a_new_generation_drops_the_old_one(dense_store: DenseStore) -> None:
    dense_store.upsert([chunk("t", "doc", i, "g1") for i in range(3)], vecs(X, Y, Z))
    dense_store.publish("t", "doc", "g1")
    dense_store.upsert([chunk("t", "doc", 0, "g2", text="new")], vecs(X))

    # Staged: readers still see exactly the old version.
    visible = dense_store.search("t", X, limit=10, include_unpublished=False)
    assert {h.chunk.generation for h in visible} == {"g1"}
    assert len(visible) == 3

    dense_store.publish("t", "doc", "g2")

    assert _inventory(dense_store) == {StoredChunk("t", "doc", "doc#p0c0", "g2", True)}
    (hit,) = dense_store.search("t", X, limit=10, include_unpublished=True)
    assert (hit.chunk.generation, hit.chunk.text) == ("g2", "new")


def test_discard_staged_removes_only_that_staged_generation(dense_store: DenseStore) -> None:
    dense_store.upsert([chunk("t", "doc", 0, "g1")], vecs(X))
    dense_store.publish("t", "doc", "g1")
    dense_store.upsert(
        [
            chunk("t", "doc", 0, "g2"),  # a failed write's new version
            chunk("t", "doc", 0, "g1"),  # ... that also re-sent the published one unchanged
            chunk("t", "other", 0, "g2"),
            chunk("u", "doc", 0, "g2"),
        ],
        vecs(X, X, Y, Z),
    )

    dense_store.discard_staged([("t", "doc", "g2"), ("t", "doc", "g1")])

    assert _inventory(dense_store) == {
        StoredChunk("t", "doc", "doc#p0c0", "g1", True),
        StoredChunk("t", "other", "other#p0c0", "g2", False),
        StoredChunk("u", "doc", "doc#p0c0", "g2", False),
    }


def test_publish_only_touches_its_own_document_and_tenant(dense_store: DenseStore) -> None:
    dense_store.upsert([chunk("t", "doc", 0, "g1")], vecs(X))
    dense_store.publish("t", "doc", "g1")
    dense_store.upsert([chunk("u", "doc", 0, "g1")], vecs(X))
    dense_store.publish("u", "doc", "g1")
    dense_store.upsert([chunk("t", "other", 0, "g9")], vecs(Y))
    dense_store.publish("t", "other", "g9")

    dense_store.upsert([chunk("t", "doc", 0, "g2")], vecs(X))
    dense_store.publish("t", "doc", "g2")

    assert _inventory(dense_store) == {
        StoredChunk("t", "doc", "doc#p0c0", "g2", True),
        StoredChunk("u", "doc", "doc#p0c0", "g1", True),
        StoredChunk("t", "other", "other#p0c0", "g9", True),
    }


def test_publish_many_publishes_each_document(dense_store: DenseStore) -> None:
    dense_store.upsert([chunk("t", "doc", 0, "g1")], vecs(X))
    dense_store.publish("t", "doc", "g1")
    dense_store.upsert(
        [chunk("t", "doc", 0, "g2"), chunk("u", "doc", 0, "g1"), chunk("t", "new", 0, "g5")],
        vecs(X, Y, Z),
    )
    dense_store.upsert([chunk("t", "left-staged", 0, "g1")], vecs(X))

    dense_store.publish_many([("t", "doc", "g2"), ("u", "doc", "g1"), ("t", "new", "g5")])
    dense_store.publish_many([])

    assert _inventory(dense_store) == {
        StoredChunk("t", "doc", "doc#p0c0", "g2", True),
        StoredChunk("u", "doc", "doc#p0c0", "g1", True),
        StoredChunk("t", "new", "new#p0c0", "g5", True),
        StoredChunk("t", "left-staged", "left-staged#p0c0", "g1", False),
    }


def test_publish_many_handles_many_documents(dense_store: DenseStore) -> None:
    n = 40
    dense_store.upsert([chunk("t", f"d{i}", 0) for i in range(n)], vecs(*[X] * n))

    dense_store.publish_many([("t", f"d{i}", "g1") for i in range(n)])

    assert {s.published for s in dense_store.inventory()} == {True}
    assert dense_store.count() == n


def test_repeated_upsert_is_idempotent(dense_store: DenseStore) -> None:
    chunks = [chunk("t", "doc", i) for i in range(3)]
    dense_store.upsert(chunks, vecs(X, Y, Z))
    dense_store.upsert(chunks, vecs(X, Y, Z))
    assert len(dense_store.inventory()) == dense_store.count() == 3

    dense_store.publish("t", "doc", "g1")
    dense_store.upsert(chunks, vecs(X, Y, Z))
    dense_store.publish("t", "doc", "g1")

    assert _inventory(dense_store) == {
        StoredChunk("t", "doc", f"doc#p0c{i}", "g1", True) for i in range(3)
    }


def test_re_upserting_a_published_generation_keeps_it_visible(
    request: pytest.FixtureRequest, dense_backend: Backend[DenseStore], dense_store: DenseStore
) -> None:
    """Re-ingesting an unchanged document must not hide it while (or if) the write is retried.

    KnowledgeBase writes dense (upsert) -> keyword -> dense (publish), and documents that "a
    failure part-way leaves the previous version visible in both arms". Same content means
    same generation means same point ids, so the upsert rewrites the *published* points.
    """
    chunks = [chunk("t", "doc", 0), chunk("t", "doc", 1)]
    dense_store.upsert(chunks, vecs(X, Y))
    dense_store.publish("t", "doc", "g1")

    dense_store.upsert(chunks, vecs(X, Y))  # the retry / unchanged re-ingest, before publish

    assert len(dense_store.search("t", X, limit=5, include_unpublished=False)) == 2


# --- delete -----------------------------------------------------------------------------------


def test_delete_returns_the_count_and_removes(dense_store: DenseStore) -> None:
    dense_store.upsert([chunk("t", "doc", i) for i in range(3)], vecs(X, Y, Z))
    dense_store.publish("t", "doc", "g1")
    _publish(dense_store, [("t", "keep", [1])])

    assert dense_store.delete("t", "doc") == 3
    assert dense_store.delete("t", "doc") == 0
    assert dense_store.delete("t", "never-written") == 0
    assert _ids(dense_store.search("t", X, limit=10, include_unpublished=True)) == ["keep#p0c0"]
    assert {s.document_id for s in dense_store.inventory()} == {"keep"}


def test_delete_counts_staged_chunks_too(dense_store: DenseStore) -> None:
    dense_store.upsert([chunk("t", "doc", 0, "g1")], vecs(X))
    dense_store.publish("t", "doc", "g1")
    dense_store.upsert([chunk("t", "doc", 0, "g2"), chunk("t", "doc", 1, "g2")], vecs(X, Y))

    assert dense_store.delete("t", "doc") == 3
    assert dense_store.inventory() == []
    assert dense_store.count() == 0


# --- tenants ----------------------------------------------------------------------------------


def test_tenants_are_isolated(dense_store: DenseStore) -> None:
    # Same document id and identical vectors in both tenants.
    dense_store.upsert([chunk("acme", "doc", 0, text="acme's")], vecs(X))
    dense_store.publish("acme", "doc", "g1")
    dense_store.upsert([chunk("globex", "doc", 0, text="globex's")], vecs(X))
    dense_store.publish("globex", "doc", "g1")
    dense_store.upsert([chunk("globex", "staged", 0)], vecs(X))

    for include_unpublished in (False, True):
        hits = dense_store.search("acme", X, limit=10, include_unpublished=include_unpublished)
        assert [(h.chunk.tenant, h.chunk.text) for h in hits] == [("acme", "acme's")]
    assert dense_store.search("Acme", X, limit=10, include_unpublished=True) == []

    assert dense_store.delete("acme", "doc") == 1
    hits = dense_store.search("globex", X, limit=10, include_unpublished=False)
    assert [(h.chunk.tenant, h.chunk.text) for h in hits] == [("globex", "globex's")]


# --- inventory and durability -----------------------------------------------------------------


def test_inventory_reports_every_chunk(dense_store: DenseStore) -> None:
    assert dense_store.inventory() == []
    assert dense_store.count() == 0
    dense_store.upsert([chunk("a", "d1", 0, "g1"), chunk("a", "d1", 1, "g1")], vecs(X, Y))
    dense_store.publish("a", "d1", "g1")
    dense_store.upsert([chunk("b", "d2", 0, "g7")], vecs(Z))

    assert _inventory(dense_store) == {
        StoredChunk("a", "d1", "d1#p0c0", "g1", True),
        StoredChunk("a", "d1", "d1#p0c1", "g1", True),
        StoredChunk("b", "d2", "d2#p0c0", "g7", False),
    }


def test_inventory_pages_through_large_stores(dense_store: DenseStore) -> None:
    n = 2500  # more than one scroll page of 1000
    chunks = [chunk("t", "big", i) for i in range(n)]
    rng = np.random.default_rng(0)
    dense_store.upsert(chunks, rng.normal(size=(n, DIM)).astype(np.float32))

    items = dense_store.inventory()

    assert len(items) == dense_store.count() == n
    assert {s.chunk_id for s in items} == {c.chunk_id for c in chunks}


def test_data_survives_reopening(dense_backend: Backend[DenseStore]) -> None:
    store = dense_backend.new()
    _publish(store, [("t", "doc", [1])])
    store.upsert([chunk("t", "staged", 0)], vecs(Y))

    store = dense_backend.reopen(store)

    assert _inventory(store) == {
        StoredChunk("t", "doc", "doc#p0c0", "g1", True),
        StoredChunk("t", "staged", "staged#p0c0", "g1", False),
    }
    assert _ids(store.search("t", X, limit=5, include_unpublished=False)) == ["doc#p0c0"]


# --- Qdrant adapter specifics -----------------------------------------------------------------


def test_qdrant_creates_a_cosine_collection_with_payload_indexes() -> None:
    client = QdrantClient(":memory:")
    with mock.patch.object(
        client, "create_payload_index", wraps=client.create_payload_index
    ) as create_index:
        quiet_qdrant_store(client, "chunks", dim=5)

    params = client.get_collection("chunks").config.params.vectors
    assert isinstance(params, models.VectorParams)
    assert (params.size, params.distance) == (5, models.Distance.COSINE)
    schemas = {c.args[1]: c.kwargs["field_schema"] for c in create_index.call_args_list}
    assert set(schemas) == {
        "tenant",
        "document_id",
        "parent_id",
        "visibility",
        "generation",
        "source_kind",
    }
    assert schemas["source_kind"] == models.PayloadSchemaType.INTEGER
    for name in ("document_id", "parent_id", "visibility", "generation"):
        assert schemas[name] == models.PayloadSchemaType.KEYWORD
    assert schemas["tenant"].type == models.KeywordIndexType.KEYWORD
    # Every index converts to a gRPC request (prefer_grpc is the production path).
    for schema in schemas.values():
        if isinstance(schema, models.KeywordIndexParams):
            RestToGrpc.convert_payload_schema_params(schema)
        else:
            RestToGrpc.convert_payload_schema_type(schema)


@pytest.mark.parametrize(
    ("size", "distance", "message"),
    [
        (4, models.Distance.COSINE, "size 4 with Cosine distance, but the configured embedder "),
        (DIM, models.Distance.DOT, f"size {DIM} with Dot distance"),
    ],
)
def test_qdrant_refuses_a_collection_built_for_other_vectors(
    size: int, distance: models.Distance, message: str
) -> None:
    client = QdrantClient(":memory:")
    client.create_collection("chunks", models.VectorParams(size=size, distance=distance))

    with pytest.raises(CollectionMismatch, match=message) as err:
        quiet_qdrant_store(client, "chunks")
    assert f"needs size {DIM} with Cosine distance" in str(err.value)


def test_qdrant_refuses_a_collection_with_named_vectors() -> None:
    client = QdrantClient(":memory:")
    client.create_collection(
        "chunks", {"dense": models.VectorParams(size=DIM, distance=models.Distance.COSINE)}
    )

    with pytest.raises(CollectionMismatch, match="named vectors dense"):
        quiet_qdrant_store(client, "chunks")


def test_qdrant_uses_the_edge_point_ids() -> None:
    client = QdrantClient(":memory:")
    store = quiet_qdrant_store(client, "chunks")
    store.upsert([chunk("t", "doc", 0)], vecs(X))

    (record,) = client.scroll("chunks")[0]

    assert str(record.id) == point_id("t", "doc#p0c0", "g1")


def test_qdrant_requests_convert_to_grpc() -> None:
    """The in-memory engine takes REST models; the production client sends them over gRPC."""
    client = QdrantClient(":memory:")
    store = quiet_qdrant_store(client, "chunks")
    with (
        mock.patch.object(client, "upsert", wraps=client.upsert) as upsert,
        mock.patch.object(client, "batch_update_points", wraps=client.batch_update_points) as batch,
        mock.patch.object(client, "query_points", wraps=client.query_points) as query,
    ):
        store.upsert([chunk("t", "doc", 0)], vecs(X))
        store.publish("t", "doc", "g1")
        store.search("t", X, limit=3, include_unpublished=False)

    RestToGrpc.convert_filter(upsert.call_args.kwargs["update_filter"])
    for point in upsert.call_args.kwargs["points"]:
        RestToGrpc.convert_point_struct(point)
    for op in batch.call_args.kwargs["update_operations"]:
        RestToGrpc.convert_update_operation(op)
    RestToGrpc.convert_filter(query.call_args.kwargs["query_filter"])


def test_qdrant_publish_many_splits_large_batches() -> None:
    client = QdrantClient(":memory:")
    store = quiet_qdrant_store(client, "chunks")
    n = 40
    store.upsert([chunk("t", f"d{i}", 0) for i in range(n)], vecs(*[X] * n))

    with (
        mock.patch("retrieval_svc.stores.qdrant_store._PUBLISH_BATCH", 16),
        mock.patch.object(client, "batch_update_points", wraps=client.batch_update_points) as b,
    ):
        store.publish_many([("t", f"d{i}", "g1") for i in range(n)])

    assert [len(c.kwargs["update_operations"]) for c in b.call_args_list] == [32, 32, 16]
    assert {s.published for s in store.inventory()} == {True}


def test_qdrant_from_settings_builds_the_client(tmp_path: Path) -> None:
    key_file = tmp_path / "api-key"
    key_file.write_text("s3cret\n")
    settings = QdrantSettings(
        url="https://qdrant.internal:6333",
        prefer_grpc=True,
        grpc_port=6400,
        api_key="ignored-when-a-file-is-set",
        api_key_file=str(key_file),
        https=True,
        collection="kb",
        timeout_seconds=2.5,
    )
    with (
        mock.patch("retrieval_svc.stores.qdrant_store.QdrantClient") as client_cls,
        mock.patch.object(QdrantDenseStore, "_ensure_collection") as ensure,
    ):
        store = QdrantDenseStore.from_settings(settings, dim=384)

    client_cls.assert_called_once_with(
        url="https://qdrant.internal:6333",
        prefer_grpc=True,
        grpc_port=6400,
        https=True,
        api_key="s3cret",
        timeout=3,
    )
    ensure.assert_called_once_with(True)
    store.close()
    client_cls.return_value.close.assert_called_once_with()


def test_qdrant_from_settings_refuses_https_with_a_plain_http_url() -> None:
    settings = QdrantSettings(url="http://qdrant:6333", https=True)

    with pytest.raises(ValueError, match="plain http"):
        QdrantDenseStore.from_settings(settings, dim=DIM)


def test_qdrant_from_settings_closes_the_client_when_the_collection_is_wrong() -> None:
    with (
        mock.patch("retrieval_svc.stores.qdrant_store.QdrantClient") as client_cls,
        mock.patch.object(
            QdrantDenseStore, "_ensure_collection", side_effect=CollectionMismatch("x")
        ),
        pytest.raises(CollectionMismatch),
    ):
        QdrantDenseStore.from_settings(QdrantSettings(), dim=DIM)
    client_cls.return_value.close.assert_called_once_with()


def test_edge_inventory_reports_a_point_whose_payload_is_lost(tmp_path: Path) -> None:
    store = EdgeDenseStore(tmp_path, DIM)
    store.upsert([chunk("a", "d1", 0)], vecs(X))
    shard = store._shard

    class Damaged:
        """A segment that kept a point's vector but lost its payload (the shard still opens)."""

        def __getattr__(self, name: str) -> object:
            return getattr(shard, name)

        def scroll(self, request: object) -> tuple[list[object], object]:
            records, offset = shard.scroll(request)
            return [*records, SimpleNamespace(id="lost-1", payload=None)], offset

    store._shard = Damaged()  # type: ignore[assignment]
    try:
        assert sorted(store.inventory(), key=lambda s: s.readable) == [
            StoredChunk("", "lost-1", "", "", False, readable=False),
            StoredChunk("a", "d1", "d1#p0c0", "g1", False),
        ]
    finally:
        store._shard = shard
        store.close()
