"""Drift detection between the two stores' inventories."""

from __future__ import annotations

from retrieval_svc.reconcile import find_drift
from retrieval_svc.stores.base import StoredChunk


def c(doc: str, chunk: str, gen: str, published: bool = True, tenant: str = "t") -> StoredChunk:
    return StoredChunk(tenant, doc, chunk, gen, published)


def kinds(dense: list[StoredChunk], keyword: list[StoredChunk]) -> list[tuple[str, str]]:
    return [(d.document_id, d.kind) for d in find_drift(dense, keyword)]


def test_consistent_stores_have_no_drift() -> None:
    both = [c("a", "a#0", "g1"), c("a", "a#1", "g1")]
    assert kinds(both, both) == []


def test_each_kind_of_drift_is_named() -> None:
    keyword = [
        c("u", "u#0", "g2"),
        c("s", "s#0", "g2"),
        c("o", "o#0", "g2"),
        c("m", "m#0", "g1"),
        c("x", "x#0", "g1"),
        c("b", "b#0", "g3"),
    ]
    dense = [
        c("u", "u#0", "g2", published=False),  # written, never published
        c("s", "s#0", "g1"),
        c("s", "s#0", "g2", published=False),  # old version still served
        c("o", "o#0", "g2"),
        c("o", "o#0", "g9", published=False),  # staged leftovers
        c("k", "k#0", "g1"),  # dense only
        c("x", "x#9", "g1"),  # same generation, other chunk ids
        c("b", "b#0", "g2"),  # an older version only: the newer one's dense copy is lost
    ]
    assert kinds(dense, keyword) == [
        ("b", "dense_outdated"),
        ("k", "missing_keyword"),
        ("m", "missing_dense"),
        ("o", "orphan_staged"),
        ("s", "stale_dense"),
        ("u", "unpublished"),
        ("x", "chunk_mismatch"),
    ]


def test_tenants_are_compared_separately() -> None:
    assert kinds([c("a", "a#0", "g1", tenant="t1")], [c("a", "a#0", "g1", tenant="t2")]) == [
        ("a", "missing_keyword"),
        ("a", "missing_dense"),
    ]


def test_dense_points_without_a_payload_are_reported_not_matched() -> None:
    lost = [StoredChunk("", f"point-{i}", "", "", False, readable=False) for i in range(7)]
    [drift] = find_drift([*lost, c("a", "a#0", "g1")], [c("a", "a#0", "g1")])
    assert drift.kind == "unreadable"
    assert drift.detail.startswith("7 dense point(s) without a readable payload (point-0, ")
    assert "point-5" not in drift.detail
