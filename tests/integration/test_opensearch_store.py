"""OpenSearchKeywordStore against a real OpenSearch 2.x node (tests/opensearch_node_fixture.py)."""

from __future__ import annotations

import copy
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace as dc_replace
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np
import numpy.typing as npt
import pytest
from opensearchpy import OpenSearch
from opensearchpy.exceptions import ConnectionError as OpenSearchConnectionError
from qdrant_client import QdrantClient

from candor.settings import OpenSearchSettings
from retrieval_svc.ingest import SourceDocument
from retrieval_svc.knowledge_base import KnowledgeBase, environment_failure
from retrieval_svc.stores import opensearch_store
from retrieval_svc.stores.base import Chunk, KeywordStore, StoredChunk, StoreMissing
from retrieval_svc.stores.opensearch_store import (
    OpenSearchBlocked,
    OpenSearchKeywordStore,
    OpenSearchMappingError,
    OpenSearchReadError,
    chunk_doc_id,
)
from retrieval_svc.stores.qdrant_store import QdrantDenseStore
from tests.opensearch_node_fixture import OpenSearchNode

# The first test also pays for the session node: start-up (~8 s) and, on a machine whose Maven
# repository is cold, the jar download (~35 s here), hence more than the suite's 120 s default.
pytestmark = [pytest.mark.opensearch, pytest.mark.timeout(300)]

StoreFactory = Callable[..., OpenSearchKeywordStore]


def chunk(
    tenant: str,
    document_id: str,
    n: int,
    text: str,
    *,
    title: str = "",
    generation: str = "g1",
    parent: int = 0,
) -> Chunk:
    return Chunk(
        tenant=tenant,
        chunk_id=f"{document_id}#p{parent}c{n}",
        parent_id=f"{document_id}#p{parent}",
        document_id=document_id,
        title=title,
        text=text,
        source_kind=1,
        uri=f"kb://{document_id}",
        generation=generation,
    )


REFUNDS = "You can void an unused shipping label within 30 days of buying it for a refund."
TWO_FACTOR = "Turn on two-factor authentication under Settings, then Security."
WEBHOOKS = "Webhook deliveries are retried with exponential backoff for up to 24 hours."


@pytest.fixture
def index_name(client: OpenSearch) -> Iterator[str]:
    name = f"candor-it-{uuid.uuid4().hex[:12]}"
    yield name
    client.indices.delete(index=name, ignore_unavailable=True)


@pytest.fixture
def make_store(opensearch_url: str, index_name: str) -> Iterator[StoreFactory]:
    opened: list[OpenSearchKeywordStore] = []

    def make(**overrides: object) -> OpenSearchKeywordStore:
        settings = OpenSearchSettings(hosts=(opensearch_url,), index=index_name, timeout_seconds=10)
        store = OpenSearchKeywordStore(dc_replace(settings, **overrides))
        opened.append(store)
        return store

    yield make
    for s in opened:
        s.close()


@pytest.fixture
def store(make_store: StoreFactory) -> OpenSearchKeywordStore:
    return make_store()


def inventory_set(store: OpenSearchKeywordStore) -> set[StoredChunk]:
    return set(store.inventory())


# --- the index --------------------------------------------------------------------------------


def test_creates_the_index_with_the_explicit_mapping(
    store: OpenSearchKeywordStore, client: OpenSearch, index_name: str
) -> None:
    body = client.indices.get_mapping(index=index_name)[index_name]["mappings"]
    props = body["properties"]
    assert body["dynamic"] == "strict"
    for name in ("title", "text"):
        assert props[name] == {"type": "text", "analyzer": "candor_en_stem"}
    for name in ("tenant", "document_id", "parent_id", "chunk_id", "generation", "uri"):
        assert props[name] == {"type": "keyword"}
    assert props["source_kind"] == {"type": "integer"}
    assert props["published"] == {"type": "boolean"}
    settings = client.indices.get_settings(index=index_name)[index_name]["settings"]["index"]
    assert settings["number_of_shards"] == "1"
    assert opensearch_store.analysis_differences(settings) == []


def test_reopening_an_index_it_created_is_fine(make_store: StoreFactory) -> None:
    first = make_store()
    first.replace("t1", "refunds", [chunk("t1", "refunds", 0, REFUNDS)])
    second = make_store()
    assert [h.chunk.document_id for h in second.search("t1", "refund", 5)] == ["refunds"]


def test_an_incompatible_existing_mapping_is_refused_naming_the_fields(
    make_store: StoreFactory, client: OpenSearch, index_name: str
) -> None:
    client.indices.create(
        index=index_name,
        body={
            "settings": opensearch_store.INDEX_SETTINGS,
            "mappings": {
                "properties": {
                    "tenant": {"type": "text"},  # analysed: "Acme" would match "acme corp"
                    "title": {"type": "text"},  # standard analyzer: no stemming
                    "text": {"type": "text", "analyzer": "candor_en_stem"},
                    "source_kind": {"type": "keyword"},
                }
            },
        },
    )
    with pytest.raises(OpenSearchMappingError) as err:
        make_store()
    message = str(err.value)
    assert index_name in message
    assert "tenant: expected keyword, found text (analyzer=standard)" in message
    assert (
        "title: expected text (analyzer=candor_en_stem), found text (analyzer=standard)" in message
    )
    assert "source_kind: expected integer, found keyword" in message
    assert "document_id: expected keyword, found missing" in message
    assert "text:" not in message.replace("found text", "")


def test_an_index_made_with_the_english_analyzer_is_refused_saying_to_reindex(
    make_store: StoreFactory, client: OpenSearch, index_name: str
) -> None:
    # What candor created before its analysis matched tantivy's en_stem.
    mapping = copy.deepcopy(opensearch_store.MAPPING)
    for name in ("title", "text"):
        mapping["properties"][name] = {"type": "text", "analyzer": "english"}
    client.indices.create(
        index=index_name,
        body={"settings": {"index": {"number_of_shards": 1}}, "mappings": mapping},
    )
    with pytest.raises(OpenSearchMappingError) as err:
        make_store()
    message = str(err.value)
    assert (
        "title: expected text (analyzer=candor_en_stem), found text (analyzer=english)" in message
    )
    assert "text: expected text (analyzer=candor_en_stem), found text (analyzer=english)" in message
    assert "indexed again" in message and "Reindex the OpenSearch index" in message


def test_an_analyzer_of_candors_name_built_otherwise_is_refused(
    make_store: StoreFactory, client: OpenSearch, index_name: str
) -> None:
    settings = copy.deepcopy(opensearch_store.INDEX_SETTINGS)
    analysis = settings["index"]["analysis"]
    analysis["filter"]["candor_under_40_bytes"]["max"] = 255
    analysis["analyzer"]["candor_en_stem"]["filter"].append("stop")
    client.indices.create(
        index=index_name, body={"settings": settings, "mappings": opensearch_store.MAPPING}
    )
    with pytest.raises(OpenSearchMappingError) as err:
        make_store()
    message = str(err.value)
    assert "analysis filter candor_under_40_bytes: max not candor's" in message
    assert "analysis analyzer candor_en_stem: filter not candor's" in message


def _index_with_alias(client: OpenSearch, alias: str, *indices: str) -> None:
    for name in indices:
        client.indices.create(
            index=name,
            body={
                "settings": opensearch_store.INDEX_SETTINGS,
                "mappings": opensearch_store.MAPPING,
            },
        )
    client.indices.put_alias(index=",".join(indices), name=alias)


def test_an_alias_over_one_index_is_used(
    make_store: StoreFactory, client: OpenSearch, index_name: str
) -> None:
    _index_with_alias(client, index_name, f"{index_name}-blue")
    try:
        store = make_store()
        store.replace("t1", "refunds", [chunk("t1", "refunds", 0, REFUNDS)])
        assert [c.chunk_id for c in store.get("t1", ["refunds#p0c0"])] == ["refunds#p0c0"]
        assert [h.chunk.document_id for h in store.search("t1", "refund", 5)] == ["refunds"]
    finally:
        client.indices.delete(index=f"{index_name}-blue")


def test_an_alias_over_two_indices_is_refused_naming_them(
    make_store: StoreFactory, client: OpenSearch, index_name: str
) -> None:
    # A blue/green switch left half done: writes would go to one index (or fail without a write
    # index), scores would mix two sets of BM25 statistics, and get() found nothing.
    _index_with_alias(client, index_name, f"{index_name}-blue", f"{index_name}-green")
    try:
        with pytest.raises(OpenSearchMappingError) as err:
            make_store()
        assert f"names 2 indices ({index_name}-blue, {index_name}-green)" in str(err.value)
    finally:
        client.indices.delete(index=f"{index_name}-blue,{index_name}-green")


def test_get_raises_on_a_chunk_it_cannot_read_instead_of_calling_it_missing(
    make_store: StoreFactory, client: OpenSearch, index_name: str
) -> None:
    _index_with_alias(client, index_name, f"{index_name}-blue")
    try:
        store = make_store()
        store.replace("t1", "refunds", [chunk("t1", "refunds", 0, REFUNDS)])
        # The alias widened behind the running store's back: mget answers each id with an error.
        _index_with_alias(client, index_name, f"{index_name}-green")
        with pytest.raises(OpenSearchReadError, match="could not read 1 of 1 chunks"):
            store.get("t1", ["refunds#p0c0"])
    finally:
        client.indices.delete(index=f"{index_name}-blue,{index_name}-green")


@pytest.mark.parametrize(
    ("field", "index", "found"),
    [
        ({"similarity": "boolean"}, {}, "found text (analyzer=candor_en_stem, similarity=boolean)"),
        (
            {"norms": False, "index_options": "docs"},
            {},
            "found text (analyzer=candor_en_stem, norms=false, index_options=docs)",
        ),
        (
            {"index_options": "freqs"},
            {},
            "found text (analyzer=candor_en_stem, index_options=freqs)",
        ),
        (
            {},
            {"similarity": {"default": {"type": "boolean"}}},
            "similarity.default: expected type=BM25, k1=1.2, b=0.75, found type=boolean",
        ),
        (
            {},
            {"similarity": {"default": {"type": "BM25", "k1": 2.0}}},
            "similarity.default: expected type=BM25, k1=1.2, b=0.75, found k1=2.0, type=BM25",
        ),
    ],
)
def test_text_fields_scored_otherwise_than_bm25_are_refused(
    make_store: StoreFactory,
    client: OpenSearch,
    index_name: str,
    field: dict[str, object],
    index: dict[str, object],
    found: str,
) -> None:
    # Each was accepted and searched: the "raw BM25" the gate calibrates on was then not BM25.
    mapping = copy.deepcopy(opensearch_store.MAPPING)
    for name in ("title", "text"):
        mapping["properties"][name].update(field)
    settings = copy.deepcopy(opensearch_store.INDEX_SETTINGS)
    settings["index"].update(index)
    client.indices.create(index=index_name, body={"settings": settings, "mappings": mapping})
    with pytest.raises(OpenSearchMappingError) as err:
        make_store()
    assert found in str(err.value)


def test_an_index_with_the_right_fields_but_other_settings_is_used_with_a_warning(
    make_store: StoreFactory,
    client: OpenSearch,
    index_name: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    mapping = {"properties": opensearch_store.MAPPING["properties"]}  # dynamic left at true
    client.indices.create(
        index=index_name,
        body={
            "settings": {"index": {"number_of_shards": 3, "analysis": opensearch_store.ANALYSIS}},
            "mappings": mapping,
        },
    )
    store = make_store()
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert any("has 3 shards" in w for w in warnings), warnings
    assert any("not dynamic: strict" in w for w in warnings), warnings
    store.replace("t1", "refunds", [chunk("t1", "refunds", 0, REFUNDS)])
    assert [h.chunk.document_id for h in store.search("t1", "refund", 5)] == ["refunds"]


def test_an_index_it_created_gets_no_warning(
    make_store: StoreFactory, caplog: pytest.LogCaptureFixture
) -> None:
    make_store()
    assert not [r for r in caplog.records if r.levelname == "WARNING"]


# --- search -----------------------------------------------------------------------------------


def test_replace_then_search_returns_the_chunk_with_a_positive_bm25_score(
    store: OpenSearchKeywordStore,
) -> None:
    refunds = chunk("t1", "refunds", 0, REFUNDS, title="Refunds for Unused Labels")
    store.replace("t1", "refunds", [refunds])
    store.replace("t1", "2fa", [chunk("t1", "2fa", 0, TWO_FACTOR, title="Two-factor")])
    store.replace("t1", "hooks", [chunk("t1", "hooks", 0, WEBHOOKS, title="Webhooks")])

    hits = store.search("t1", "How do I get a refund for labels I didn't use?", 10)

    assert hits[0].chunk == refunds  # every field round-trips
    assert hits[0].score > 0
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    # English stemming on both fields: "refunded" matches "refund", "labelling" matches "label".
    assert store.search("t1", "refunded labelling", 10)[0].chunk.document_id == "refunds"


def test_query_text_is_never_parsed_as_query_syntax(store: OpenSearchKeywordStore) -> None:
    store.replace("t1", "refunds", [chunk("t1", "refunds", 0, REFUNDS)])
    for query in ('refund AND (label OR "void"', "title:refund^9 NOT label*", "a/b\\c {}[]~!"):
        store.search("t1", query, 5)  # no parse error
    assert store.search("t1", '"refund" AND', 5)[0].chunk.document_id == "refunds"
    assert store.search("t1", "   ", 5) == []
    assert store.search("t1", "?! AND OR", 5) == []  # no word left to search for
    assert store.search("t1", "refund", 0) == []


def test_limit_bounds_the_hits(store: OpenSearchKeywordStore) -> None:
    chunks = [chunk("t1", "labels", i, f"label number {i} " + REFUNDS) for i in range(6)]
    store.replace("t1", "labels", chunks)
    assert len(store.search("t1", "label", 4)) == 4
    assert len(store.search("t1", "label", 50)) == 6


def test_the_score_is_raw_bm25_and_the_tenant_filter_adds_nothing(
    store: OpenSearchKeywordStore, client: OpenSearch, index_name: str
) -> None:
    for tenant in ("acme", "globex"):
        store.replace(tenant, "refunds", [chunk(tenant, "refunds", 0, REFUNDS, title="Refunds")])
        store.replace(tenant, "2fa", [chunk(tenant, "2fa", 0, TWO_FACTOR, title="Security")])
    query = "refund for an unused label"

    acme = store.search("acme", query, 10)
    globex = store.search("globex", query, 10)

    # The same document in two tenants scores the same in each ...
    assert [h.chunk.document_id for h in acme] == [h.chunk.document_id for h in globex]
    assert [h.score for h in acme] == pytest.approx([h.score for h in globex], rel=1e-6)
    # ... and exactly what the text query alone scores it with no tenant clause at all.
    unfiltered = client.search(
        index=index_name,
        body={
            "query": {
                "multi_match": {"query": query, "fields": ["title", "text"], "type": "most_fields"}
            }
        },
    )["hits"]["hits"]
    by_id = {h["_id"]: h["_score"] for h in unfiltered}
    for hit in acme:
        assert hit.score == pytest.approx(by_id[chunk_doc_id("acme", hit.chunk.chunk_id)])


def test_scores_sum_over_title_and_text(store: OpenSearchKeywordStore) -> None:
    in_text = chunk("t1", "a", 0, "refund policy details", title="Policies")
    in_both = chunk("t1", "b", 0, "refund policy details", title="Refund")
    store.replace("t1", "a", [in_text])
    store.replace("t1", "b", [in_both])
    hits = {h.chunk.document_id: h.score for h in store.search("t1", "refund", 5)}
    assert hits["b"] > hits["a"] > 0  # most_fields: a title match adds to the text match


# --- tenancy ----------------------------------------------------------------------------------


def test_tenants_are_isolated(store: OpenSearchKeywordStore) -> None:
    store.replace("acme", "refunds", [chunk("acme", "refunds", 0, REFUNDS)])
    store.replace("globex", "hooks", [chunk("globex", "hooks", 0, WEBHOOKS)])
    # Same document id in another tenant is another document.
    store.replace("globex", "refunds", [chunk("globex", "refunds", 0, TWO_FACTOR)])

    assert [h.chunk.tenant for h in store.search("acme", "refund webhook", 10)] == ["acme"]
    assert {h.chunk.document_id for h in store.search("globex", "refund webhook", 10)} == {"hooks"}
    assert store.search("initech", "refund webhook", 10) == []
    assert store.search("ACME", "refund", 10) == []  # tenant is an exact keyword

    assert store.delete("globex", "refunds") == 1
    assert [h.chunk.tenant for h in store.search("acme", "refund", 10)] == ["acme"]


def test_an_index_deleted_behind_its_back_comes_back_with_its_mapping(
    store: OpenSearchKeywordStore, client: OpenSearch, index_name: str
) -> None:
    store.replace("acme", "refunds", [chunk("acme", "refunds", 0, REFUNDS)])
    client.indices.delete(index=index_name)
    # Written to a missing index, OpenSearch would map tenant as analysed text ("acme" matching
    # "Acme-Corp") and document_id likewise, so deletes would miss.
    store.replace("Acme-Corp", "secret", [chunk("Acme-Corp", "secret", 0, REFUNDS)])
    store.replace("acme", "refunds", [chunk("acme", "refunds", 0, REFUNDS)])
    assert [h.chunk.tenant for h in store.search("acme", "refund", 10)] == ["acme"]
    assert [h.chunk.tenant for h in store.search("Acme-Corp", "refund", 10)] == ["Acme-Corp"]
    assert store.delete("Acme-Corp", "secret") == 1
    mapping = client.indices.get_mapping(index=index_name)[index_name]["mappings"]
    assert mapping["dynamic"] == "strict" and mapping["properties"]["tenant"]["type"] == "keyword"


def test_a_write_to_an_index_that_exists_checks_it_in_one_round_trip(
    store: OpenSearchKeywordStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    store.replace("acme", "refunds", [chunk("acme", "refunds", 0, REFUNDS)])
    asked: list[str] = []
    indices = store._client.indices
    for name in ("exists", "get", "create"):
        real = getattr(indices, name)

        def spy(*args: Any, _real: Any = real, _name: str = name, **kwargs: Any) -> Any:
            asked.append(_name)
            return _real(*args, **kwargs)

        monkeypatch.setattr(indices, name, spy)

    store.replace("acme", "refunds", [chunk("acme", "refunds", 0, REFUNDS + " Again.")])

    assert asked == ["get"]  # exists-then-get was two, on every write


# --- writes -----------------------------------------------------------------------------------


def test_replace_with_new_chunks_leaves_no_orphans(store: OpenSearchKeywordStore) -> None:
    v1 = [
        chunk("t1", "guide", 0, "Old intro about parcels.", generation="v1"),
        chunk("t1", "guide", 1, "Old section about pallets.", generation="v1"),
        chunk("t1", "guide", 2, "Old section about freight.", generation="v1", parent=1),
    ]
    store.replace("t1", "guide", v1)
    store.replace("t1", "other", [chunk("t1", "other", 0, "Pallets elsewhere.")])
    assert len(store.search("t1", "pallets", 10)) == 2

    v2 = [chunk("t1", "guide", 0, "New intro about envelopes.", generation="v2")]
    store.replace("t1", "guide", v2)

    assert {c for c in inventory_set(store) if c.document_id == "guide"} == {
        StoredChunk("t1", "guide", "guide#p0c0", "v2", True)
    }
    assert [h.chunk.document_id for h in store.search("t1", "pallets freight", 10)] == ["other"]
    assert store.search("t1", "envelopes", 10)[0].chunk == v2[0]


def test_replace_with_no_chunks_empties_the_document(store: OpenSearchKeywordStore) -> None:
    store.replace("t1", "guide", [chunk("t1", "guide", i, REFUNDS) for i in range(3)])
    store.replace("t1", "guide", [])
    assert store.inventory() == []


def test_a_retried_replace_is_idempotent(store: OpenSearchKeywordStore) -> None:
    chunks = [chunk("t1", "refunds", i, f"{REFUNDS} part {i}") for i in range(3)]
    store.replace("t1", "refunds", chunks)
    before = inventory_set(store)
    store.replace("t1", "refunds", chunks)
    store.replace("t1", "refunds", chunks)

    assert inventory_set(store) == before
    assert len(store.inventory()) == 3
    hits = store.search("t1", "refund", 10)
    assert sorted(h.chunk.chunk_id for h in hits) == sorted(c.chunk_id for c in chunks)


def test_replace_many_swaps_a_batch_across_bulk_and_delete_batches(
    store: OpenSearchKeywordStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(opensearch_store, "_BULK_BATCH", 3)
    monkeypatch.setattr(opensearch_store, "_DELETE_BATCH", 2)
    docs = [f"doc{i}" for i in range(5)]
    store.replace_many(
        [
            (t, d, [chunk(t, d, n, WEBHOOKS, generation="v1") for n in range(3)])
            for t in ("a", "b")
            for d in docs
        ]
    )
    assert store.count() == 30

    # v2 of tenant a only: fewer chunks, different ids; one document dropped to no chunks.
    v2 = [("a", d, [chunk("a", d, 7, REFUNDS, generation="v2")]) for d in docs[:4]]
    store.replace_many([*v2, ("a", "doc4", [])])

    listed = inventory_set(store)
    assert {c for c in listed if c.tenant == "a"} == {
        StoredChunk("a", d, f"{d}#p0c7", "v2", True) for d in docs[:4]
    }
    assert len([c for c in listed if c.tenant == "b"]) == 15  # the other tenant is untouched


def test_replace_many_keeps_the_last_copy_of_a_repeated_document(
    store: OpenSearchKeywordStore,
) -> None:
    first = [chunk("t1", "guide", n, WEBHOOKS, generation="v1") for n in range(2)]
    last = [chunk("t1", "guide", 5, REFUNDS, generation="v2")]
    store.replace_many([("t1", "guide", first), ("t1", "guide", last)])
    assert store.inventory() == [StoredChunk("t1", "guide", "guide#p0c5", "v2", True)]


def test_a_large_document_is_replaced_in_batches(store: OpenSearchKeywordStore) -> None:
    big = [
        chunk("t1", "manual", n, f"section {n} {WEBHOOKS}", generation="v1") for n in range(2000)
    ]
    store.replace("t1", "manual", big)
    assert store.count() == 2000
    smaller = big[:1500]
    store.replace("t1", "manual", smaller)
    assert store.count() == 1500
    assert store.delete("t1", "manual") == 1500


def test_replace_refuses_chunks_of_another_document(store: OpenSearchKeywordStore) -> None:
    with pytest.raises(ValueError, match="belongs to"):
        store.replace("t1", "refunds", [chunk("t2", "refunds", 0, REFUNDS)])
    assert store.inventory() == []


class _OnesEmbedder:
    name, dim = "test/ones-8", 8

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        return np.full((len(texts), 8), 8**-0.5, dtype=np.float32)


def test_an_index_blocked_at_the_flood_stage_fails_a_batch_at_once_with_the_cause(
    store: OpenSearchKeywordStore, client: OpenSearch, index_name: str
) -> None:
    kb = KnowledgeBase(_OnesEmbedder(), QdrantDenseStore(QdrantClient(":memory:"), "c", 8), store)
    bulk = mock.patch.object(store, "_bulk_index", wraps=store._bulk_index)
    client.indices.put_settings(
        index=index_name, body={"index.blocks.read_only_allow_delete": True}
    )
    try:
        with pytest.raises(OpenSearchBlocked, match="flood-stage watermark"):
            store.replace("t1", "refunds", [chunk("t1", "refunds", 0, REFUNDS)])
        docs = [SourceDocument("t1", f"d{i}", "T", f"Refund policy {i}.", 1) for i in range(40)]
        with bulk as calls:
            results = kb.upsert(docs)
    finally:
        client.indices.put_settings(
            index=index_name, body={"index.blocks.read_only_allow_delete": None}
        )
    # Each document alone would meet the same block (40 documents took 404 bulk requests).
    assert calls.call_count == 1
    assert {r.outcome for r in results} == {"failed"}
    assert all(
        r.error.startswith("OpenSearchBlocked: the OpenSearch index is blocked") for r in results
    )


def test_an_index_blocked_for_deletes_too_says_so(
    store: OpenSearchKeywordStore, client: OpenSearch, index_name: str
) -> None:
    store.replace("t1", "refunds", [chunk("t1", "refunds", 0, REFUNDS)])
    client.indices.put_settings(index=index_name, body={"index.blocks.write": True})
    try:
        for write in (
            lambda: store.delete("t1", "refunds"),
            lambda: store.replace("t1", "refunds", []),
        ):
            with pytest.raises(OpenSearchBlocked) as err:
                write()
            assert environment_failure(err.value)
            assert "FORBIDDEN/8/index write" in str(err.value)
    finally:
        client.indices.put_settings(index=index_name, body={"index.blocks.write": None})


def test_delete_returns_how_many_chunks_went(store: OpenSearchKeywordStore) -> None:
    store.replace("t1", "refunds", [chunk("t1", "refunds", i, REFUNDS) for i in range(3)])
    store.replace("t1", "hooks", [chunk("t1", "hooks", 0, WEBHOOKS)])

    assert store.delete("t1", "refunds") == 3
    assert store.delete("t1", "refunds") == 0
    assert store.delete("t1", "never-written") == 0
    assert store.search("t1", "refund", 10) == []
    assert [c.document_id for c in store.inventory()] == ["hooks"]


def test_inventory_lists_every_chunk_of_every_tenant_across_scroll_pages(
    store: OpenSearchKeywordStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(opensearch_store, "_SCROLL_PAGE", 2)
    expected = set()
    for tenant in ("acme", "globex"):
        for doc in ("a", "b"):
            chunks = [chunk(tenant, doc, i, WEBHOOKS, generation=f"{doc}1") for i in range(2)]
            store.replace(tenant, doc, chunks)
            expected |= {StoredChunk(tenant, doc, c.chunk_id, f"{doc}1", True) for c in chunks}

    listed = store.inventory()
    assert len(listed) == 8
    assert set(listed) == expected
    assert store.count() == 8


@pytest.mark.parametrize(
    "foreign",
    [
        {"tenant": "t1", "text": "refund by hand", "chunk_id": "x"},  # no parent_id, generation
        {"tenant": "t1", "document_id": "d", "text": "refund", "chunk_id": "x", "parent_id": "p"},
        {"tenant": "t1", "text": ["refund", "twice"]},  # a list where a string belongs
        {"title": "refund"},
    ],
)
def test_a_document_candor_did_not_write_is_skipped_not_fatal(
    store: OpenSearchKeywordStore,
    client: OpenSearch,
    index_name: str,
    caplog: pytest.LogCaptureFixture,
    foreign: dict[str, object],
) -> None:
    mine = chunk("t1", "refunds", 0, REFUNDS)
    store.replace("t1", "refunds", [mine])
    client.index(index=index_name, id="foreign", body=foreign, refresh=True)

    # One of them made search() and inventory() raise KeyError for every query it matched.
    assert [h.chunk for h in store.search("t1", "refund twice", 10)] == [mine]
    assert store.get("t1", ["refunds#p0c0"]) == [mine]
    held = {(c.tenant, c.document_id, c.chunk_id) for c in store.inventory()}
    assert ("t1", "refunds", "refunds#p0c0") in held
    if "document_id" in foreign:  # identifiable: verify lists it, as the Qdrant store does
        assert held == {("t1", "refunds", "refunds#p0c0"), ("t1", "d", "x")}
    else:
        assert len(held) == 1
    assert store.count() == 2
    assert any(
        r.getMessage() == "skipping a document without candor's fields" for r in caplog.records
    )


def test_satisfies_the_keyword_store_protocol(store: OpenSearchKeywordStore) -> None:
    typed: KeywordStore = store
    assert typed.search("t1", "anything", 3) == []


# --- settings ---------------------------------------------------------------------------------


def test_password_file_wins_over_password(tmp_path: Path) -> None:
    secret = tmp_path / "password"
    secret.write_text("s3cret\n", encoding="utf-8")
    settings = OpenSearchSettings(username="candor", password="ignored", password_file=str(secret))
    assert opensearch_store._http_auth(settings) == ("candor", "s3cret")
    assert opensearch_store._http_auth(OpenSearchSettings()) is None


# --- the node going away ------------------------------------------------------------------------


def test_search_raises_once_the_node_is_stopped(
    opensearch_node_factory: Callable[[], OpenSearchNode],
) -> None:
    # A node of its own: stopping it must not take the shared session node down.
    node = opensearch_node_factory()
    store = OpenSearchKeywordStore(
        OpenSearchSettings(hosts=(node.url,), index="candor-doomed", timeout_seconds=2)
    )
    try:
        store.replace("t1", "refunds", [chunk("t1", "refunds", 0, REFUNDS)])
        assert store.search("t1", "refund", 5)

        node.stop()

        started = time.monotonic()
        with pytest.raises(OpenSearchConnectionError):
            store.search("t1", "refund", 5)
        # Connection refused is reported at once, well inside the arm's deadline.
        assert time.monotonic() - started < 2.0
        with pytest.raises(OpenSearchConnectionError):
            store.replace("t1", "refunds", [chunk("t1", "refunds", 0, REFUNDS)])
    finally:
        store.close()


def test_a_store_opened_to_be_read_never_creates_the_index(
    opensearch_url: str, client: OpenSearch, index_name: str
) -> None:
    settings = OpenSearchSettings(hosts=(opensearch_url,), index=index_name, timeout_seconds=10)
    with pytest.raises(StoreMissing, match=index_name):
        OpenSearchKeywordStore(settings, create=False)
    assert not client.indices.exists(index=index_name)


def test_a_delete_at_the_flood_stage_fails_fast_and_leaves_both_arms_whole(
    store: OpenSearchKeywordStore, client: OpenSearch, index_name: str
) -> None:
    # delete-by-query is retried inside OpenSearch past our timeout at the flood stage (30 s a
    # document), and the dense copy, deleted first, was gone: the document served by one arm.
    kb = KnowledgeBase(_OnesEmbedder(), QdrantDenseStore(QdrantClient(":memory:"), "c", 8), store)
    docs = [SourceDocument("t1", f"d{i}", "T", f"Refund policy {i}.", 1) for i in range(3)]
    assert {r.outcome for r in kb.upsert(docs)} == {"written"}
    store._write_timeout = 2.0  # the block shows as a timeout; not 30 s of it in a test
    client.indices.put_settings(
        index=index_name, body={"index.blocks.read_only_allow_delete": True}
    )
    try:
        results = kb.delete("t1", ["d0", "d1", "d2"])
    finally:
        client.indices.put_settings(
            index=index_name, body={"index.blocks.read_only_allow_delete": None}
        )
    assert {r.outcome for r in results} == {"failed"}
    assert all("OpenSearchBlocked" in r.error for r in results), results
    assert kb._dense.count() == 3 and store.count() == 3
