"""candor.chat.ChatClient at the HTTP transport, against OpenAI ``chat.completion`` bodies."""

from __future__ import annotations

import time
from typing import Any

import httpx
import pytest

from candor.chat import (
    MALFORMED_RESPONSE,
    RATE_LIMITED,
    TIMEOUT,
    UPSTREAM_REJECTED,
    UPSTREAM_UNAVAILABLE,
    ChatClient,
    UpstreamError,
    clean_reply,
    client_for,
    retry_after,
)
from candor.settings import RewriteSettings
from tests.rerank.fakes import Recorder, oa_completion, oa_error

BASE = "http://llm.test:8000/v1"
HELLO = [{"role": "user", "content": "hello"}]


def client(rec: Recorder, **kw: Any) -> ChatClient:
    return ChatClient(BASE, "llama-3.1-8b-instruct", transport=httpx.MockTransport(rec), **kw)


async def fails(rec: Recorder, timeout_seconds: float = 2.0) -> UpstreamError:
    with pytest.raises(UpstreamError) as err:
        await client(rec).complete(HELLO, timeout_seconds=timeout_seconds, max_tokens=16)
    return err.value


async def test_one_non_streaming_request_returns_the_message_content() -> None:
    rec = Recorder(oa_completion("Bonjour"))
    reply = await client(rec, api_key="sk-test").complete(
        HELLO, timeout_seconds=2.0, max_tokens=16, temperature=0.2
    )
    assert reply == "Bonjour"
    (request,) = rec.requests
    assert str(request.url) == f"{BASE}/chat/completions"
    assert request.headers["authorization"] == "Bearer sk-test"
    assert rec.json() == {
        "model": "llama-3.1-8b-instruct",
        "messages": HELLO,
        "temperature": 0.2,
        "max_tokens": 16,
        "stream": False,
    }


async def test_json_mode_asks_for_a_json_object() -> None:
    rec = Recorder(oa_completion('{"questions": []}'))
    await client(rec).complete(HELLO, timeout_seconds=2.0, max_tokens=16, json_mode=True)
    assert rec.json()["response_format"] == {"type": "json_object"}
    assert "authorization" not in rec.requests[0].headers


async def test_429_is_rate_limited_and_retryable_with_the_servers_retry_after() -> None:
    err = await fails(Recorder(oa_error(429, "Rate limit reached", {"Retry-After": "7"})))
    assert (err.reason, err.status, err.retryable, err.retry_after) == (RATE_LIMITED, 429, True, 7)
    assert "HTTP 429: Rate limit reached" in err.message


async def test_retry_after_ms_wins_and_a_date_is_ignored() -> None:
    assert retry_after({"retry-after-ms": "250", "Retry-After": "9"}) == 0.25
    assert retry_after({"Retry-After": "Wed, 21 Oct 2026 07:28:00 GMT"}) is None
    assert retry_after({"Retry-After": "-3"}) is None
    assert retry_after({}) is None


async def test_500_is_unavailable_and_retryable() -> None:
    err = await fails(Recorder(oa_error(500, "The server had an error")))
    assert (err.reason, err.status, err.retryable) == (UPSTREAM_UNAVAILABLE, 500, True)
    assert err.retry_after is None
    assert "The server had an error" in str(err)


async def test_400_is_rejected_and_not_retryable() -> None:
    err = await fails(Recorder(oa_error(400, "max_tokens is too large")))
    assert (err.reason, err.status, err.retryable) == (UPSTREAM_REJECTED, 400, False)
    assert "max_tokens is too large" in err.message


async def test_a_stalled_endpoint_is_a_timeout_within_the_budget() -> None:
    started = time.perf_counter()
    err = await fails(Recorder(30.0), timeout_seconds=0.2)
    assert time.perf_counter() - started < 0.6
    assert err.reason == TIMEOUT


async def test_no_time_left_sends_nothing() -> None:
    rec = Recorder(oa_completion("x"))
    err = await fails(rec, timeout_seconds=0.0)
    assert err.reason == TIMEOUT and rec.requests == []


async def test_connection_refused_is_unavailable() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("[Errno 111] Connection refused", request=request)

    chat = ChatClient(BASE, "m", transport=httpx.MockTransport(refuse))
    with pytest.raises(UpstreamError) as err:
        await chat.complete(HELLO, timeout_seconds=1.0, max_tokens=8)
    assert err.value.reason == UPSTREAM_UNAVAILABLE and err.value.retryable


@pytest.mark.parametrize(
    ("reply", "needle"),
    [
        (httpx.Response(200, text="<html>bad gateway</html>"), "body is not JSON"),
        (httpx.Response(200, json=["not", "an", "object"]), "not a JSON object"),
        (httpx.Response(200, json={"object": "chat.completion", "choices": []}), "without choices"),
        (oa_completion(""), "no content"),
        (oa_completion("half a sent", finish="length"), "cut off at max_tokens"),
    ],
)
async def test_a_malformed_body_is_malformed(reply: httpx.Response, needle: str) -> None:
    err = await fails(Recorder(reply))
    assert err.reason == MALFORMED_RESPONSE
    assert needle in err.message


async def test_the_refusal_field_is_a_rejection() -> None:
    err = await fails(Recorder(oa_completion("", refusal="I can't help with that.")))
    assert err.reason == UPSTREAM_REJECTED
    assert "the model refused: I can't help with that." in err.message


async def test_an_error_object_in_a_200_is_a_rejection() -> None:
    err = await fails(Recorder(httpx.Response(200, json={"error": {"message": "model busy"}})))
    assert err.reason == UPSTREAM_REJECTED and "model busy" in err.message


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        ('  "refund window for labels"  ', "refund window for labels"),
        ("Query: refund window", "refund window"),
        ("QUERY: “refund window”", "refund window"),
        ("```\nrefund window\n```", "refund window"),
        ("«délai de remboursement»", "délai de remboursement"),
        ("Note: keep this", "Note: keep this"),  # not one of the labels
        ('say "this" please', 'say "this" please'),  # inner quotes stay
    ],
)
def test_clean_reply_strips_the_wrapping_models_add(reply: str, expected: str) -> None:
    assert clean_reply(reply, ("query",)) == expected


def test_client_for_is_none_when_off_and_checks_its_settings(tmp_path: Any) -> None:
    assert client_for(RewriteSettings(), what="rewrite") is None
    on = RewriteSettings(backend="openai_compat", base_url=BASE, model="m")
    assert isinstance(client_for(on, what="rewrite"), ChatClient)
    with pytest.raises(ValueError, match="model is required"):
        ChatClient(BASE, "")
    with pytest.raises(ValueError, match="cannot read the rewrite API key file"):
        client_for(
            RewriteSettings(
                backend="openai_compat",
                base_url=BASE,
                model="m",
                api_key_file=str(tmp_path / "absent"),
            ),
            what="rewrite",
        )
