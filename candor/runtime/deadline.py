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
