"""gate_svc.rerank.CohereReranker through the official client, at its httpx transport, with
responses shaped like Cohere's v2 /v2/rerank."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from gate_svc.rerank import (
    CohereReranker,
    FallbackReranker,
    RelevanceCuts,
    RerankError,
    with_fallback,
)
from tests.rerank.fakes import (
    CANDIDATES,
    PICKUP,
    QUERY,
    TIMING,
    TWO_FA,
    VOIDING,
    Recorder,
    co_error,
    co_rerank,
)

BASE = "https://api.cohere.test"


def reranker(rec: Recorder, **kw: Any) -> CohereReranker:
    args: dict[str, Any] = {
        "api_key": "co-test-key",
        "base_url": BASE,
        "backoff_seconds": 0.01,
        "httpx_client": httpx.AsyncClient(transport=httpx.MockTransport(rec)),
    }
    args.update(kw)
    return CohereReranker(**args)


def guarded(rec: Recorder, **kw: Any) -> FallbackReranker:
    return with_fallback(reranker(rec, **kw))


async def test_scores_every_candidate_in_input_order_on_the_0_to_3_scale() -> None:
    rec = Recorder(co_rerank({0: 0.93, 1: 0.61, 2: 0.2, 3: 0.012}))
    result = await reranker(rec).rerank(QUERY, CANDIDATES, 2.0)
    assert [s.chunk_id for s in result.scores] == [c.chunk_id for c in CANDIDATES]
    assert [(s.relevance, s.scale, s.label) for s in result.scores] == [
        (0.93, 3, "answers"),
        (0.61, 2, "partial"),
        (0.2, 1, "supplement"),
        (0.012, 0, "no_match"),
    ]
    assert all(s.matched_topics == () and s.missing_topics == () for s in result.scores)
    assert (result.backend, result.fallback, result.error, result.attempts) == (
        "cohere",
        False,
        "",
        1,
    )
    assert 0 < result.latency_seconds < 2.0
    assert result.top_scale == 3
    assert [s.chunk_id for s in result.relevant()] == [VOIDING.chunk_id, TIMING.chunk_id]


async def test_request_is_a_v2_rerank_of_every_document_with_its_title() -> None:
    rec = Recorder(co_rerank({0: 0.9, 1: 0.5, 2: 0.1, 3: 0.0}))
    await reranker(rec, model="rerank-multilingual-v3.0").rerank(QUERY, CANDIDATES, 2.0)
    (request,) = rec.requests
    assert request.method == "POST"
    assert str(request.url) == f"{BASE}/v2/rerank"
    assert request.headers["authorization"] == "Bearer co-test-key"
    assert rec.json() == {
        "model": "rerank-multilingual-v3.0",
        "query": QUERY,
        "documents": [
            f"{VOIDING.title}\n{VOIDING.text}",
            f"{TIMING.title}\n{TIMING.text}",
            f"{PICKUP.title}\n{PICKUP.text}",
            TWO_FA.text,  # no title: the text alone
        ],
        "top_n": 4,
    }


async def test_max_tokens_per_doc_is_sent_when_set() -> None:
    rec = Recorder(co_rerank({0: 0.9}))
    await reranker(rec, max_tokens_per_doc=512).rerank(QUERY, [VOIDING], 2.0)
    assert rec.json()["max_tokens_per_doc"] == 512


async def test_cut_points_are_constructor_parameters() -> None:
    rec = Recorder(co_rerank({0: 0.93, 1: 0.61, 2: 0.2, 3: 0.012}))
    strict = RelevanceCuts(answers=0.95, partial=0.7, supplement=0.01)
    result = await reranker(rec, cuts=strict).rerank(QUERY, CANDIDATES, 2.0)
    assert [s.scale for s in result.scores] == [2, 1, 1, 1]
    assert result.relevant() == result.scores[:1]


async def test_api_key_comes_from_the_mounted_file(tmp_path: Path) -> None:
    key_file = tmp_path / "api-key"
    key_file.write_text("co-from-file\n")
    rec = Recorder(co_rerank({0: 0.9}))
    await reranker(rec, api_key="ignored", api_key_file=str(key_file)).rerank(QUERY, [VOIDING], 2.0)
    assert rec.requests[0].headers["authorization"] == "Bearer co-from-file"


def test_a_missing_or_empty_key_is_a_start_up_error(tmp_path: Path) -> None:
    rec = Recorder(co_rerank({}))
    with pytest.raises(ValueError, match="api_key"):
        reranker(rec, api_key="")
    with pytest.raises(ValueError, match="cannot read"):
        reranker(rec, api_key_file=str(tmp_path / "absent"))
    (tmp_path / "empty").write_text("\n")
    with pytest.raises(ValueError, match="is empty"):
        reranker(rec, api_key_file=str(tmp_path / "empty"))


async def test_no_candidates_no_request() -> None:
    rec = Recorder(co_rerank({}))
    result = await reranker(rec).rerank(QUERY, [], 2.0)
    assert result.scores == () and not result.fallback
    assert rec.requests == []


# --- retries and failures -----------------------------------------------------------------------


async def test_429_then_200_is_retried_once() -> None:
    rec = Recorder(
        co_error(429, "You are using a Trial key, which is limited to 10 API calls / minute."),
        co_rerank({0: 0.9, 1: 0.3}),
    )
    result = await guarded(rec).rerank(QUERY, [VOIDING, TIMING], 2.0)
    assert not result.fallback, result.error
    assert [s.scale for s in result.scores] == [3, 1]
    assert result.attempts == 2
    assert len(rec.requests) == 2
    assert rec.json(0) == rec.json(1)


async def test_500_twice_falls_back_with_the_error() -> None:
    rec = Recorder(co_error(500, "internal server error"))
    started = time.perf_counter()
    result = await guarded(rec).rerank(QUERY, CANDIDATES, 2.0)
    assert time.perf_counter() - started < 1.0
    assert result.fallback and result.scores == ()
    assert result.backend == "cohere"
    assert result.error_reason == "UPSTREAM_UNAVAILABLE"
    assert "HTTP 500" in result.error and "internal server error" in result.error
    assert "gave up after 2 attempts" in result.error
    assert len(rec.requests) == 2  # one retry, no more


async def test_a_client_error_is_not_retried() -> None:
    rec = Recorder(co_error(400, "invalid request: model 'rerank-v9' not found"))
    result = await guarded(rec).rerank(QUERY, CANDIDATES, 2.0)
    assert result.fallback
    assert result.error_reason == "UPSTREAM_REJECTED"
    assert "rerank-v9" in result.error
    assert len(rec.requests) == 1


async def test_a_retry_after_beyond_the_budget_is_not_waited_for() -> None:
    rec = Recorder(co_error(429, "slow down", {"Retry-After": "30"}), co_rerank({0: 0.9}))
    started = time.perf_counter()
    result = await guarded(rec).rerank(QUERY, [VOIDING], 1.0)
    assert time.perf_counter() - started < 0.5
    assert result.fallback and result.error_reason == "RATE_LIMITED"
    assert "does not fit the budget" in result.error
    assert len(rec.requests) == 1


async def test_a_stalled_server_falls_back_within_the_budget() -> None:
    rec = Recorder(30.0)
    budget = 0.3
    started = time.perf_counter()
    result = await guarded(rec).rerank(QUERY, CANDIDATES, budget)
    elapsed = time.perf_counter() - started
    assert budget - 0.02 <= elapsed < budget + 0.4
    assert result.fallback and result.error_reason == "TIMEOUT"
    assert "0.3 s" in result.error
    assert result.latency_seconds == pytest.approx(elapsed, abs=0.05)


@pytest.mark.parametrize(
    ("response", "message"),
    [
        (co_rerank({0: 0.9, 1: 0.4, 7: 0.1}), "index 7 is not one of the 3 documents"),
        (co_rerank({0: 0.9, 1: 0.4}), "scored 2 of 3 documents (missing [2])"),
        (co_rerank({0: 0.9, 1: 1.7, 2: 0.1}), "1.7 is not in [0, 1]"),
        (httpx.Response(200, json={"id": "x", "meta": {}}), "no results list"),
        (httpx.Response(200, text="<html>gateway</html>"), "not JSON"),
    ],
)
async def test_a_malformed_body_falls_back(response: httpx.Response, message: str) -> None:
    rec = Recorder(response)
    result = await guarded(rec).rerank(QUERY, [VOIDING, TIMING, PICKUP], 2.0)
    assert result.fallback
    assert result.error_reason == "MALFORMED_RESPONSE"
    assert message in result.error
    assert len(rec.requests) == 1


async def test_unwrapped_the_backend_raises_rerank_error() -> None:
    rec = Recorder(co_error(503, "overloaded"))
    with pytest.raises(RerankError) as info:
        await reranker(rec, max_retries=0).rerank(QUERY, [VOIDING], 2.0)
    assert info.value.reason == "UPSTREAM_UNAVAILABLE"
    assert info.value.status == 503
