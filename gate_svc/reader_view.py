"""What the evidence reader said about a decision; kept apart so the policy core needs no ONNX."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from gate_svc.signals import CandidateView

READER_SIGNALS = frozenset({"reader", "reader_top1", "reader_log_odds"})

ODDS_FLOOR = 1e-4
"""Probabilities are read within [ODDS_FLOOR, 1 - ODDS_FLOOR] on the log-odds scale."""
_ODDS_BOUND = math.log((1 - ODDS_FLOOR) / ODDS_FLOOR)


def reader_log_odds(p: float) -> float:
    """The reader's probability on its log-odds scale, clipped and mapped onto 0..1.

    The reader's head is logistic, so its log-odds are what a linear model can weigh: on the
    probability scale 0.99 and 0.9999 are nearly equal and 0.5 and 0.6 far apart. Mapped onto
    0..1 so that 0 (no reading) stays the lowest reading and 1 a certain one, as the gate
    assumes of every reader signal (read floor, skipped reads).
    """
    q = min(max(p, ODDS_FLOOR), 1 - ODDS_FLOOR)
    # Clamped: rounding at the ends left 1 - ODDS_FLOOR a hair above 1.
    return min(1.0, max(0.0, (math.log(q / (1 - q)) + _ODDS_BOUND) / (2 * _ODDS_BOUND)))


@dataclass(frozen=True)
class ReaderView:
    """What the reader said about one decision's top chunks, for the signals."""

    scores: tuple[float, ...] = ()
    """Probability per top candidate, in fused-rank order."""
    error: str = ""
    """Why the reader could not score (the decision then carries ``reader_fallback``)."""
    skipped: bool = False
    """Not read: even a perfect reading would not have let the decision pass."""

    def signal_values(self) -> dict[str, float]:
        """``reader`` (best of the top chunks), ``reader_top1``, ``reader_log_odds`` (the best
        on the log-odds scale) and ``reader_fallback``.

        A failed read leaves ``reader`` unset, which a calibrated policy weighs as 0, the
        lowest reading there is: the decision mostly refuses, and is never more likely to pass
        than with a real reading.
        """
        out = {"reader_fallback": 1.0 if self.error else 0.0}
        if self.skipped:
            out["reader_skipped"] = 1.0
        if self.scores:
            out["reader"] = max(self.scores)
            out["reader_top1"] = self.scores[0]
            out["reader_log_odds"] = reader_log_odds(out["reader"])
        return out


def reader_texts(candidates: Sequence[CandidateView], k: int) -> list[str]:
    """What the reader reads of the top ``k`` candidates: title (if any) then the chunk."""
    return [f"{c.title}\n{c.text}" if c.title else c.text for c in candidates[:k]]


def weighs_reader(coefficients: Mapping[str, float]) -> bool:
    """Whether a calibrated policy's coefficients use a reader signal (else skip the read)."""
    return any(coefficients.get(name, 0.0) != 0.0 for name in READER_SIGNALS)
