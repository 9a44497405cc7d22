"""retrieval_svc.fusion with hypothetical-question chunks: a question votes for its passage
but is never the candidate's text."""

from __future__ import annotations

import dataclasses

from retrieval_svc.fusion import collapse_by_parent, drop_and_rerank, needs_passage, rrf
from retrieval_svc.stores.base import HYPOTHETICAL_QUESTION, Hit
from tests.unit.test_fusion import chunk


def question(parent: str, n: int = 0) -> Hit:
    c = dataclasses.replace(
        chunk(parent), chunk_id=f"{parent}q{n}", text="Why?", source_kind=HYPOTHETICAL_QUESTION
    )
    return Hit(c, 0.0)


def scored(hit: Hit, score: float) -> Hit:
    return Hit(hit.chunk, score)


def test_a_parent_with_a_passage_hit_ranks_as_that_passage_not_its_question() -> None:
    hits = [
        scored(question("a#p0"), 0.9),
        Hit(chunk("b#p0"), 0.8),
        Hit(chunk("a#p0", 2), 0.7),  # a's best passage chunk in this arm
        Hit(chunk("a#p0", 0), 0.6),
        scored(question("a#p0", 1), 0.5),
    ]
    out = collapse_by_parent(hits)
    assert [(h.chunk.chunk_id, h.score, h.rank) for h in out] == [
        ("b#p0c0", 0.8, 1),
        # a ranks and scores as its best passage chunk, not its question: an LLM-written
        # question matched a near miss far better than the passage did, and lent it that score.
        ("a#p0c2", 0.7, 2),
    ]


def test_a_parent_found_only_by_questions_keeps_the_question_until_resolved() -> None:
    out = collapse_by_parent([scored(question("a#p0"), 0.9), Hit(chunk("b#p0"), 0.8)])
    assert out[0].chunk.is_question
    fused = rrf(out, [], top_k=10)
    assert [c.chunk.parent_id for c in needs_passage(fused)] == ["a#p0"]


def test_the_other_arms_passage_chunk_replaces_a_question() -> None:
    dense = collapse_by_parent([scored(question("a#p0"), 0.9)])
    keyword = collapse_by_parent([Hit(chunk("a#p0", 1), 7.0)])
    [cand] = rrf(dense, keyword, top_k=10)
    assert cand.chunk.chunk_id == "a#p0c1" and cand.in_both
    assert cand.dense is not None and cand.dense.chunk.is_question  # the arm's own hit is kept
    assert needs_passage([cand]) == []


def test_dropping_unresolved_candidates_renumbers_the_ranks() -> None:
    fused = rrf(
        collapse_by_parent([Hit(chunk("a#p0"), 0.9), scored(question("b#p0"), 0.8)]),
        collapse_by_parent([Hit(chunk("c#p0"), 3.0)]),
        top_k=10,
    )
    kept = drop_and_rerank(fused, needs_passage(fused))
    assert [(c.chunk.parent_id, c.fused_rank) for c in kept] == [("a#p0", 1), ("c#p0", 2)]
