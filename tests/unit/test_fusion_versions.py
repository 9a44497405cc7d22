"""retrieval_svc.fusion.stale_versions: every document read at one version."""

from __future__ import annotations

import dataclasses

from retrieval_svc.fusion import stale_versions, without_versions
from retrieval_svc.stores.base import Chunk, Hit


def hit(doc: str, generation: str, child: int = 0, tenant: str = "t1") -> Hit:
    chunk = Chunk(
        tenant=tenant,
        chunk_id=f"{doc}#0c{child}",
        parent_id=f"{doc}#0",
        document_id=doc,
        title="",
        text=f"{doc} at {generation}",
        source_kind=1,
        uri="",
        generation=generation,
    )
    return Hit(chunk, 1.0)


def test_one_version_everywhere_drops_nothing() -> None:
    dense = [hit("a", "g1"), hit("a", "g1", 1), hit("b", "g7")]
    keyword = [hit("a", "g1"), hit("c", "g2")]
    assert stale_versions(dense, keyword) == set()
    assert stale_versions([], []) == set()


def test_the_keyword_arms_version_wins_over_a_dense_copy_left_behind() -> None:
    # Between the keyword commit and the dense publish (or after a failed publish) the dense
    # arm still serves the old text under the same positional chunk ids.
    dense = [hit("a", "old"), hit("a", "old", 1), hit("b", "g7")]
    keyword = [hit("a", "new")]
    stale = stale_versions(dense, keyword)
    assert stale == {("t1", "a", "old")}
    assert [h.chunk.text for h in without_versions(dense, stale)] == ["b at g7"]
    assert without_versions(keyword, stale) == keyword


def test_the_dense_arm_may_hold_the_newer_version_too() -> None:
    # Keyword committed "new" and the dense arm shows both while Qdrant publishes in two steps.
    stale = stale_versions([hit("a", "old"), hit("a", "new", 1)], [hit("a", "new")])
    assert stale == {("t1", "a", "old")}


def test_a_document_with_no_single_keyword_version_loses_every_hit() -> None:
    # The dense arm alone at two versions: nothing says which is current.
    assert stale_versions([hit("a", "old"), hit("a", "new", 1)], []) == {
        ("t1", "a", "old"),
        ("t1", "a", "new"),
    }
    # The keyword arm at two (its query and a rewrite's either side of a commit).
    assert stale_versions([hit("a", "x")], [hit("a", "old"), hit("a", "new", 1)]) == {
        ("t1", "a", "old"),
        ("t1", "a", "new"),
        ("t1", "a", "x"),
    }


def test_versions_are_told_apart_by_tenant() -> None:
    # Two tenants may hold a document of the same id at different versions: not a conflict.
    dense = [hit("a", "g1", tenant="t1"), hit("a", "g2", tenant="t2")]
    assert stale_versions(dense, [hit("a", "g2", tenant="t2")]) == set()


def test_without_versions_keeps_order_and_other_documents() -> None:
    hits = [hit("b", "g"), hit("a", "old"), hit("c", "g"), hit("a", "old", 1)]
    kept = without_versions(hits, {("t1", "a", "old")})
    assert [h.chunk.document_id for h in kept] == ["b", "c"]
    other_tenant = dataclasses.replace(hits[1].chunk, tenant="t2")
    assert without_versions([Hit(other_tenant, 1.0)], {("t1", "a", "old")}) != []
