"""Gate signals: pure functions over a retrieval result. Every decision reports all of them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

SOURCE_CURATED = 2


@dataclass(frozen=True)
class CandidateView:
    """The parts of a retrieval candidate the gate reasons about (plain data, no protobuf)."""

    chunk_id: str
    parent_id: str
    document_id: str
    title: str
    text: str
    source_kind: int
    cosine: float | None
    """Raw dense score (cosine similarity); None when the dense arm did not return it."""
    bm25: float | None
    fused_score: float
    fused_rank: int
    in_both: bool

    @property
    def curated(self) -> bool:
        return self.source_kind == SOURCE_CURATED


def distance_confidence(cosine: float | None, max_distance: float) -> float:
    """Seed 000: cosine distance mapped to a 0-100 confidence; distance >= max_distance is 0."""
    if cosine is None:
        return 0.0
    distance = 1.0 - cosine
    return max(0.0, min(1.0, 1.0 - distance / max_distance)) * 100.0


def _ratio(first: float, second: float) -> float:
    # A lone candidate is an unambiguous winner; cap keeps the number printable.
    if second <= 0:
        return 10.0 if first > 0 else 0.0
    return min(first / second, 10.0)


def compute_signals(
    candidates: Sequence[CandidateView], max_distance: float, top_k: int = 5
) -> dict[str, float]:
    """Every retrieval signal the policies use, by name."""
    cosines = sorted((c.cosine for c in candidates if c.cosine is not None), reverse=True)
    bm25s = sorted((c.bm25 for c in candidates if c.bm25 is not None), reverse=True)
    fused = [c.fused_score for c in candidates]
    top = candidates[0] if candidates else None
    head = candidates[:top_k]
    return {
        "hits": float(len(candidates)),
        "top_cosine": cosines[0] if cosines else 0.0,
        "top_distance_confidence": distance_confidence(
            cosines[0] if cosines else None, max_distance
        ),
        "top_bm25": bm25s[0] if bm25s else 0.0,
        "top_rrf": fused[0] if fused else 0.0,
        "rrf_ratio": _ratio(fused[0], fused[1]) if len(fused) > 1 else (10.0 if fused else 0.0),
        "cosine_ratio": _ratio(cosines[0], cosines[1])
        if len(cosines) > 1
        else (10.0 if cosines else 0.0),
        "top_in_both": 1.0 if top is not None and top.in_both else 0.0,
        "in_both_top_k": float(sum(1 for c in head if c.in_both)),
        "curated_hits": float(sum(1 for c in candidates if c.curated)),
    }
