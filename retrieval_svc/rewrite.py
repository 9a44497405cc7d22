"""Seed 001's query rewrite: the user's question becomes a standalone search query.

Optional and best-effort. :func:`rewrite_query` never raises: a slow, failing or unusable
rewrite leaves the query as the caller sent it, and the :class:`Rewrite` says why (the outcome
is a metric label). A rewrite is usable when it is one line of at most ``max_words`` words and
at most ``max_growth`` times the query's words; quotes and a leading label (``Query:``) are
stripped first. Both arms search the rewrite; the gate keeps judging the caller's own query.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Final, Protocol

from candor.chat import TIMEOUT, ChatClient, UpstreamError, clean_reply, client_for
from candor.settings import RewriteSettings

log = logging.getLogger("candor.retrieval.rewrite")

REWRITTEN: Final = "rewritten"
FALLBACK_TIMEOUT: Final = "fallback_timeout"
FALLBACK_ERROR: Final = "fallback_error"
FALLBACK_REJECTED: Final = "fallback_rejected"
OUTCOMES: Final = (REWRITTEN, FALLBACK_TIMEOUT, FALLBACK_ERROR, FALLBACK_REJECTED)

SYSTEM_PROMPT: Final = (
    "You rewrite a user's question into one standalone search query for a knowledge base.\n"
    "- Write in the same language as the question.\n"
    "- Keep names, numbers, codes and product terms exactly as written.\n"
    "- Do not answer the question and do not add facts.\n"
    "- Use at most {max_words} words.\n"
    "Reply with the query alone: no quotes, no label, no explanation."
)
LABELS: Final = ("search query", "rewritten query", "standalone query", "query")


class RewriteRejected(ValueError):
    """The model answered, but not with a usable query."""


class QueryRewriter(Protocol):
    """Rewrites a query within ``timeout_seconds``; raises UpstreamError or RewriteRejected."""

    @property
    def name(self) -> str: ...

    async def rewrite(self, query: str, timeout_seconds: float) -> str: ...

    async def aclose(self) -> None: ...


@dataclass(frozen=True)
class Rewrite:
    """What Retrieve searched for, and how it came to be."""

    query: str
    """The text both arms search: the rewrite, or the caller's query on fallback."""
    rewritten: str
    """The rewrite when it was used, else empty."""
    outcome: str
    """One of OUTCOMES."""
    latency_seconds: float
    detail: str = ""
    """Why the rewrite was not used; empty when it was."""


MIN_CHAR_BUDGET = 40
"""A short query may still grow into a full question: its character budget starts here."""


def sanitise(reply: str, query: str, *, max_words: int, max_growth: float) -> str:
    """The model's reply as a one-line query, or RewriteRejected saying what is wrong with it."""
    text = clean_reply(reply, LABELS)
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        raise RewriteRejected("empty rewrite")
    if len(lines) > 1:
        raise RewriteRejected(f"rewrite has {len(lines)} lines, expected one")
    words = lines[0].split()
    limit = min(max_words, max_growth * max(1, len(query.split())))
    if len(words) > limit:
        raise RewriteRejected(f"rewrite has {len(words)} words, at most {limit:g} allowed")
    # Counted in characters too: one 10,000-character "word" is one word.
    char_limit = max_growth * max(len(query), MIN_CHAR_BUDGET)
    if len(" ".join(words)) > char_limit:
        raise RewriteRejected(
            f"rewrite has {len(' '.join(words))} characters, at most {char_limit:g} allowed"
        )
    return " ".join(words)


class LLMQueryRewriter:
    """The rewrite prompt over an OpenAI-compatible ``/chat/completions`` endpoint."""

    name = "openai_compat"

    def __init__(
        self,
        chat: ChatClient,
        *,
        max_words: int = 32,
        max_growth: float = 4.0,
        max_output_tokens: int = 64,
    ) -> None:
        self._chat = chat
        self._max_words, self._max_growth = max_words, max_growth
        self._max_tokens = max_output_tokens

    async def aclose(self) -> None:
        await self._chat.aclose()

    def messages(self, query: str) -> list[dict[str, str]]:
        return [
            {"role": "system", "content": SYSTEM_PROMPT.format(max_words=self._max_words)},
            {"role": "user", "content": query},
        ]

    async def rewrite(self, query: str, timeout_seconds: float) -> str:
        reply = await self._chat.complete(
            self.messages(query), timeout_seconds=timeout_seconds, max_tokens=self._max_tokens
        )
        return sanitise(reply, query, max_words=self._max_words, max_growth=self._max_growth)


async def rewrite_query(rewriter: QueryRewriter, query: str, timeout_seconds: float) -> Rewrite:
    """``query`` rewritten within ``timeout_seconds``, or the query itself; never raises.

    The cut-off here is hard even for a rewriter that ignores its timeout. Cancellation from
    outside (the caller went away) is not a failure and propagates.
    """
    started = time.perf_counter()

    def fallback(outcome: str, detail: str) -> Rewrite:
        latency = time.perf_counter() - started
        log.warning(
            "query rewrite not used",
            extra={"outcome": outcome, "detail": detail, "latency_seconds": round(latency, 4)},
        )
        return Rewrite(query, "", outcome, latency, detail)

    if timeout_seconds <= 0:
        return fallback(FALLBACK_TIMEOUT, "no time left for the rewrite")
    try:
        async with asyncio.timeout(timeout_seconds):
            text = await rewriter.rewrite(query, timeout_seconds)
    except TimeoutError:
        return fallback(FALLBACK_TIMEOUT, f"no rewrite within {timeout_seconds:.3g} s")
    except RewriteRejected as exc:
        return fallback(FALLBACK_REJECTED, str(exc))
    except UpstreamError as exc:
        return fallback(FALLBACK_TIMEOUT if exc.reason == TIMEOUT else FALLBACK_ERROR, str(exc))
    except Exception as exc:  # a rewrite must never fail the search
        log.exception("query rewriter raised")
        return fallback(FALLBACK_ERROR, f"{type(exc).__name__}: {exc}")
    return Rewrite(text, text, REWRITTEN, time.perf_counter() - started)


def build_rewriter(settings: RewriteSettings) -> LLMQueryRewriter | None:
    """The configured rewriter, or None when ``retrieval.rewrite.backend`` is none."""
    chat = client_for(settings, what="query rewrite endpoint")
    if chat is None:
        return None
    return LLMQueryRewriter(
        chat,
        max_words=settings.max_words,
        max_growth=settings.max_growth,
        max_output_tokens=settings.max_output_tokens,
    )
