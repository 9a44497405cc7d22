"""retrieval_svc.rewrite: seed 001's query rewrite and its fallbacks, at the HTTP transport."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx
import pytest

from candor.chat import ChatClient
from candor.settings import RewriteSettings
from retrieval_svc.rewrite import (
    FALLBACK_ERROR,
    FALLBACK_REJECTED,
    FALLBACK_TIMEOUT,
    REWRITTEN,
    LLMQueryRewriter,
    RewriteRejected,
    build_rewriter,
    rewrite_query,
    sanitise,
)
from tests.rerank.fakes import Recorder, oa_completion, oa_error

QUERY = "and how long for an unused one?"


def rewriter(rec: Recorder, **kw: Any) -> LLMQueryRewriter:
    chat = ChatClient("http://llm.test/v1", "small", transport=httpx.MockTransport(rec))
    return LLMQueryRewriter(chat, **kw)


async def test_a_good_rewrite_is_used_and_the_prompt_asks_for_a_bare_query() -> None:
    rec = Recorder(oa_completion('Search query: "time limit to void an unused shipping label"'))
    result = await rewrite_query(rewriter(rec, max_words=20), QUERY, 1.0)
    assert result.outcome == REWRITTEN
    assert result.query == result.rewritten == "time limit to void an unused shipping label"
    assert result.detail == ""
    body = rec.json()
    assert body["max_tokens"] == 64 and body["temperature"] == 0.0 and body["stream"] is False
    assert "response_format" not in body
    system, user = body["messages"]
    assert user == {"role": "user", "content": QUERY}
    for rule in ("standalone search query", "same language", "Do not answer", "at most 20 words"):
        assert rule in system["content"]


async def test_a_stalled_rewriter_falls_back_to_the_raw_query_within_the_budget() -> None:
    started = time.perf_counter()
    result = await rewrite_query(rewriter(Recorder(30.0)), QUERY, 0.3)
    elapsed = time.perf_counter() - started
    assert 0.28 <= elapsed < 0.5
    assert (result.outcome, result.query, result.rewritten) == (FALLBACK_TIMEOUT, QUERY, "")
    assert result.latency_seconds == pytest.approx(elapsed, abs=0.05)


async def test_no_budget_left_falls_back_without_a_request() -> None:
    rec = Recorder(oa_completion("anything"))
    result = await rewrite_query(rewriter(rec), QUERY, 0.0)
    assert result.outcome == FALLBACK_TIMEOUT and rec.requests == []


async def test_a_rewriter_that_ignores_its_timeout_is_still_cut_off() -> None:
    class Stubborn:
        name = "stubborn"

        async def rewrite(self, query: str, timeout_seconds: float) -> str:
            await asyncio.sleep(30)
            return "never"

        async def aclose(self) -> None:
            pass

    started = time.perf_counter()
    result = await rewrite_query(Stubborn(), QUERY, 0.1)
    assert time.perf_counter() - started < 0.3
    assert result.outcome == FALLBACK_TIMEOUT and result.query == QUERY


@pytest.mark.parametrize(
    ("reply", "needle"),
    [
        (oa_completion('""'), "empty"),
        (
            oa_completion("void unused label time limit\n\nI rewrote it to be standalone."),
            "2 lines",
        ),
        (oa_completion(" ".join(["label"] * 40)), "40 words"),
        (
            oa_completion("unused shipping label refund time limit in days for every carrier"),
            "11 words, at most 8",
        ),
    ],
)
async def test_garbage_output_is_rejected(reply: httpx.Response, needle: str) -> None:
    result = await rewrite_query(rewriter(Recorder(reply)), "void label?", 1.0)
    assert result.outcome == FALLBACK_REJECTED
    assert result.query == "void label?" and result.rewritten == ""
    assert needle in result.detail


@pytest.mark.parametrize(
    ("reply", "outcome"),
    [
        (oa_error(500, "boom"), FALLBACK_ERROR),
        (oa_error(429, "slow down", {"Retry-After": "1"}), FALLBACK_ERROR),
        (oa_completion("", refusal="I can't help with that."), FALLBACK_ERROR),
        (httpx.Response(200, text="upstream connect error"), FALLBACK_ERROR),
    ],
)
async def test_an_endpoint_failure_falls_back(reply: httpx.Response, outcome: str) -> None:
    result = await rewrite_query(rewriter(Recorder(reply)), QUERY, 1.0)
    assert (result.outcome, result.query) == (outcome, QUERY)
    assert result.detail


def test_sanitise_allows_growth_up_to_the_factor_of_the_query_words() -> None:
    assert sanitise("void unused label refund", "refund?", max_words=32, max_growth=4) == (
        "void unused label refund"
    )
    with pytest.raises(RewriteRejected, match="5 words, at most 4"):
        sanitise("void an unused label refund", "refund?", max_words=32, max_growth=4)
    assert sanitise("  spaced\t out  ", "a b", max_words=5, max_growth=4) == "spaced out"


def test_build_rewriter_follows_the_settings() -> None:
    assert build_rewriter(RewriteSettings()) is None
    on = RewriteSettings(backend="openai_compat", base_url="http://llm.test/v1", model="small")
    assert isinstance(build_rewriter(on), LLMQueryRewriter)
