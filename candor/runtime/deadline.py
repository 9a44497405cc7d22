"""Downstream calls never outlive the caller's deadline."""

from __future__ import annotations

import grpc

# Leave room to answer the caller after the downstream call returns.
_SAFETY_SECONDS = 0.05


class DeadlineExhausted(Exception):
    """The caller's deadline leaves no time for the downstream call."""


def downstream_timeout(context: grpc.aio.ServicerContext, cap_seconds: float) -> float:
    """Timeout for a downstream call: ``cap_seconds`` or what the caller has left, if less."""
    remaining: float | None = context.time_remaining()
    if remaining is None:
        return cap_seconds
    budget = remaining - _SAFETY_SECONDS
    if budget <= 0:
        raise DeadlineExhausted(f"caller deadline leaves {remaining:.3f}s")
    return min(cap_seconds, budget)
