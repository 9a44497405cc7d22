"""Seed 000's worked RRF example and the parent-collapse rule, on the real fusion code."""

from __future__ import annotations

import pytest

from retrieval_svc.fusion import collapse_by_parent, rrf
from retrieval_svc.stores.base import Chunk, Hit


def _hit(parent: str, chunk: str | None = None, score: float = 1.0) -> Hit:
    cid = chunk or f"{parent}-c0"
    return Hit(Chunk("t", cid, parent, parent, parent, cid, 1, "", "g"), score)


def test_seed000_worked_example_vector_abc_keyword_cad() -> None:
    # Each arm's scores fall with its order (ties would break on chunk id, not list order).
    dense = collapse_by_parent([_hit("A", score=0.9), _hit("B", score=0.8), _hit("C", score=0.7)])
    keyword = collapse_by_parent([_hit("C", score=9.0), _hit("A", score=8.0), _hit("D", score=7.0)])
    fused = rrf(dense, keyword, top_k=10)
    assert [c.chunk.parent_id for c in fused] == ["A", "C", "B", "D"]
    scores = [round(c.fused_score, 6) for c in fused]
    assert scores == [
        round(1 / 61 + 1 / 62, 6),  # 0.032522
        round(1 / 63 + 1 / 61, 6),  # 0.032266
        round(1 / 62, 6),  # 0.016129
        round(1 / 63, 6),  # 0.015873
    ]
    assert [c.in_both for c in fused] == [True, True, False, False]
    assert [c.fused_rank for c in fused] == [1, 2, 3, 4]


def test_paraphrases_of_one_parent_vote_once_per_arm() -> None:
    hits = [
        _hit("P", "P-c0", 0.9),
        _hit("P", "P-c1", 0.8),
        _hit("Q", "Q-c0", 0.7),
        _hit("P", "P-c2", 0.6),
    ]
    ranked = collapse_by_parent(hits)
    assert [(r.chunk.chunk_id, r.rank) for r in ranked] == [("P-c0", 1), ("Q-c0", 2)]
    fused = rrf(ranked, [], top_k=10)
    assert [c.chunk.parent_id for c in fused] == ["P", "Q"]
    assert fused[0].fused_score == pytest.approx(1 / 61)
