"""opensearch.index_per_tenant against a real OpenSearch node: each tenant's chunks in an index
of its own, created on its first write with candor's mapping and checked like the shared one.

The KeywordStore contract runs against this layout too (``opensearch-tenants`` in
tests/stores/conftest.py), including "one tenant's documents do not move another's scores"."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from opensearchpy import OpenSearch
from opensearchpy.exceptions import TransportError

from candor.settings import OpenSearchSettings
from retrieval_svc.stores.base import StoreMissing, StoreUnlistable
from retrieval_svc.stores.opensearch_store import (
    INDEX_SETTINGS,
    MAPPING,
    TENANT_INFIX,
    OpenSearchKeywordStore,
    OpenSearchMappingError,
    OpenSearchWriteError,
    tenant_index,
)
from tests.stores.conftest import chunk

pytestmark = [pytest.mark.opensearch, pytest.mark.timeout(300)]

Opener = Callable[..., OpenSearchKeywordStore]


@pytest.fixture
def prefix(client: OpenSearch) -> Iterator[str]:
    name = f"candor-pt-{uuid.uuid4().hex[:12]}"
    yield name
    client.indices.delete(index=f"{name},{name}{TENANT_INFIX}*", ignore_unavailable=True)


@pytest.fixture
def open_store(opensearch_url: str, prefix: str) -> Iterator[Opener]:
    opened: list[OpenSearchKeywordStore] = []

    def open_(*, per_tenant: bool = True, create: bool = True) -> OpenSearchKeywordStore:
        settings = OpenSearchSettings(
            hosts=(opensearch_url,), index=prefix, index_per_tenant=per_tenant, timeout_seconds=10
        )
        store = OpenSearchKeywordStore(settings, create=create)
        opened.append(store)
        return store

    yield open_
    for s in opened:
        s.close()


def _indices(client: OpenSearch, prefix: str) -> list[str]:
    return sorted(client.indices.get(index=f"{prefix}*"))


def test_each_tenant_writes_to_an_index_of_its_own_made_on_its_first_write(
    open_store: Opener, client: OpenSearch, prefix: str
) -> None:
    store = open_store()
    assert _indices(client, prefix) == [], "opening makes no index"
    assert store.search("acme", "parcel", 5) == []
    assert store.get("acme", ["d#p0c0"]) == []
    assert store.holds("acme", [("d#p0c0", "g1")]) == set()
    assert store.delete("acme", "d") == 0
    assert store.count() == 0 and store.inventory() == []
    assert _indices(client, prefix) == [], "reads and deletes make no index"

    for tenant in ("acme", "Acme"):
        store.replace(tenant, "d", [chunk(tenant, "d", 0, text=f"parcel for {tenant}")])

    assert _indices(client, prefix) == sorted(
        [tenant_index(prefix, "acme"), tenant_index(prefix, "Acme")]
    )
    body = client.indices.get(index=tenant_index(prefix, "Acme"))[tenant_index(prefix, "Acme")]
    assert body["mappings"]["properties"]["text"]["analyzer"] == "candor_en_stem"
    assert body["settings"]["index"]["number_of_shards"] == "1"
    assert [h.chunk.text for h in store.search("Acme", "parcel", 5)] == ["parcel for Acme"]
    assert store.count() == 2
    assert {(c.tenant, c.document_id) for c in store.inventory()} == {("acme", "d"), ("Acme", "d")}
    assert store.delete("acme", "d") == 1
    assert store.count() == 1

    # Opened again (another pod, or to be read by `candor verify`), it finds them all.
    again = open_store(create=False)
    assert again.count() == 1
    assert [h.chunk.tenant for h in again.search("Acme", "parcel", 5)] == ["Acme"]


def test_a_store_opened_to_be_read_with_no_tenant_index_is_missing(
    open_store: Opener, client: OpenSearch, prefix: str
) -> None:
    with pytest.raises(StoreMissing, match=prefix):
        open_store(create=False)
    assert _indices(client, prefix) == []


def test_chunks_left_in_the_shared_index_stop_start_up(
    open_store: Opener, client: OpenSearch, prefix: str
) -> None:
    shared = open_store(per_tenant=False)
    shared.replace("acme", "d", [chunk("acme", "d", 0, text="parcel")])

    # The per-tenant layout would not read them: the knowledge base would look empty.
    with pytest.raises(OpenSearchMappingError, match=r"holds 1 chunks.*index_per_tenant"):
        open_store()

    shared.delete("acme", "d")
    open_store()  # an emptied shared index is no obstacle


def test_a_tenant_index_with_another_mapping_stops_start_up(
    open_store: Opener, client: OpenSearch, prefix: str
) -> None:
    mapping: dict[str, Any] = {
        **MAPPING,
        "properties": {**MAPPING["properties"], "text": {"type": "text", "analyzer": "english"}},
    }
    client.indices.create(
        index=tenant_index(prefix, "acme"), body={"settings": INDEX_SETTINGS, "mappings": mapping}
    )
    with pytest.raises(OpenSearchMappingError, match=r"text: expected text \(analyzer="):
        open_store()


def test_the_documented_move_from_the_shared_index_keeps_every_chunk(
    open_store: Opener, client: OpenSearch, prefix: str
) -> None:
    # docs/operations.md, "Keyword index per tenant": create each tenant's index, _reindex its
    # chunks into it, delete the shared index, turn index_per_tenant on.
    shared = open_store(per_tenant=False)
    for tenant, texts in {"acme": ["parcel label", "refund"], "Acme": ["parcel"]}.items():
        for i, text in enumerate(texts):
            shared.replace(tenant, f"d{i}", [chunk(tenant, f"d{i}", 0, text=text)])
    before = {t: shared.search(t, "parcel", 5) for t in ("acme", "Acme")}
    aggs = {"t": {"terms": {"field": "tenant", "size": 10000}}}
    listed = client.search(index=prefix, body={"size": 0, "aggs": aggs})
    tenants = sorted(b["key"] for b in listed["aggregations"]["t"]["buckets"])
    assert tenants == ["Acme", "acme"]
    for tenant in tenants:
        name = tenant_index(prefix, tenant)
        client.indices.create(index=name, body={"settings": INDEX_SETTINGS, "mappings": MAPPING})
        source = {"index": prefix, "query": {"term": {"tenant": tenant}}}
        client.reindex(body={"source": source, "dest": {"index": name}}, refresh=True)
    client.indices.delete(index=prefix)

    moved = open_store()
    assert moved.count() == 3
    for tenant, hits in before.items():
        assert [h.chunk for h in moved.search(tenant, "parcel", 5)] == [h.chunk for h in hits]
    # Scored on acme's statistics now: "parcel" is in 1 of its 2 chunks, not 2 of all 3.
    assert moved.search("acme", "parcel", 5)[0].score != pytest.approx(before["acme"][0].score)


def test_a_closed_tenant_index_fails_the_arm_rather_than_read_as_empty(
    open_store: Opener, client: OpenSearch, prefix: str
) -> None:
    store = open_store()
    store.replace("acme", "d", [chunk("acme", "d", 0, text="parcel")])
    client.indices.close(index=tenant_index(prefix, "acme"))
    try:
        # "Nothing here" would be a refusal for a knowledge base that holds the answer, and a
        # delete counting 0 would leave the chunks to come back when the index reopens.
        with pytest.raises(TransportError):
            store.search("acme", "parcel", 5)
        with pytest.raises(TransportError):
            store.delete("acme", "d")
        # Listed as missing, its chunks' dense copies would go in `verify --repair
        # --drop-partial`.
        with pytest.raises(StoreUnlistable, match="closed tenant indexes"):
            store.inventory()
    finally:
        client.indices.open(index=tenant_index(prefix, "acme"))
    assert [c.document_id for c in store.inventory()] == ["d"]
    assert store.delete("acme", "d") == 1


def test_a_cluster_at_its_shard_limit_is_named_when_a_tenant_index_cannot_be_made(
    open_store: Opener, client: OpenSearch
) -> None:
    store = open_store()
    client.cluster.put_settings(body={"transient": {"cluster.max_shards_per_node": 1}})
    try:
        with pytest.raises(OpenSearchWriteError, match=r"shard limit.*max_shards_per_node"):
            store.replace("acme", "d", [chunk("acme", "d", 0, text="parcel")])
    finally:
        client.cluster.put_settings(body={"transient": {"cluster.max_shards_per_node": None}})
    store.replace("acme", "d", [chunk("acme", "d", 0, text="parcel")])
    assert store.count() == 1


def test_the_keyword_bench_measures_both_layouts_and_leaves_no_index(
    opensearch_url: str, client: OpenSearch, tmp_path: Path
) -> None:
    from evals import bench_keyword

    before = set(client.indices.get(index="*", expand_wildcards="all"))
    out = tmp_path / "keyword.json"
    argv = ["--chunks", "40", "--tenants", "3", "--queries", "5", "--opensearch", opensearch_url]
    assert bench_keyword.main([*argv, "--json", str(out)]) == 0
    layouts = {key.split(":")[0] for key in json.loads(out.read_text())}
    assert layouts == {"tantivy", "opensearch-shared", "opensearch-per-tenant"}
    assert set(client.indices.get(index="*", expand_wildcards="all")) == before


@pytest.mark.parametrize("closed", [["acme"], ["acme", "globex"]], ids=["one", "every"])
def test_verify_with_a_closed_tenant_index_is_one_line_and_repairs_nothing(
    closed: list[str],
    open_store: Opener,
    client: OpenSearch,
    prefix: str,
    opensearch_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from candor.cli.main import main
    from retrieval_svc.stores.edge import EdgeDenseStore

    EdgeDenseStore(tmp_path / "dense", 384).close()  # the dense store verify reads (empty)
    store = open_store()
    store.replace("acme", "d", [chunk("acme", "d", 0, text="parcel")])
    store.replace("globex", "d", [chunk("globex", "d", 0, text="parcel")])
    for name, value in {
        "CANDOR_DATA_DIR": str(tmp_path),
        "CANDOR_RETRIEVAL__KEYWORD_BACKEND": "opensearch",
        "CANDOR_RETRIEVAL__OPENSEARCH__HOSTS": opensearch_url,
        "CANDOR_RETRIEVAL__OPENSEARCH__INDEX": prefix,
        "CANDOR_RETRIEVAL__OPENSEARCH__INDEX_PER_TENANT": "true",
    }.items():
        monkeypatch.setenv(name, value)
    # With every tenant index closed, a wildcard matched nothing and verify said "nothing to
    # verify; pass the service's --config", which sends an operator after the wrong thing.
    names = ",".join(tenant_index(prefix, tenant) for tenant in closed)
    client.indices.close(index=names)
    try:
        assert main(["verify", "--repair", "--drop-partial"]) == 2
    finally:
        client.indices.open(index=names)
    err = capsys.readouterr().err
    assert err.startswith("candor: closed tenant indexes cannot be listed: ")
    assert len(err.strip().splitlines()) == 1
    assert sorted(c.tenant for c in store.inventory()) == ["acme", "globex"]  # none deleted
    assert main(["verify"]) == 1  # open again: both chunks listed (the dense store lacks them)
    assert capsys.readouterr().out.count("missing_dense") == 2


@pytest.mark.parametrize("guarded", [False, True], ids=["auto-create", "auto-create-refused"])
def test_a_tenant_index_deleted_between_its_check_and_the_write(
    guarded: bool,
    open_store: Opener,
    client: OpenSearch,
    prefix: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store = open_store()
    store.replace("acme", "d", [chunk("acme", "d", 0, text="parcel")])
    name = tenant_index(prefix, "acme")
    checked = store._ensure_index

    def check_then_lose(index: str) -> None:
        checked(index)
        client.indices.delete(index=index)

    monkeypatch.setattr(store, "_ensure_index", check_then_lose)
    # The hardening docs/operations.md asks for: OpenSearch makes no candor index on a write.
    refused = {"action.auto_create_index": f"-{prefix}*,+*" if guarded else None}
    client.cluster.put_settings(body={"transient": refused})
    try:
        if guarded:
            with pytest.raises(OpenSearchWriteError, match="index_not_found_exception"):
                store.replace("acme", "d", [chunk("acme", "d", 0, text="parcel box")])
            assert _indices(client, prefix) == []
        else:
            # Without it the bulk write makes the index with a dynamic mapping.
            store.replace("acme", "d", [chunk("acme", "d", 0, text="parcel box")])
            assert client.indices.get_mapping(index=name)[name]["mappings"].get("dynamic") is None
    finally:
        client.cluster.put_settings(body={"transient": {"action.auto_create_index": None}})
    monkeypatch.undo()
    if guarded:
        store.replace("acme", "d", [chunk("acme", "d", 0, text="parcel box")])  # the retry
        assert client.indices.get_mapping(index=name)[name]["mappings"]["dynamic"] == "strict"
        assert [h.chunk.text for h in store.search("acme", "box", 5)] == ["parcel box"]
    else:
        with pytest.raises(OpenSearchMappingError):
            store.replace("acme", "d", [chunk("acme", "d", 0, text="parcel box")])
