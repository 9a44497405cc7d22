"""How a finished call's status is read (candor/runtime/metrics.py code_of)."""

from __future__ import annotations

import asyncio
from typing import Any

import grpc
import pytest

from candor.runtime.metrics import _abort_unexpected, code_of


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


def test_a_cancel_as_the_deadline_lands_is_the_deadline() -> None:
    # The caller's deadline fires first on its side: the reset reaches this side with a few
    # milliseconds still on its clock, and a queued upsert out of time read as CANCELLED.
    ctx: Any = Context(None, 0.004)
    assert code_of(ctx, asyncio.CancelledError()) == grpc.StatusCode.DEADLINE_EXCEEDED
    ctx = Context(None, 0.5)
    assert code_of(ctx, asyncio.CancelledError()) == grpc.StatusCode.CANCELLED


def test_set_or_aborted_codes_and_unexpected_errors() -> None:
    ctx: Any = Context(grpc.StatusCode.INVALID_ARGUMENT, None)
    assert code_of(ctx, grpc.aio.AbortError()) == grpc.StatusCode.INVALID_ARGUMENT
    assert code_of(Context(None, None), None) == grpc.StatusCode.OK  # type: ignore[arg-type]
    assert code_of(Context(None, None), ValueError()) == grpc.StatusCode.UNKNOWN  # type: ignore[arg-type]


class ExecuteBatchError(Exception):
    """Shaped like grpc's own: raised from a send on a call that is over."""


ExecuteBatchError.__module__ = "grpc._cython.cygrpc"


class Aborting(Context):
    """A context that records aborts; ``gone`` is a call its caller already left."""

    def __init__(self, remaining: float | None, gone: bool = False) -> None:
        super().__init__(None, remaining)
        self.gone = gone
        self.aborts: list[tuple[grpc.StatusCode, str]] = []

    def cancelled(self) -> bool:
        return self.gone

    async def abort(self, code: grpc.StatusCode, details: str) -> None:
        if self.aborts:
            raise grpc.aio.UsageError("Abort already called!")
        self.aborts.append((code, details))
        raise grpc.aio.AbortError()


# (0.004, False): the deadline landed while the abort was sent, but the context still read a
# few milliseconds left (an outside probe: 3 ERROR tracebacks in 2,000 short-deadline calls).
@pytest.mark.parametrize(
    ("remaining", "gone"), [(0.0, False), (-0.5, False), (3.0, True), (0.004, False)]
)
async def test_an_error_raised_while_the_caller_leaves_is_not_a_servicer_bug(
    remaining: float, gone: bool, caplog: pytest.LogCaptureFixture
) -> None:
    # grpc raises from an abort's send when the deadline passed mid-abort: logging it as a
    # crash and aborting again filled the log with false "unexpected error" tracebacks.
    ctx = Aborting(remaining, gone)
    await _abort_unexpected(ctx, "/s/M", ExecuteBatchError("send failed"))  # type: ignore[arg-type]
    assert ctx.aborts == [] and "unexpected error" not in caplog.text


async def test_a_grpc_error_with_the_caller_still_there_is_a_servicer_bug(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # A downstream's error escaping a servicer comes from a grpc module too: exempting every
    # such error hid real failures from the log the runbook reads.
    ctx = Aborting(25.0)
    with pytest.raises(grpc.aio.AbortError):
        await _abort_unexpected(ctx, "/s/M", ExecuteBatchError("a bug's"))  # type: ignore[arg-type]
    assert "unexpected error in servicer" in caplog.text and len(ctx.aborts) == 1


async def test_a_servicer_bug_after_the_caller_left_is_still_logged_and_counted_as_the_caller_saw(
    caplog: pytest.LogCaptureFixture,
) -> None:
    ctx = Aborting(-0.1)
    await _abort_unexpected(ctx, "/s/M", KeyError("a real bug"))  # type: ignore[arg-type]
    # Kept, with its traceback, as a warning: nobody is left to abort, and no page.
    [record] = [r for r in caplog.records if r.msg == "error in servicer after the caller left"]
    assert record.levelname == "WARNING" and record.exc_info is not None
    assert ctx.aborts == []
    # The caller saw its deadline: UNKNOWN here fed the error ratio and the availability SLO.
    assert code_of(ctx, KeyError("a real bug")) == grpc.StatusCode.DEADLINE_EXCEEDED  # type: ignore[arg-type]


async def test_a_servicer_bug_aborts_unknown_without_its_text(
    caplog: pytest.LogCaptureFixture,
) -> None:
    ctx = Aborting(3.0)
    with pytest.raises(grpc.aio.AbortError):
        await _abort_unexpected(ctx, "/s/M", RuntimeError("/srv/secret/path failed"))  # type: ignore[arg-type]
    [(code, details)] = ctx.aborts
    assert code == grpc.StatusCode.UNKNOWN and "secret" not in details
    assert "unexpected error in servicer" in caplog.text
