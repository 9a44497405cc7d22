"""generator_svc.llm.openai_compat at the HTTP transport: real chat.completion.chunk shapes."""

from __future__ import annotations

import asyncio
import math

import httpx
import pytest

from generator_svc.citations import verify_citations
from generator_svc.llm.base import TRUNCATED, BackendError, Draft
from generator_svc.llm.openai_compat import OpenAICompatBackend
from generator_svc.prompts import load_templates
from tests.generator.fakes import (
    EVIDENCE,
    FAST_RETRY,
    SSE_HEADERS,
    TIMING,
    VOIDING,
    HangingStream,
    Recorder,
    Sleeps,
    collect,
    gen_input,
    oa_answer_chunks,
    oa_chunk,
    oa_sse,
    oa_usage,
)

TEMPLATES = load_templates()
ANSWER = [
    "You can void",
    " an unused label within 30 days of buying it. [1]",
    " Most refunds complete within 5 business days. [2]",
]


def backend(handler: Recorder, sleeps: Sleeps | None = None, **kw: object) -> OpenAICompatBackend:
    args: dict[str, object] = {
        "base_url": "http://llm.internal:8000/v1",
        "model": "llama-3.1-8b-instruct",
        "templates": TEMPLATES,
        "api_key": "sk-test",
        "retry": FAST_RETRY,
        "transport": httpx.MockTransport(handler),
        "sleep": sleeps or Sleeps(),
        "rng": lambda: 1.0,
    }
    args.update(kw)
    return OpenAICompatBackend(**args)  # type: ignore[arg-type]


def ok(body: bytes) -> httpx.Response:
    return httpx.Response(200, headers=SSE_HEADERS, content=body)


async def test_streams_deltas_and_a_draft_with_parsed_holding_citations() -> None:
    rec = Recorder(ok(oa_answer_chunks(ANSWER, usage=(180, 21))))
    deltas, draft = await collect(backend(rec).stream(gen_input()))
    assert deltas == ANSWER
    assert draft.text == "".join(ANSWER)
    assert [(c.chunk_id, c.quote) for c in draft.citations] == [
        (VOIDING.chunk_id, "You can void an unused label within 30 days of buying it"),
        (TIMING.chunk_id, "Most refunds complete within 5 business days"),
    ]
    checks = verify_citations(draft.citations, {e.chunk_id: e.text for e in EVIDENCE})
    assert all(c.verified for c in checks), checks
    assert (draft.input_tokens, draft.output_tokens) == (180, 21)
    assert not draft.is_clarification


async def test_request_is_an_openai_chat_completion_with_numbered_evidence() -> None:
    rec = Recorder(ok(oa_answer_chunks(ANSWER)))
    await collect(backend(rec, max_output_tokens=300).stream(gen_input()))
    request = rec.requests[0]
    assert request.method == "POST"
    assert str(request.url) == "http://llm.internal:8000/v1/chat/completions"
    assert request.headers["authorization"] == "Bearer sk-test"
    body = rec.json()
    assert body["model"] == "llama-3.1-8b-instruct"
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}
    assert body["max_tokens"] == 300
    assert body["temperature"] == 0.0
    system, user = body["messages"]
    assert system["role"] == "system" and "[2]" in system["content"]
    assert user["role"] == "user"
    assert f"[1] {VOIDING.title}\n{VOIDING.text}" in user["content"]
    assert f"[2] {TIMING.title}" in user["content"]
    assert user["content"].endswith(f"Question: {gen_input().query}")


async def test_no_api_key_sends_no_authorization_header() -> None:
    rec = Recorder(ok(oa_answer_chunks(ANSWER)))
    await collect(backend(rec, api_key="").stream(gen_input()))
    assert "authorization" not in rec.requests[0].headers


async def test_missing_usage_is_estimated() -> None:
    body = oa_sse(
        oa_chunk("", role="assistant"), oa_chunk(ANSWER[1].strip()), oa_chunk(finish="stop")
    )
    _, draft = await collect(backend(Recorder(ok(body)), include_usage=False).stream(gen_input()))
    assert draft.input_tokens > 50
    assert draft.output_tokens == math.ceil(len(draft.text.split()) * 1.3)


async def test_keepalive_comments_and_event_lines_are_skipped() -> None:
    body = b": keep-alive\n\nevent: message\n" + oa_answer_chunks(ANSWER)
    _, draft = await collect(backend(Recorder(ok(body))).stream(gen_input()))
    assert draft.text == "".join(ANSWER)


async def test_a_question_without_citations_is_a_clarification() -> None:
    question = "Do you mean a shipping label or a return label?"
    rec = Recorder(ok(oa_answer_chunks([question])))
    _, draft = await collect(backend(rec).stream(gen_input()))
    assert draft.is_clarification
    assert draft.citations == ()


async def test_a_fact_before_a_question_is_no_clarification() -> None:
    text = "Labels can be voided for 90 days. Want to know more?"
    _, draft = await collect(backend(Recorder(ok(oa_answer_chunks([text])))).stream(gen_input()))
    assert not draft.is_clarification
    assert draft.unverifiable == ("cites nothing: 'Labels can be voided for 90 days.'",)


async def test_uncited_and_hidden_sentences_are_unverifiable_and_the_caveat_is_spared() -> None:
    text = (
        "This may be incomplete. Labels are free to void forever. "
        "You can void an unused label within 30 days of buying it. [1] "
        '<!-- "Most refunds complete within 5 business days" --> Refunds are instant. [2]'
    )
    rec = Recorder(ok(oa_answer_chunks([text])))
    _, draft = await collect(backend(rec).stream(gen_input(tier="uncertain")))
    assert draft.unverifiable == ("cites nothing: 'Labels are free to void forever.'",)
    # The hidden quote is not the claim: the visible sentence is, and it is not in evidence 2.
    assert ("refunds#p2c0", "Refunds are instant", "") in {
        (c.chunk_id, c.quote, c.sentence) for c in draft.citations
    }


async def test_an_answer_cut_at_the_output_limit_is_unverifiable() -> None:
    chunks = [oa_chunk("", role="assistant"), oa_chunk("You can void an unused label [1]")]
    chunks += [oa_chunk(finish="length"), oa_usage(100, 8)]
    _, draft = await collect(backend(Recorder(ok(oa_sse(*chunks)))).stream(gen_input()))
    assert TRUNCATED in draft.unverifiable


async def test_clarify_only_sends_no_evidence() -> None:
    question = "Which order do you mean?"
    rec = Recorder(ok(oa_answer_chunks([question])))
    _, draft = await collect(backend(rec).stream(gen_input(evidence=(), clarify_only=True)))
    assert draft.is_clarification
    system, user = rec.json()["messages"]
    assert "Evidence" not in user["content"]
    assert "clarifying question" in system["content"]


# --- errors -----------------------------------------------------------------------------------


async def test_429_then_success_retries_after_the_servers_retry_after() -> None:
    sleeps = Sleeps()
    rec = Recorder(
        httpx.Response(429, headers={"retry-after": "2"}, json={"error": {"message": "slow down"}}),
        ok(oa_answer_chunks(ANSWER)),
    )
    _, draft = await collect(backend(rec, sleeps).stream(gen_input()))
    assert draft.text == "".join(ANSWER)
    assert len(rec.requests) == 2
    assert sleeps.delays == [2.0]


async def test_500_until_retries_are_exhausted_is_upstream_unavailable() -> None:
    sleeps = Sleeps()
    rec = Recorder(*(httpx.Response(500, text="upstream exploded") for _ in range(3)))
    with pytest.raises(BackendError) as err:
        await collect(backend(rec, sleeps).stream(gen_input()))
    assert err.value.reason == "UPSTREAM_UNAVAILABLE"
    assert err.value.status == 500
    assert "gave up after 3 attempts" in str(err.value)
    assert err.value.upstream == "upstream exploded" and "exploded" not in str(err.value)
    assert len(rec.requests) == 3
    assert sleeps.delays == [0.5, 1.0]  # exponential backoff (jitter pinned by rng)


async def test_429_exhaustion_is_rate_limited() -> None:
    rec = Recorder(*(httpx.Response(429) for _ in range(3)))
    with pytest.raises(BackendError) as err:
        await collect(backend(rec).stream(gen_input()))
    assert err.value.reason == "RATE_LIMITED"


async def test_a_4xx_is_not_retried() -> None:
    rec = Recorder(httpx.Response(404, json={"error": {"message": "model not found"}}))
    with pytest.raises(BackendError) as err:
        await collect(backend(rec).stream(gen_input()))
    assert err.value.reason == "UPSTREAM_REJECTED"
    # The endpoint's body is for the log: a Generate caller saw it in the status details.
    assert "model not found" in err.value.upstream and "model not found" not in str(err.value)
    assert len(rec.requests) == 1


async def test_connection_refused_is_retried() -> None:
    rec = Recorder(httpx.ConnectError("connection refused"), ok(oa_answer_chunks(ANSWER)))
    _, draft = await collect(backend(rec).stream(gen_input()))
    assert draft.text == "".join(ANSWER)


async def test_timeout_waiting_for_the_response_is_a_timeout_and_not_retried() -> None:
    rec = Recorder(httpx.ReadTimeout("timed out"))
    with pytest.raises(BackendError) as err:
        await collect(backend(rec).stream(gen_input()))
    assert err.value.reason == "TIMEOUT"
    assert len(rec.requests) == 1


async def test_a_stream_that_stalls_mid_answer_is_a_timeout() -> None:
    body = HangingStream(
        [oa_sse(oa_chunk("", role="assistant"), oa_chunk("You can"), done=False)],
        fail_with=httpx.ReadTimeout("read timed out"),
    )
    rec = Recorder(httpx.Response(200, headers=SSE_HEADERS, stream=body))
    seen: list[str | Draft] = []
    with pytest.raises(BackendError) as err:
        async for event in backend(rec).stream(gen_input()):
            seen.append(event)
    assert err.value.reason == "TIMEOUT"
    assert seen == ["You can"]
    assert body.closed


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        (b"data: {not json\n\n", "not JSON"),
        (b'data: {"id": "x"}\n\n', "choices"),
        (b'data: {"choices": ["x"]}\n\n', "not an object"),
        (b"<html>502 Bad Gateway</html>\n", "unexpected line"),
        (oa_sse(oa_chunk("", role="assistant"), oa_chunk("You can"), done=False), "[DONE]"),
    ],
)
async def test_malformed_stream_is_a_clear_error(body: bytes, needle: str) -> None:
    with pytest.raises(BackendError) as err:
        await collect(backend(Recorder(ok(body))).stream(gen_input()))
    assert err.value.reason == "MALFORMED_STREAM"
    assert needle in str(err.value)


async def test_a_json_answer_instead_of_a_stream_is_malformed() -> None:
    rec = Recorder(httpx.Response(200, json={"object": "chat.completion", "choices": []}))
    with pytest.raises(BackendError) as err:
        await collect(backend(rec).stream(gen_input()))
    assert err.value.reason == "MALFORMED_STREAM"
    assert "text/event-stream" in str(err.value)


async def test_an_error_object_in_the_stream_is_an_upstream_error() -> None:
    body = oa_sse(oa_chunk("", role="assistant"), {"error": {"message": "CUDA out of memory"}})
    with pytest.raises(BackendError) as err:
        await collect(backend(Recorder(ok(body))).stream(gen_input()))
    assert err.value.reason == "UPSTREAM_ERROR"
    # What the endpoint said is for the log, not the caller's status.
    assert err.value.upstream == "CUDA out of memory" and "CUDA" not in str(err.value)


async def test_an_empty_answer_is_an_upstream_error() -> None:
    body = oa_sse(oa_chunk("", role="assistant"), oa_chunk(finish="stop"))
    with pytest.raises(BackendError) as err:
        await collect(backend(Recorder(ok(body))).stream(gen_input()))
    assert err.value.reason == "UPSTREAM_ERROR"


# --- cancellation -----------------------------------------------------------------------------


def hanging() -> tuple[Recorder, HangingStream]:
    body = HangingStream([oa_sse(oa_chunk("", role="assistant"), oa_chunk("You can"), done=False)])
    return Recorder(httpx.Response(200, headers=SSE_HEADERS, stream=body)), body


async def test_closing_the_stream_closes_the_http_response() -> None:
    rec, body = hanging()
    stream = backend(rec).stream(gen_input())
    assert await stream.__anext__() == "You can"
    assert not body.closed
    await stream.aclose()
    assert body.closed


async def test_cancelling_the_consumer_mid_answer_closes_the_http_response() -> None:
    rec, body = hanging()
    seen: list[str | Draft] = []

    async def consume() -> None:
        async for event in backend(rec).stream(gen_input()):
            seen.append(event)

    task = asyncio.create_task(consume())
    await asyncio.wait_for(body.stalled.wait(), 5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert seen == ["You can"]
    assert body.closed


async def test_aclose_closes_the_http_client() -> None:
    b = backend(Recorder())
    await b.aclose()
    assert b._client.is_closed


def test_base_url_and_model_are_required() -> None:
    with pytest.raises(ValueError, match="model"):
        backend(Recorder(), model="")
    with pytest.raises(ValueError, match="base_url"):
        backend(Recorder(), base_url="")


async def test_a_retry_that_would_start_after_the_callers_deadline_is_not_waited_for() -> None:
    # Retry-After 8 s with 5 s left: the retry waited past the deadline, and the 429 reached
    # the metrics as a cancel.
    import dataclasses
    import time

    sleeps = Sleeps()
    rec = Recorder(
        httpx.Response(429, headers={"retry-after": "8"}, json={"error": {"message": "slow"}}),
        ok(oa_answer_chunks(ANSWER)),
    )
    inp = dataclasses.replace(gen_input(), deadline=time.monotonic() + 5)
    with pytest.raises(BackendError) as err:
        await collect(backend(rec, sleeps).stream(inp))
    assert err.value.reason == "RATE_LIMITED" and "deadline" in str(err.value)
    assert sleeps.delays == [] and len(rec.requests) == 1


async def test_a_reply_far_past_max_tokens_is_cut_and_not_verified() -> None:
    # An endpoint that ignores max_tokens streamed 50 MB, all of it forwarded and checked.
    from generator_svc.llm.base import CHARS_PER_TOKEN_CAP, TRUNCATED

    piece = "All refunds are instant. " * 40
    pieces = [piece] * 200  # ~200 kB
    rec = Recorder(ok(oa_answer_chunks(pieces)))
    deltas, draft = await collect(backend(rec, max_output_tokens=64).stream(gen_input()))
    assert len("".join(deltas)) <= 64 * CHARS_PER_TOKEN_CAP + len(piece)
    assert TRUNCATED in draft.unverifiable
