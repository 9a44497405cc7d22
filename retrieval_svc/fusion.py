"""Per-arm parent collapse and rank fusion (RRF k=60; weighted score fusion as an option).

Pure functions over plain data: the service and the evaluation harness both call these.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from retrieval_svc.stores.base import Chunk, Hit, best_first

RRF_K = 60
DENSE_WEIGHT = 0.7
KEYWORD_WEIGHT = 0.3


@dataclass(frozen=True)
class RankedHit:
    """A hit that survived parent collapse, with its 1-based rank inside its arm."""

    chunk: Chunk
    score: float
    rank: int


@dataclass
class FusedCandidate:
    chunk: Chunk
    dense: RankedHit | None = None
    keyword: RankedHit | None = None
    fused_score: float = 0.0
    fused_rank: int = 0
    arms: set[str] = field(default_factory=set)

    @property
    def in_both(self) -> bool:
        return self.dense is not None and self.keyword is not None


Version = tuple[str, str, str]
"""(tenant, document id, generation): one version of one document."""


def stale_versions(dense: Sequence[Hit], keyword: Sequence[Hit]) -> set[Version]:
    """Versions whose hits must go so that every document is read at one version.

    A write commits to the keyword store before the dense store publishes it, and a publish
    that fails leaves the dense store behind until ``candor verify --repair``. While they
    disagree the keyword arm's version is the current one, and a dense chunk of the old
    version (same positional id, other text) must not stand in for it. A document with no
    single keyword version to trust (the keyword arm met it at two, its query and a
    rewrite's either side of a commit; or only the dense arm met it, at two, which Qdrant's
    two-step publish can show) loses every hit: evidence from two versions of one document
    can contradict itself, and a refusal for a few milliseconds is the honest cost.
    """
    seen: dict[tuple[str, str], tuple[set[str], set[str]]] = {}
    for arm, hits in ((0, dense), (1, keyword)):
        for h in hits:
            key = (h.chunk.tenant, h.chunk.document_id)
            seen.setdefault(key, (set(), set()))[arm].add(h.chunk.generation)
    stale: set[Version] = set()
    for (tenant, doc), (in_dense, in_keyword) in seen.items():
        versions = in_dense | in_keyword
        if len(versions) < 2:
            continue
        current = in_keyword if len(in_keyword) == 1 else set()
        stale.update((tenant, doc, g) for g in versions - current)
    return stale


def without_versions(hits: Sequence[Hit], versions: set[Version]) -> list[Hit]:
    """``hits`` less those of ``versions``."""
    return [
        h for h in hits if (h.chunk.tenant, h.chunk.document_id, h.chunk.generation) not in versions
    ]


def collapse_by_parent(hits: Sequence[Hit]) -> list[RankedHit]:
    """Keep each parent's best chunk, so paraphrases of one source vote once per arm.

    ``hits`` are one arm's, ordered here by :func:`best_first`. A parent ranks (and scores)
    where its best hit does; when that hit is a hypothetical question, the parent's best
    *document* chunk among ``hits`` stands in for it, because a question is never evidence.
    A parent reached only through questions keeps a question chunk: see ``needs_passage``.
    """
    hits = best_first(hits)
    # A parent scores as its best *document* chunk when the arm returned one: an LLM-written
    # question ("How long do DHL refunds take?", generated for the refunds passage) matches
    # a near miss far better than the passage does, and lent its passage that score.
    best: dict[str, Hit] = {}
    for hit in hits:
        held = best.get(hit.chunk.parent_id)
        if held is None or (held.chunk.is_question and not hit.chunk.is_question):
            best[hit.chunk.parent_id] = hit
    return [
        RankedHit(h.chunk, h.score, rank)
        for rank, h in enumerate(best_first(list(best.values())), start=1)
    ]


def needs_passage(candidates: Sequence[FusedCandidate]) -> list[FusedCandidate]:
    """Candidates still represented by a question: neither arm returned a passage chunk."""
    return [c for c in candidates if c.chunk.is_question]


def drop_and_rerank(
    candidates: Sequence[FusedCandidate], dropped: Sequence[FusedCandidate]
) -> list[FusedCandidate]:
    """``candidates`` without ``dropped``, fused ranks renumbered from 1."""
    gone = {id(c) for c in dropped}
    kept = [c for c in candidates if id(c) not in gone]
    for i, c in enumerate(kept, start=1):
        c.fused_rank = i
    return kept


def _merge(dense: Sequence[RankedHit], keyword: Sequence[RankedHit]) -> dict[str, FusedCandidate]:
    by_parent: dict[str, FusedCandidate] = {}
    for h in dense:
        by_parent[h.chunk.parent_id] = FusedCandidate(h.chunk, dense=h)
    for h in keyword:
        cand = by_parent.get(h.chunk.parent_id)
        if cand is None:
            by_parent[h.chunk.parent_id] = FusedCandidate(h.chunk, keyword=h)
        else:
            cand.keyword = h
            if cand.chunk.is_question and not h.chunk.is_question:
                cand.chunk = h.chunk  # the keyword arm found the passage the question points at
    return by_parent


def _ranked(cands: dict[str, FusedCandidate], top_k: int) -> list[FusedCandidate]:
    # Ties break on parent id so the order is deterministic.
    ordered = sorted(cands.values(), key=lambda c: (-c.fused_score, c.chunk.parent_id))[:top_k]
    for i, c in enumerate(ordered, start=1):
        c.fused_rank = i
    return ordered


def rrf(
    dense: Sequence[RankedHit],
    keyword: Sequence[RankedHit],
    top_k: int,
    k: int = RRF_K,
    dense_weight: float = 1.0,
    keyword_weight: float = 1.0,
) -> list[FusedCandidate]:
    """Reciprocal rank fusion: score = sum over arms of weight / (k + rank); ranks only."""
    cands = _merge(dense, keyword)
    for c in cands.values():
        c.fused_score = (dense_weight / (k + c.dense.rank) if c.dense else 0.0) + (
            keyword_weight / (k + c.keyword.rank) if c.keyword else 0.0
        )
    return _ranked(cands, top_k)


def weighted_score(
    dense: Sequence[RankedHit],
    keyword: Sequence[RankedHit],
    top_k: int,
    dense_weight: float = DENSE_WEIGHT,
    keyword_weight: float = KEYWORD_WEIGHT,
) -> list[FusedCandidate]:
    """Weighted sum of per-arm scores, each min-max normalised within its arm's list."""
    cands = _merge(dense, keyword)

    def norm(hits: Sequence[RankedHit]) -> dict[str, float]:
        if not hits:
            return {}
        lo, hi = min(h.score for h in hits), max(h.score for h in hits)
        span = hi - lo
        return {h.chunk.parent_id: (h.score - lo) / span if span > 0 else 1.0 for h in hits}

    nd, nk = norm(dense), norm(keyword)
    for parent, c in cands.items():
        c.fused_score = dense_weight * nd.get(parent, 0.0) + keyword_weight * nk.get(parent, 0.0)
    return _ranked(cands, top_k)
