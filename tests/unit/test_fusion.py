"""retrieval_svc.fusion: per-arm parent collapse, RRF (k=60) and weighted score fusion."""

from __future__ import annotations

import pytest

from retrieval_svc.fusion import RankedHit, collapse_by_parent, rrf, weighted_score
from retrieval_svc.stores.base import Chunk, Hit


def chunk(parent: str, child: int = 0) -> Chunk:
    return Chunk(
        tenant="t1",
        chunk_id=f"{parent}c{child}",
        parent_id=parent,
        document_id=parent.split("#")[0],
        title="",
        text=f"text of {parent}c{child}",
        source_kind=1,
        uri="",
        generation="g",
    )


def ranked(*parents: str, scores: list[float] | None = None) -> list[RankedHit]:
    scores = scores or [1.0 / (i + 1) for i in range(len(parents))]
    return [
        RankedHit(chunk(p), s, i) for i, (p, s) in enumerate(zip(parents, scores, strict=True), 1)
    ]


def by_parent(cands: list) -> dict:
    return {c.chunk.parent_id: c for c in cands}


# --- collapse_by_parent -------------------------------------------------------------------


def test_collapse_keeps_best_chunk_per_parent_and_ranks_from_one() -> None:
    hits = [
        Hit(chunk("a#p0", 1), 0.9),
        Hit(chunk("a#p0", 0), 0.8),
        Hit(chunk("b#p0", 0), 0.7),
        Hit(chunk("a#p0", 2), 0.6),
        Hit(chunk("c#p1", 3), 0.5),
    ]
    out = collapse_by_parent(hits)
    assert [(h.chunk.chunk_id, h.score, h.rank) for h in out] == [
        ("a#p0c1", 0.9, 1),
        ("b#p0c0", 0.7, 2),
        ("c#p1c3", 0.5, 3),
    ]


@pytest.mark.parametrize("swap", [False, True])
def test_collapse_breaks_score_ties_on_chunk_id_whatever_the_store_order(swap: bool) -> None:
    # Two copies of one text score the same; a store may return them either way round.
    tied = [Hit(chunk("b#p0"), 0.8), Hit(chunk("a#p0"), 0.8)]
    hits = [Hit(chunk("c#p0"), 0.9), *(tied[::-1] if swap else tied), Hit(chunk("d#p0"), 0.1)]
    out = collapse_by_parent(hits)
    assert [(h.chunk.parent_id, h.rank) for h in out] == [
        ("c#p0", 1),
        ("a#p0", 2),
        ("b#p0", 3),
        ("d#p0", 4),
    ]


def test_collapse_of_nothing_is_nothing() -> None:
    assert collapse_by_parent([]) == []


def test_collapse_treats_sections_of_one_document_as_different_parents() -> None:
    out = collapse_by_parent([Hit(chunk("a#p0"), 0.9), Hit(chunk("a#p1"), 0.8)])
    assert [h.chunk.parent_id for h in out] == ["a#p0", "a#p1"]
    assert [h.rank for h in out] == [1, 2]


# --- rrf ------------------------------------------------------------------------------------


def test_rrf_matches_hand_computed_scores_with_k60() -> None:
    dense = ranked("a#p0", "b#p0", "c#p0")
    keyword = ranked("b#p0", "d#p0", "a#p0")
    out = rrf(dense, keyword, top_k=10)
    # b: 1/(60+2) + 1/(60+1) = 0.016129 + 0.016393 = 0.032522
    # a: 1/(60+1) + 1/(60+3) = 0.016393 + 0.015873 = 0.032266
    # d: 1/(60+2) = 0.016129 ; c: 1/(60+3) = 0.015873
    assert [c.chunk.parent_id for c in out] == ["b#p0", "a#p0", "d#p0", "c#p0"]
    scores = [c.fused_score for c in out]
    assert scores == pytest.approx([0.0325225, 0.0322665, 0.0161290, 0.0158730], abs=1e-7)
    assert [c.fused_rank for c in out] == [1, 2, 3, 4]


def test_rrf_in_both_and_per_arm_ranks() -> None:
    out = by_parent(rrf(ranked("a#p0", "b#p0"), ranked("b#p0", "c#p0"), top_k=10))
    assert out["b#p0"].in_both is True
    assert out["a#p0"].in_both is False
    assert out["c#p0"].in_both is False
    assert out["b#p0"].dense is not None and out["b#p0"].dense.rank == 2
    assert out["b#p0"].keyword is not None and out["b#p0"].keyword.rank == 1
    assert out["a#p0"].keyword is None
    assert out["c#p0"].dense is None


def test_rrf_weights_scale_each_arm() -> None:
    out = by_parent(rrf(ranked("a#p0"), ranked("a#p0", "b#p0"), top_k=10, dense_weight=2.0))
    assert out["a#p0"].fused_score == pytest.approx(2 / 61 + 1 / 61)
    assert out["b#p0"].fused_score == pytest.approx(1 / 62)


def test_rrf_custom_k() -> None:
    out = rrf(ranked("a#p0"), [], top_k=10, k=1)
    assert out[0].fused_score == pytest.approx(0.5)


@pytest.mark.parametrize("swap", [False, True])
def test_rrf_ties_break_on_parent_id_whatever_the_arm_order(swap: bool) -> None:
    dense, keyword = ranked("zeta#p0"), ranked("alpha#p0")
    if swap:
        dense, keyword = keyword, dense
    out = rrf(dense, keyword, top_k=10)
    assert out[0].fused_score == out[1].fused_score
    assert [c.chunk.parent_id for c in out] == ["alpha#p0", "zeta#p0"]


def test_rrf_top_k_truncates_and_ranks() -> None:
    out = rrf(ranked("a#p0", "b#p0", "c#p0", "d#p0"), [], top_k=2)
    assert [c.chunk.parent_id for c in out] == ["a#p0", "b#p0"]
    assert [c.fused_rank for c in out] == [1, 2]


def test_rrf_with_one_arm_empty_keeps_that_arms_order() -> None:
    out = rrf([], ranked("x#p0", "y#p0"), top_k=5)
    assert [c.chunk.parent_id for c in out] == ["x#p0", "y#p0"]
    assert all(not c.in_both for c in out)


def test_rrf_of_two_empty_arms_is_empty() -> None:
    assert rrf([], [], top_k=5) == []


# --- weighted_score --------------------------------------------------------------------------


def test_weighted_score_min_max_normalises_each_arm() -> None:
    dense = ranked("a#p0", "b#p0", "c#p0", scores=[0.9, 0.7, 0.5])  # -> 1.0, 0.5, 0.0
    keyword = ranked("b#p0", "d#p0", scores=[12.0, 6.0])  # -> 1.0, 0.0
    out = weighted_score(dense, keyword, top_k=10)
    got = {c.chunk.parent_id: c.fused_score for c in out}
    assert got == pytest.approx(
        {"a#p0": 0.7, "b#p0": 0.7 * 0.5 + 0.3 * 1.0, "c#p0": 0.0, "d#p0": 0.0}
    )
    # a (0.70) beats b (0.65); c and d tie at 0 and break on parent id.
    assert [c.chunk.parent_id for c in out] == ["a#p0", "b#p0", "c#p0", "d#p0"]
    assert [c.fused_rank for c in out] == [1, 2, 3, 4]


def test_weighted_score_custom_weights() -> None:
    dense = ranked("a#p0", "b#p0", scores=[0.9, 0.5])
    keyword = ranked("b#p0", "a#p0", scores=[10.0, 2.0])
    out = weighted_score(dense, keyword, top_k=10, dense_weight=0.2, keyword_weight=0.8)
    assert [c.chunk.parent_id for c in out] == ["b#p0", "a#p0"]
    assert [c.fused_score for c in out] == pytest.approx([0.8, 0.2])


def test_weighted_score_single_hit_arm_normalises_to_one() -> None:
    out = weighted_score(ranked("a#p0", scores=[0.42]), [], top_k=10)
    assert out[0].fused_score == pytest.approx(0.7)


def test_weighted_score_top_k() -> None:
    dense = ranked("a#p0", "b#p0", "c#p0", scores=[0.9, 0.8, 0.1])
    out = weighted_score(dense, [], top_k=1)
    assert [c.chunk.parent_id for c in out] == ["a#p0"]
    assert out[0].fused_rank == 1
