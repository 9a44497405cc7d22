"""How a finished call's status is read (candor/runtime/metrics.py code_of)."""

from __future__ import annotations

import asyncio
from typing import Any

import grpc
import pytest

from candor.runtime.metrics import code_of


class Context:
    def __init__(self, code: Any, remaining: float | None) -> None:
        self._code, self._remaining = code, remaining

    def code(self) -> Any:
        return self._code

    def time_remaining(self) -> float | None:
        return self._remaining


@pytest.mark.parametrize("error", [GeneratorExit(), asyncio.CancelledError()])
def test_a_caller_that_left_is_cancelled_or_deadline_even_if_the_context_reads_ok(
    error: BaseException,
) -> None:
    # A stream closed under the tracing interceptor is finalised after the call is over.
    for code in (grpc.StatusCode.OK, 0, None):
        ctx: Any = Context(code, 3.0)
        assert code_of(ctx, error) == grpc.StatusCode.CANCELLED
        ctx = Context(code, 0.0)
        assert code_of(ctx, error) == grpc.StatusCode.DEADLINE_EXCEEDED


def test_set_or_aborted_codes_and_unexpected_errors() -> None:
    ctx: Any = Context(grpc.StatusCode.INVALID_ARGUMENT, None)
    assert code_of(ctx, grpc.aio.AbortError()) == grpc.StatusCode.INVALID_ARGUMENT
    assert code_of(Context(None, None), None) == grpc.StatusCode.OK  # type: ignore[arg-type]
    assert code_of(Context(None, None), ValueError()) == grpc.StatusCode.UNKNOWN  # type: ignore[arg-type]
