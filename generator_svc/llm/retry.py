"""Shared plumbing for the HTTP backends: retry with backoff before a stream starts, secrets.

Only the opening of a stream is retried (429, 5xx, connection failures). Once the first event
has arrived, text may already have reached the caller, so a failure after that is final.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TypeVar

from candor.chat import is_retryable_status
from candor.chat import retry_after as parse_retry_after
from generator_svc.llm.base import BackendError

T = TypeVar("T")
Sleep = Callable[[float], Awaitable[None]]
log = logging.getLogger("candor.generator.llm")


@dataclass(frozen=True)
class RetryPolicy:
    max_retries: int = 2
    """Retries after the first attempt (so at most ``max_retries + 1`` requests)."""
    backoff_seconds: float = 0.5
    """First delay; doubles each retry, with jitter of -50%..0%."""
    backoff_max_seconds: float = 8.0
    """Cap for one delay, also for a server's ``Retry-After``."""

    def delay(self, attempt: int, retry_after: float | None, rng: Callable[[], float]) -> float:
        """Seconds to wait before retry number ``attempt + 1`` (``attempt`` counts from 0)."""
        if retry_after is not None and retry_after >= 0:
            return min(retry_after, self.backoff_max_seconds)
        base = min(self.backoff_max_seconds, self.backoff_seconds * 2.0**attempt)
        return base * (0.5 + 0.5 * rng())


class RetryableError(BackendError):
    """A failure before the stream started that another attempt may cure."""

    def __init__(
        self,
        reason: str,
        message: str,
        *,
        status: int | None = None,
        retry_after: float | None = None,
        upstream: str = "",
    ) -> None:
        super().__init__(reason, message, status=status, upstream=upstream)
        self.retry_after = retry_after


def status_error(status: int, detail: str, headers: Mapping[str, str]) -> BackendError:
    """The BackendError for a non-2xx answer to the request that opens a stream."""
    # The endpoint's body goes to the log only: it may echo the request, a key's prefix or
    # the provider's internals, and a Generate caller saw up to 300 characters of it.
    message = f"LLM endpoint answered HTTP {status}"
    if is_retryable_status(status):
        reason = "RATE_LIMITED" if status == 429 else "UPSTREAM_UNAVAILABLE"
        return RetryableError(
            reason,
            message,
            status=status,
            retry_after=parse_retry_after(headers),
            upstream=detail[:300],
        )
    return BackendError("UPSTREAM_REJECTED", message, status=status, upstream=detail[:300])


async def open_with_retries(
    open_once: Callable[[], Awaitable[T]],
    policy: RetryPolicy,
    *,
    backend: str,
    sleep: Sleep = asyncio.sleep,
    rng: Callable[[], float] = random.random,
    deadline: float | None = None,
) -> T:
    """Run ``open_once`` until it returns, retrying RetryableError with backoff; a retry that
    would start after ``deadline`` (``time.monotonic()``) is not waited for: the caller has
    gone by then, and a 429 counted as a cancel hid the rate limit."""
    attempt = 0
    while True:
        try:
            return await open_once()
        except RetryableError as exc:
            if attempt >= policy.max_retries:
                raise BackendError(
                    exc.reason,
                    f"{exc} (gave up after {attempt + 1} attempts)",
                    status=exc.status,
                    upstream=exc.upstream,
                ) from exc
            delay = policy.delay(attempt, exc.retry_after, rng)
            if deadline is not None and time.monotonic() + delay >= deadline:
                raise BackendError(
                    exc.reason,
                    f"{exc} (no retry: the next would start after the caller's deadline)",
                    status=exc.status,
                    upstream=exc.upstream,
                ) from exc
            log.warning(
                "LLM request failed, retrying",
                extra={
                    "backend": backend,
                    "reason": exc.reason,
                    "status": exc.status,
                    "upstream": exc.upstream,
                    "attempt": attempt + 1,
                    "delay_seconds": round(delay, 3),
                },
            )
            await sleep(delay)
            attempt += 1
