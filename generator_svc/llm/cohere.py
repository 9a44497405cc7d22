"""Cohere chat (API v2) with documents and its native citations, via the official client.

The admitted evidence goes as ``documents`` (id = chunk id), the stream's ``citation-start``
events become ``CitationClaim(chunk_id, quote)``. Cohere's citation ``text`` is the span of the
*answer* that the document supports; it is used as the quote and verified against the chunk
like any other quote, so a paraphrase that drifts from the evidence fails verification. The
prompt asks the model to reuse the documents' wording.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
from collections.abc import AsyncGenerator, Callable, Sequence
from typing import Any, cast

import cohere
import httpx
from cohere.core.api_error import ApiError
from cohere.core.http_sse import SSEError

from generator_svc.citations import CitationClaim, normalise
from generator_svc.llm.base import (
    CHARS_PER_TOKEN_CAP,
    TRUNCATED,
    BackendError,
    Draft,
    EvidenceItem,
    GenerationInput,
)
from generator_svc.llm.retry import (
    RetryableError,
    RetryPolicy,
    Sleep,
    open_with_retries,
    status_error,
)
from generator_svc.prompts import (
    PromptTemplates,
    estimate_tokens,
    lead_in_of,
    looks_like_clarification,
    render,
    sentence_around,
    spare_first,
    unspanned_sentences,
)

log = logging.getLogger("candor.generator.llm")
_EDGE_JUNK = " \t\n.,;:!?"

Events = AsyncGenerator[Any, None]


def _api_error(exc: ApiError) -> BackendError:
    status = exc.status_code or 0
    body = exc.body if isinstance(exc.body, str) else repr(exc.body)
    return status_error(status, body, exc.headers or {})


def _transport_error(exc: Exception, *, started: bool) -> BackendError:
    if isinstance(exc, SSEError):  # the client's SSE decoder refused the response
        return BackendError(
            "MALFORMED_STREAM", "Cohere's reply is not an event stream", upstream=str(exc)[:300]
        )
    if isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout) and not started:
        return RetryableError("UPSTREAM_UNAVAILABLE", f"cannot reach Cohere: {exc!r}")
    if isinstance(exc, httpx.TimeoutException):
        return BackendError("TIMEOUT", f"Cohere timed out: {exc!r}")
    if not started:
        return RetryableError("UPSTREAM_UNAVAILABLE", f"Cohere request failed: {exc!r}")
    return BackendError("UPSTREAM_UNAVAILABLE", f"Cohere stream broke off: {exc!r}")


class CohereBackend:
    name = "cohere"

    def __init__(
        self,
        *,
        api_key: str,
        model: str,
        templates: PromptTemplates,
        base_url: str = "",
        timeout_seconds: float = 30.0,
        retry: RetryPolicy | None = None,
        max_output_tokens: int = 512,
        temperature: float = 0.0,
        httpx_client: httpx.AsyncClient | None = None,
        sleep: Sleep = asyncio.sleep,
        rng: Callable[[], float] = random.random,
    ) -> None:
        """``timeout_seconds`` bounds each HTTP phase (connect, each read), not the answer."""
        if not api_key:
            raise ValueError("cohere: an API key is required (value, file or CO_API_KEY)")
        if not model:
            raise ValueError("cohere: model is required")
        self._http = httpx_client or httpx.AsyncClient(timeout=httpx.Timeout(timeout_seconds))
        self._client = cohere.AsyncClientV2(
            api_key=api_key,
            base_url=base_url or os.environ.get("CO_API_URL") or None,
            timeout=timeout_seconds,
            max_retries=0,  # retries are ours, before the stream starts (the client's skip streams)
            httpx_client=self._http,
            log_warning_experimental_features=False,
        )
        self._model, self._templates = model, templates
        self._retry = retry or RetryPolicy()
        self._max_tokens, self._temperature = max_output_tokens, temperature
        self._sleep, self._rng = sleep, rng

    async def aclose(self) -> None:
        await self._http.aclose()

    def _events(self, inp: GenerationInput) -> Events:
        prompt = render(self._templates, inp, native_citations=True)
        messages: list[Any] = [
            cohere.SystemChatMessageV2(content=prompt.system),
            cohere.UserChatMessageV2(content=prompt.user),
        ]
        documents: list[Any] = (
            []
            if inp.clarify_only
            else [
                cohere.Document(id=e.chunk_id, data={"title": e.title, "snippet": e.text})
                for e in inp.evidence
            ]
        )
        extra: dict[str, Any] = {"documents": documents} if documents else {}
        return cast(
            Events,
            self._client.chat_stream(
                model=self._model,
                messages=messages,
                max_tokens=self._max_tokens,
                temperature=self._temperature,
                **extra,
            ),
        )

    async def _open(self, inp: GenerationInput) -> tuple[Events, Any]:
        """Send the request and wait for the first event (the response status is known then)."""
        events = self._events(inp)
        try:
            first = await events.__anext__()
        except BaseException as exc:
            await events.aclose()
            if isinstance(exc, ApiError):
                raise _api_error(exc) from exc
            if isinstance(exc, httpx.HTTPError):
                raise _transport_error(exc, started=False) from exc
            if isinstance(exc, StopAsyncIteration):
                raise BackendError(
                    "MALFORMED_STREAM", "Cohere stream ended before any event"
                ) from exc
            raise
        return events, first

    async def stream(self, inp: GenerationInput) -> AsyncGenerator[str | Draft, None]:
        events, first = await open_with_retries(
            lambda: self._open(inp),
            self._retry,
            backend=self.name,
            sleep=self._sleep,
            rng=self._rng,
            deadline=inp.deadline,
        )
        parts: list[str] = []
        cited: list[tuple[list[CitationClaim], tuple[int | None, int | None, str]]] = []
        spans: list[tuple[int | None, int | None, str]] = []
        usage: tuple[int, int] | None = None
        truncated = False
        ended = False
        received = 0
        try:
            event: Any = first
            while True:
                kind = getattr(event, "type", None)
                if kind == "content-delta":
                    text = _content_text(event)
                    if text:
                        parts.append(text)
                        received += len(text)
                        yield text
                    if received > self._max_tokens * CHARS_PER_TOKEN_CAP:
                        truncated = ended = True  # it ignored max_tokens: stop reading
                        break
                elif kind == "citation-start":
                    found = _claims(event, inp.evidence)
                    if found:
                        spans.append(_span(event))
                        cited.append((found, spans[-1]))
                elif kind == "message-end":
                    *tokens, truncated = _end(event)
                    usage = (tokens[0], tokens[1])
                    ended = True
                try:
                    event = await events.__anext__()
                except StopAsyncIteration:
                    break
        except ApiError as exc:
            raise _api_error(exc) from exc
        except httpx.HTTPError as exc:
            raise _transport_error(exc, started=True) from exc
        finally:
            await events.aclose()
        if not ended:
            raise BackendError(
                "MALFORMED_STREAM",
                "Cohere stream ended without message-end (truncated or unparseable)",
            )
        text = "".join(parts)
        if not text.strip():
            raise BackendError("UPSTREAM_ERROR", "Cohere returned no text")
        claims = _with_sentences(text, cited)
        input_tokens, output_tokens = usage or (0, 0)
        clarification = looks_like_clarification(text, claims, inp.query)
        unverifiable = [
            f"cites nothing: {sentence!r}"
            for sentence in unspanned_sentences(
                text, _locate(text, spans), spare_first(inp), lead_in_of(inp)
            )
        ]
        if truncated:
            unverifiable.append(TRUNCATED)
        yield Draft(
            text,
            claims,
            input_tokens
            or estimate_tokens(inp.query) + sum(estimate_tokens(e.text) for e in inp.evidence),
            output_tokens or estimate_tokens(text),
            is_clarification=clarification,
            unverifiable=() if clarification else tuple(unverifiable),
        )


def _content_text(event: Any) -> str:
    content = getattr(getattr(getattr(event, "delta", None), "message", None), "content", None)
    text = getattr(content, "text", None)
    return text if isinstance(text, str) else ""


def _doc_chunk_id(source: Any, evidence: Sequence[EvidenceItem]) -> str:
    """The chunk id a citation source names: our document id, or Cohere's ``doc:N`` index."""
    sid = getattr(source, "id", None) or ""
    document = getattr(source, "document", None)
    if isinstance(document, dict) and isinstance(document.get("id"), str):
        sid = sid or document["id"]
    if sid.startswith("doc:") and sid[4:].isdigit() and sid not in {e.chunk_id for e in evidence}:
        n = int(sid[4:])
        if 0 <= n < len(evidence):
            return evidence[n].chunk_id
    return str(sid)


def _claims(event: Any, evidence: Sequence[EvidenceItem]) -> list[CitationClaim]:
    citation = getattr(getattr(getattr(event, "delta", None), "message", None), "citations", None)
    if citation is None or getattr(citation, "type", None) not in (None, "TEXT_CONTENT"):
        return []  # citations of thinking or tool plans are not part of the answer
    quote = (getattr(citation, "text", None) or "").strip().rstrip(_EDGE_JUNK)
    out = []
    for source in getattr(citation, "sources", None) or []:
        if getattr(source, "type", None) == "document":
            out.append(CitationClaim(_doc_chunk_id(source, evidence), quote))
    return out


def _span(event: Any) -> tuple[int | None, int | None, str]:
    """A citation's (start, end) in the answer as Cohere reports it, and its text."""
    citation = event.delta.message.citations
    start, end = getattr(citation, "start", None), getattr(citation, "end", None)
    return (
        start if isinstance(start, int) else None,
        end if isinstance(end, int) else None,
        getattr(citation, "text", None) or "",
    )


def _place(text: str, start: int | None, end: int | None, cited: str) -> tuple[int, int] | None:
    """A citation span as offsets into ``text``: Cohere's own where they hold its cited text,
    else where that text first occurs (offsets counted in other units would mis-place it)."""
    if start is not None and end is not None and (not cited or text[start:end] == cited):
        return start, end
    if cited and (at := text.find(cited)) >= 0:
        return at, at + len(cited)
    return None


def _locate(
    text: str, spans: Sequence[tuple[int | None, int | None, str]]
) -> list[tuple[int, int]]:
    """The citation spans that can be placed in ``text``, as offsets."""
    return [p for span in spans if (p := _place(text, *span)) is not None]


def _with_sentences(
    text: str, cited: Sequence[tuple[list[CitationClaim], tuple[int | None, int | None, str]]]
) -> tuple[CitationClaim, ...]:
    """Each cited span with the answer sentence it stands in, so the sentence is checked, not
    only the span (``claim_holds``); a span that cannot be placed is checked alone."""
    out: dict[CitationClaim, None] = {}
    for claims, span in cited:
        placed = _place(text, *span)
        sentence = sentence_around(text, *placed) if placed else ""
        for claim in claims:
            keep = sentence if normalise(sentence) != normalise(claim.quote) else ""
            out.setdefault(CitationClaim(claim.chunk_id, claim.quote, keep), None)
    return tuple(out)


def _end(event: Any) -> tuple[int, int, bool]:
    """Raise on an error finish; return (input, output) tokens, 0 where not reported, and
    whether the answer was cut at the output limit."""
    delta = getattr(event, "delta", None)
    finish = getattr(delta, "finish_reason", None)
    if finish in ("ERROR", "TIMEOUT") or getattr(delta, "error", None):
        detail = getattr(delta, "error", None) or finish
        raise BackendError(
            "UPSTREAM_ERROR", f"Cohere ended with an error ({finish})", upstream=str(detail)[:300]
        )
    if finish == "MAX_TOKENS":
        log.warning("LLM answer hit max_tokens", extra={"backend": "cohere"})
    usage = getattr(delta, "usage", None)
    tokens = getattr(usage, "tokens", None) or getattr(usage, "billed_units", None)
    return (
        int(getattr(tokens, "input_tokens", 0) or 0),
        int(getattr(tokens, "output_tokens", 0) or 0),
        finish == "MAX_TOKENS",
    )
