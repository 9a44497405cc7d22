"""The serving loop's exception handler: grpc's poller wake-ups and its events for closed
loops are quiet, the rest is not."""

from __future__ import annotations

import asyncio
import logging

import pytest

from candor.runtime.event_loop import install_exception_handler


class PollerCompletionQueue:
    """Named as grpc's Cython class is, so the callback's handle reads the same."""

    def __init__(self, error: Exception | None = None) -> None:
        self.error = error or BlockingIOError(11, "Resource temporarily unavailable")

    def _handle_events(self) -> None:
        raise self.error


def _other_callback() -> None:
    raise BlockingIOError(11, "a socket of ours")


async def _run_callbacks(*callbacks: object) -> None:
    install_exception_handler()
    loop = asyncio.get_running_loop()
    for callback in callbacks:
        loop.call_soon(callback)  # type: ignore[arg-type]
    await asyncio.sleep(0.01)


@pytest.mark.parametrize(
    ("error", "said"),
    [
        (None, "grpc poller woke without an event"),
        # Reproduced with real grpc (2026-12-06): a Watch stream left open when its loop
        # closed made the next loop's poller raise this, in about half the runs.
        (RuntimeError("Event loop is closed"), "grpc event for a closed event loop dropped"),
    ],
    ids=["wakeup", "closed_loop"],
)
def test_harmless_grpc_poller_errors_are_logged_at_debug_only(
    caplog: pytest.LogCaptureFixture, error: Exception | None, said: str
) -> None:
    caplog.set_level(logging.DEBUG)
    asyncio.run(_run_callbacks(PollerCompletionQueue(error)._handle_events))
    assert [r.levelno for r in caplog.records if r.levelno >= logging.WARNING] == []
    assert [r.getMessage() for r in caplog.records if r.name == "candor.event_loop"] == [said]


def test_any_other_callback_error_still_reaches_asyncios_handler(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    asyncio.run(_run_callbacks(_other_callback, PollerCompletionQueue()._handle_events))
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1
    assert errors[0].name == "asyncio"
    assert "_other_callback" in errors[0].getMessage()


def test_another_runtime_error_from_the_grpc_poller_still_reaches_asyncios_handler(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    broken = PollerCompletionQueue(RuntimeError("a bug in grpc"))
    asyncio.run(_run_callbacks(broken._handle_events))
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert [r.name for r in errors] == ["asyncio"]
    assert "PollerCompletionQueue._handle_events" in errors[0].getMessage()
