"""The LLM backend interface: stream text deltas, then one final Draft with citations."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from dataclasses import dataclass
from typing import Protocol

from generator_svc.citations import CitationClaim


@dataclass(frozen=True)
class EvidenceItem:
    chunk_id: str
    title: str
    text: str


@dataclass(frozen=True)
class GenerationInput:
    query: str
    evidence: tuple[EvidenceItem, ...]
    """Admitted evidence after the context budget, highest-ranked first; numbered from 1."""
    language: str
    tier: str
    clarify_only: bool = False
    caveat: str = ""
    """The UNCERTAIN tier's caveat as configured (English): the one uncited first sentence
    allowed besides a short translation of it."""
    deadline: float | None = None
    """``time.monotonic()`` by which the caller wants the answer; retries never wait past it."""


CHARS_PER_TOKEN_CAP = 16
"""A reply is read up to ``max_output_tokens`` times this many characters (generous for any
script): an endpoint that ignores ``max_tokens`` streamed 50 MB, all forwarded, and the checks
after it stalled the event loop for 24 s."""


TRUNCATED = "the answer was cut at the model's output limit"


@dataclass(frozen=True)
class Draft:
    text: str
    citations: tuple[CitationClaim, ...]
    input_tokens: int
    output_tokens: int
    is_clarification: bool = False
    unverifiable: tuple[str, ...] = ()
    """Why the answer cannot pass verification whatever its citations hold: sentences that
    state something and cite nothing, or an answer cut at the output limit."""


class BackendError(Exception):
    """The LLM call failed; ``reason`` is a stable code for logs, metrics and ErrorInfo.

    Reasons: ``TIMEOUT``, ``RATE_LIMITED`` (429 after every retry), ``UPSTREAM_UNAVAILABLE``
    (5xx or connection failure after every retry), ``UPSTREAM_REJECTED`` (other 4xx: key,
    model, request), ``MALFORMED_STREAM`` (the stream broke its own protocol),
    ``UPSTREAM_ERROR`` (the model reported an error inside the stream).
    """

    def __init__(
        self, reason: str, message: str, *, status: int | None = None, upstream: str = ""
    ) -> None:
        super().__init__(message)
        self.reason = reason
        self.status = status
        self.upstream = upstream
        """What the LLM endpoint said (its error body, cut): for the log, not for callers."""


class LLMBackend(Protocol):
    name: str

    def stream(self, inp: GenerationInput) -> AsyncGenerator[str | Draft, None]:
        """Yield text deltas, then exactly one Draft; raise BackendError on failure.

        Closing the iterator early (client cancellation) must stop the LLM call.
        """
        ...

    async def aclose(self) -> None:
        """Release connections (called once, when the service stops)."""
        ...
