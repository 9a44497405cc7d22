"""Downstream calls never outlive the caller's deadline."""

from __future__ import annotations

import grpc

# Leave room to answer the caller after the downstream call returns: 50 ms, or a fifth of what
# is left when that is less. A fixed slice taken at each hop in series (gate, then retrieval)
# ate a 100 ms deadline whole before a 25 ms call began.
_SAFETY_SECONDS = 0.05
_SAFETY_SHARE = 0.2
# Below this no downstream call can answer (one gRPC round trip on loopback is ~1 ms).
_MIN_BUDGET_SECONDS = 0.005


class DeadlineExhausted(Exception):
    """The caller's deadline leaves no time for the downstream call."""


def downstream_timeout(context: grpc.aio.ServicerContext, cap_seconds: float) -> float:
    """Timeout for a downstream call: ``cap_seconds`` or what the caller has left, if less."""
    remaining: float | None = context.time_remaining()
    if remaining is None:
        return cap_seconds
    budget = remaining - min(_SAFETY_SECONDS, _SAFETY_SHARE * remaining)
    if budget < _MIN_BUDGET_SECONDS:
        raise DeadlineExhausted(
            f"the caller's deadline is {max(remaining, 0.0) * 1000:.0f} ms away: "
            "too close to call another service"
        )
    return min(cap_seconds, budget)


def caller_bound(timeout_seconds: float, cap_seconds: float) -> bool:
    """Whether a downstream call that ran out of ``timeout_seconds`` ran out of the *caller's*
    time rather than its own: the caller's deadline left it under half of ``cap_seconds``.

    A call that took more than half its own timeout is slow whoever cut it off, and is counted
    as the downstream's failure; every caller deadline is a little under the cap (the margin
    above), so "under the cap" alone would excuse nearly every real timeout."""
    return timeout_seconds < cap_seconds / 2
