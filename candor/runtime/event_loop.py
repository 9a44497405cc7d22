"""The serving event loop's handler for exceptions raised in callbacks nobody awaits."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

log = logging.getLogger("candor.event_loop")


def is_grpc_poller_wakeup(context: dict[str, Any]) -> bool:
    """True for grpc.aio's poller reading its wake-up socket after the event was taken.

    grpc's completion-queue poller raises BlockingIOError (EAGAIN) from a loop callback when
    its non-blocking socket had nothing left to read; grpc retries on the next event. asyncio
    logs it as an ERROR traceback, which pages nobody usefully and made a failed start's log
    two lines instead of one.
    """
    exc = context.get("exception")
    return isinstance(exc, BlockingIOError) and "PollerCompletionQueue" in repr(
        context.get("handle")
    )


def _handle(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    if is_grpc_poller_wakeup(context):
        log.debug("grpc poller woke without an event", extra={"error": str(context["exception"])})
        return
    loop.default_exception_handler(context)


def install_exception_handler() -> None:
    """On the running loop: quiet grpc's harmless poller wake-ups; everything else goes to
    asyncio's default handler."""
    asyncio.get_running_loop().set_exception_handler(_handle)
