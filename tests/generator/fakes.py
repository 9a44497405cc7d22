"""Shared test doubles for the generator tests: evidence, HTTP streams shaped like the real
APIs (OpenAI chat.completion.chunk SSE, Cohere v2 chat stream events), a recorded sleep."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable, Iterable
from typing import Any

import httpx

from generator_svc.llm.base import Draft, EvidenceItem, GenerationInput
from generator_svc.llm.retry import RetryPolicy

VOIDING = EvidenceItem(
    "refunds#p1c0",
    "Refunds for Unused Labels",
    "How to void a label\n\nYou can void an unused label within 30 days of buying it. "
    "Go to **Shipments** and click **More > Void label**.",
)
TIMING = EvidenceItem(
    "refunds#p2c0",
    "Refunds for Unused Labels",
    "Most refunds complete within 5 business days. Kestrel Express refunds can take up to 21 days.",
)
EVIDENCE = (VOIDING, TIMING)
QUERY = "How long do I have to void an unused label?"

FAST_RETRY = RetryPolicy(max_retries=2, backoff_seconds=0.5, backoff_max_seconds=8.0)


def gen_input(
    query: str = QUERY,
    evidence: tuple[EvidenceItem, ...] = EVIDENCE,
    *,
    tier: str = "confident",
    language: str = "en",
    clarify_only: bool = False,
) -> GenerationInput:
    return GenerationInput(query, evidence, language, tier, clarify_only)


class Sleeps:
    """Records backoff delays instead of sleeping."""

    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)


async def collect(stream: AsyncIterator[str | Draft]) -> tuple[list[str], Draft]:
    events = [e async for e in stream]
    *deltas, draft = events
    assert isinstance(draft, Draft), events
    assert all(isinstance(d, str) for d in deltas)
    return deltas, draft  # type: ignore[return-value]


class HangingStream(httpx.AsyncByteStream):
    """A response body that sends ``chunks``, then stalls like a model still generating.

    ``closed`` turns True when the client closes the response (our cancellation signal);
    ``fail_with`` raises after the chunks instead of stalling (a mid-stream timeout).
    """

    def __init__(self, chunks: Iterable[bytes], fail_with: Exception | None = None) -> None:
        self.chunks = list(chunks)
        self.fail_with = fail_with
        self.closed = False
        self.stalled = asyncio.Event()
        self._never = asyncio.Event()

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for chunk in self.chunks:
            yield chunk
        if self.fail_with is not None:
            raise self.fail_with
        self.stalled.set()
        await self._never.wait()

    async def aclose(self) -> None:
        self.closed = True


SSE_HEADERS = {"content-type": "text/event-stream; charset=utf-8"}


# --- OpenAI-compatible: chat.completion.chunk --------------------------------------------------


def oa_chunk(
    content: str | None = None, *, role: str | None = None, finish: str | None = None
) -> dict[str, Any]:
    delta: dict[str, Any] = {}
    if role is not None:
        delta["role"] = role
    if content is not None:
        delta["content"] = content
    return {
        "id": "chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT",
        "object": "chat.completion.chunk",
        "created": 1732000000,
        "model": "llama-3.1-8b-instruct",
        "system_fingerprint": "fp_44709d6fcb",
        "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
    }


def oa_usage(prompt: int, completion: int) -> dict[str, Any]:
    chunk = oa_chunk()
    chunk["choices"] = []
    chunk["usage"] = {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }
    return chunk


def oa_sse(*chunks: dict[str, Any], done: bool = True) -> bytes:
    body = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks)
    return (body + ("data: [DONE]\n\n" if done else "")).encode()


def oa_answer_chunks(text_pieces: Iterable[str], usage: tuple[int, int] = (180, 21)) -> bytes:
    chunks = [oa_chunk("", role="assistant")]
    chunks += [oa_chunk(p) for p in text_pieces]
    chunks += [oa_chunk(finish="stop"), oa_usage(*usage)]
    return oa_sse(*chunks)


# --- Cohere v2 chat stream events ---------------------------------------------------------------


def co_event(event: dict[str, Any]) -> str:
    return f"event: {event['type']}\ndata: {json.dumps(event)}\n\n"


def co_citation(
    start: int, text: str, *sources: EvidenceItem, index: int = 0, kind: str = "TEXT_CONTENT"
) -> dict[str, Any]:
    return {
        "type": "citation-start",
        "index": index,
        "delta": {
            "message": {
                "citations": {
                    "start": start,
                    "end": start + len(text),
                    "text": text,
                    "sources": [
                        {
                            "type": "document",
                            "id": s.chunk_id,
                            "document": {"id": s.chunk_id, "snippet": s.text, "title": s.title},
                        }
                        for s in sources
                    ],
                    "type": kind,
                }
            }
        },
    }


def co_stream(
    pieces: Iterable[str],
    citations: Iterable[dict[str, Any]] = (),
    *,
    usage: tuple[int, int] = (1204, 27),
    finish: str = "COMPLETE",
    end: bool = True,
) -> bytes:
    """A Cohere v2 RAG stream: message-start, content-start, deltas, citations, ends."""
    events: list[dict[str, Any]] = [
        {
            "id": "d93f187e-e9ac-44a9-a2d9-bdf2d65fee94",
            "type": "message-start",
            "delta": {
                "message": {
                    "role": "assistant",
                    "content": [],
                    "tool_plan": "",
                    "tool_calls": [],
                    "citations": [],
                }
            },
        },
        {
            "type": "content-start",
            "index": 0,
            "delta": {"message": {"content": {"type": "text", "text": ""}}},
        },
    ]
    events += [
        {"type": "content-delta", "index": 0, "delta": {"message": {"content": {"text": p}}}}
        for p in pieces
    ]
    for i, c in enumerate(citations):
        events += [c, {"type": "citation-end", "index": i}]
    events.append({"type": "content-end", "index": 0})
    if end:
        events.append(
            {
                "type": "message-end",
                "delta": {
                    "finish_reason": finish,
                    "usage": {
                        "billed_units": {"input_tokens": usage[0] - 4, "output_tokens": usage[1]},
                        "tokens": {"input_tokens": usage[0], "output_tokens": usage[1]},
                    },
                },
            }
        )
    return "".join(co_event(e) for e in events).encode()


Handler = Callable[[httpx.Request], httpx.Response]


class Recorder:
    """A MockTransport handler answering from a queue of responses (or exceptions)."""

    def __init__(self, *answers: httpx.Response | Exception) -> None:
        self.answers = list(answers)
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    def json(self, i: int = -1) -> Any:
        return json.loads(self.requests[i].content)
