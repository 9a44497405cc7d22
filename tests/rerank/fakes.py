"""Test doubles for the reranker tests: candidates, a recording HTTP handler, and bodies shaped
like the real APIs (Cohere v2 ``/v2/rerank``, OpenAI ``chat.completion``)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx

from gate_svc.rerank import RerankCandidate

QUERY = "How long do I have to void an unused label?"
VOIDING = RerankCandidate(
    "refunds#p1c0",
    "Refunds for Unused Labels",
    "You can void an unused label within 30 days of buying it. "
    "Go to Shipments and click More > Void label.",
)
TIMING = RerankCandidate(
    "refunds#p2c0",
    "Refunds for Unused Labels",
    "Most refunds complete within 5 business days. Kestrel Express refunds can take 21 days.",
)
PICKUP = RerankCandidate(
    "pickups#p1c0",
    "Scheduling a Pickup",
    "Schedule a carrier pickup from the Pickups page; pickups can be booked up to 5 days ahead.",
)
TWO_FA = RerankCandidate(
    "security#p3c0",
    "",
    "Turn on two-factor authentication under Settings > Security.",
)
CANDIDATES = (VOIDING, TIMING, PICKUP, TWO_FA)

Reply = httpx.Response | float
"""A response to return, or seconds to stall (longer than any test budget)."""


class Recorder:
    """An httpx.MockTransport handler: records each request, answers with the next reply."""

    def __init__(self, *replies: Reply) -> None:
        self.replies = list(replies)
        self.requests: list[httpx.Request] = []

    async def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        reply = self.replies.pop(0) if len(self.replies) > 1 else self.replies[0]
        if isinstance(reply, float):
            await asyncio.sleep(reply)
            raise AssertionError("a stalled reply should have been cancelled")
        return reply

    def json(self, i: int = 0) -> Any:
        return json.loads(self.requests[i].content)


# --- Cohere v2 rerank ---------------------------------------------------------------------------


def co_rerank(scores: dict[int, float]) -> httpx.Response:
    """A /v2/rerank 200: results sorted by relevance, like the API (top_n = all)."""
    results = [
        {"index": i, "relevance_score": s} for i, s in sorted(scores.items(), key=lambda kv: -kv[1])
    ]
    return httpx.Response(
        200,
        json={
            "results": results,
            "id": "07734bd2-2473-4f07-94e1-0d9f0e6843cf",
            "meta": {
                "api_version": {"version": "2", "is_experimental": False},
                "billed_units": {"search_units": 1},
            },
        },
    )


def co_error(status: int, message: str, headers: dict[str, str] | None = None) -> httpx.Response:
    return httpx.Response(status, json={"message": message}, headers=headers)


# --- OpenAI-compatible chat.completion ----------------------------------------------------------


def judgment(
    n: int, label: str, matched: list[str] | None = None, missing: list[str] | None = None
) -> dict[str, Any]:
    return {
        "id": n,
        "label": label,
        "matched_topics": matched or [],
        "missing_topics": missing or [],
    }


def oa_completion(
    content: str, *, finish: str = "stop", refusal: str | None = None
) -> httpx.Response:
    return httpx.Response(
        200,
        json={
            "id": "chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG",
            "object": "chat.completion",
            "created": 1732000000,
            "model": "llama-3.1-8b-instruct",
            "choices": [
                {
                    "index": 0,
                    "message": {
                        "role": "assistant",
                        "content": content,
                        "refusal": refusal,
                        "annotations": [],
                    },
                    "logprobs": None,
                    "finish_reason": finish,
                }
            ],
            "usage": {"prompt_tokens": 612, "completion_tokens": 96, "total_tokens": 708},
            "system_fingerprint": "fp_44709d6fcb",
        },
    )


def oa_judgments(*judgments: dict[str, Any]) -> httpx.Response:
    return oa_completion(json.dumps({"judgments": list(judgments)}))


def oa_error(status: int, message: str, headers: dict[str, str] | None = None) -> httpx.Response:
    return httpx.Response(
        status,
        json={"error": {"message": message, "type": "server_error", "param": None, "code": None}},
        headers=headers,
    )
