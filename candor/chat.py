"""One non-streaming request to an OpenAI-compatible ``/chat/completions`` endpoint.

The optional LLM helpers (the gate's evidence reranker and refusal translator, retrieval's query
rewriter and hypothetical-question generator) all speak this dialect. :class:`ChatClient` sends
one request and returns the assistant message's text; every failure is an
:class:`UpstreamError` whose ``reason`` is one of the constants below (a small fixed set, safe
as a metric label). Retries and fallbacks are the caller's policy, not this module's.
"""

from __future__ import annotations

import asyncio
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any, Final

import httpx

from candor.secrets import read_secret
from candor.settings import ChatEndpointSettings

TIMEOUT: Final = "TIMEOUT"
RATE_LIMITED: Final = "RATE_LIMITED"
UPSTREAM_UNAVAILABLE: Final = "UPSTREAM_UNAVAILABLE"
UPSTREAM_REJECTED: Final = "UPSTREAM_REJECTED"
MALFORMED_RESPONSE: Final = "MALFORMED_RESPONSE"
INTERNAL: Final = "INTERNAL"

Message = Mapping[str, str]
"""One chat message: ``{"role": "system" | "user" | "assistant", "content": "..."}``."""


class UpstreamError(Exception):
    """An LLM endpoint failed. ``reason`` is one of the module's reason constants."""

    def __init__(
        self,
        reason: str,
        message: str,
        *,
        status: int | None = None,
        retryable: bool = False,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(f"{reason}: {message}")
        self.reason = reason
        self.message = message
        self.status = status
        self.retryable = retryable
        self.retry_after = retry_after
        """Seconds the server asked us to wait (``Retry-After``), when it said."""


def read_api_key(api_key: str = "", api_key_file: str = "", *, what: str = "LLM") -> str:
    """The key from the mounted file when one is configured (it wins), else the inline value."""
    return read_secret(api_key, api_key_file, what=f"{what} API key")


def is_retryable_status(status: int) -> bool:
    return status == 429 or (status >= 500 and status not in (501, 505))


def retry_after(headers: Mapping[str, str]) -> float | None:
    """``Retry-After-Ms`` / ``Retry-After`` in seconds; None for an HTTP date or nonsense."""
    lowered = {k.lower(): v for k, v in headers.items()}
    for key, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        value = lowered.get(key, "").strip()
        if value:
            try:
                seconds = float(value) * scale
            except ValueError:
                continue  # an HTTP date: the caller's own backoff applies
            if math.isfinite(seconds) and seconds >= 0:
                return seconds
    return None


def status_error(
    status: int, detail: str, headers: Mapping[str, str], *, what: str
) -> UpstreamError:
    """The UpstreamError for a non-2xx HTTP answer."""
    message = f"{what} answered HTTP {status}" + (f": {detail[:300]}" if detail else "")
    if status == 429:
        return UpstreamError(
            RATE_LIMITED, message, status=status, retryable=True, retry_after=retry_after(headers)
        )
    if is_retryable_status(status):
        return UpstreamError(
            UPSTREAM_UNAVAILABLE,
            message,
            status=status,
            retryable=True,
            retry_after=retry_after(headers),
        )
    return UpstreamError(UPSTREAM_REJECTED, message, status=status)


def transport_error(exc: httpx.HTTPError, *, what: str) -> UpstreamError:
    if isinstance(exc, httpx.TimeoutException):
        return UpstreamError(TIMEOUT, f"{what} timed out: {type(exc).__name__}")
    # Connection refused/reset, protocol errors: every caller here only reads, safe to resend.
    return UpstreamError(
        UPSTREAM_UNAVAILABLE, f"{what}: {type(exc).__name__}: {exc}", retryable=True
    )


def error_detail(response: httpx.Response) -> str:
    """The human part of an error body (OpenAI's ``error.message``), else its first bytes."""
    try:
        data = response.json()
    except ValueError:
        return response.text[:300]
    if isinstance(data, dict):
        error = data.get("error")
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            return str(error["message"])
        if isinstance(error, str):
            return error
    return response.text[:300]


def _malformed(message: str) -> UpstreamError:
    return UpstreamError(MALFORMED_RESPONSE, message)


def completion_content(data: object) -> str:
    """The first choice's message content from a ``chat.completion`` body, checked."""
    if not isinstance(data, dict):
        raise _malformed("LLM endpoint body is not a JSON object")
    if data.get("error"):
        error = data["error"]
        message = error.get("message", error) if isinstance(error, dict) else error
        raise UpstreamError(UPSTREAM_REJECTED, f"LLM endpoint reported: {message}")
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise _malformed("chat.completion without choices")
    choice = choices[0]
    message = choice.get("message")
    if not isinstance(message, dict):
        raise _malformed("chat.completion choice without a message")
    refusal = message.get("refusal")
    if isinstance(refusal, str) and refusal.strip():
        raise UpstreamError(UPSTREAM_REJECTED, f"the model refused: {refusal[:200]}")
    if choice.get("finish_reason") == "length":
        # A cut-off JSON object or sentence is never usable, so say how to fix it.
        raise _malformed("the model's reply was cut off at max_tokens (raise max_output_tokens)")
    content = message.get("content")
    if not isinstance(content, str) or not content.strip():
        raise _malformed("chat.completion message has no content")
    return content


_FENCE = re.compile(r"^```[\w-]*\s*\n?(.*?)\n?```$", re.DOTALL)
_QUOTES = (('"', '"'), ("'", "'"), ("“", "”"), ("„", "“"), ("«", "»"), ("‘", "’"), ("`", "`"))


def clean_reply(text: str, labels: Sequence[str] = ()) -> str:
    """A plain-text reply without the wrapping models add: a code fence, one of ``labels``
    followed by a colon (case-insensitive), surrounding quotes."""
    out = text.strip()
    fenced = _FENCE.match(out)
    if fenced:
        out = fenced.group(1).strip()
    for label in labels:
        if out.lower().startswith(label.lower() + ":"):
            out = out[len(label) + 1 :].strip()
            break
    for left, right in _QUOTES:
        if len(out) >= 2 and out.startswith(left) and out.endswith(right):
            out = out[len(left) : -len(right)].strip()
            break
    return out


class ChatClient:
    """A pooled HTTP client for one model on one OpenAI-compatible endpoint."""

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str = "",
        api_key_file: str = "",
        transport: httpx.AsyncBaseTransport | None = None,
        *,
        what: str = "LLM endpoint",
    ) -> None:
        """``base_url`` ends before ``/chat/completions``, e.g. ``http://vllm:8000/v1``.

        Raises ValueError when base_url or model is missing, SecretError when a configured key
        file cannot be read (both start-up errors).
        """
        if not base_url:
            raise ValueError(f"{what}: base_url is required")
        if not model:
            raise ValueError(f"{what}: model is required")
        key = read_api_key(api_key, api_key_file, what=what)
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        self._client = httpx.AsyncClient(
            base_url=base_url.rstrip("/") + "/", headers=headers, transport=transport
        )
        self.model = model
        self.what = what

    async def aclose(self) -> None:
        await self._client.aclose()

    def body(
        self,
        messages: Sequence[Message],
        *,
        max_tokens: int,
        temperature: float = 0.0,
        json_mode: bool = False,
    ) -> dict[str, Any]:
        """The request body :meth:`complete` sends."""
        body: dict[str, Any] = {"model": self.model, "messages": [dict(m) for m in messages]}
        if json_mode:
            body["response_format"] = {"type": "json_object"}
        body.update({"temperature": temperature, "max_tokens": max_tokens, "stream": False})
        return body

    async def complete(
        self,
        messages: Sequence[Message],
        *,
        timeout_seconds: float,
        max_tokens: int,
        temperature: float = 0.0,
        json_mode: bool = False,
    ) -> str:
        """One request; the assistant message's content. ``timeout_seconds`` bounds the whole
        call (httpx's own timeouts are per phase, so a slow trickle could outlive them)."""
        return await self.send(
            self.body(
                messages, max_tokens=max_tokens, temperature=temperature, json_mode=json_mode
            ),
            timeout_seconds=timeout_seconds,
        )

    async def send(self, body: Mapping[str, Any], *, timeout_seconds: float) -> str:
        """:meth:`complete` for a body built already (see :meth:`body`)."""
        if timeout_seconds <= 0:
            raise UpstreamError(TIMEOUT, f"{self.what}: no time left")
        try:
            async with asyncio.timeout(timeout_seconds):
                response = await self._client.post(
                    "chat/completions", json=body, timeout=timeout_seconds
                )
        except TimeoutError as exc:
            raise UpstreamError(
                TIMEOUT, f"{self.what} gave no answer within {timeout_seconds:.3g} s"
            ) from exc
        except httpx.HTTPError as exc:
            raise transport_error(exc, what=self.what) from exc
        if response.status_code != 200:
            raise status_error(
                response.status_code, error_detail(response), response.headers, what=self.what
            )
        try:
            data = response.json()
        except ValueError as exc:
            raise _malformed(f"{self.what} body is not JSON: {response.text[:120]!r}") from exc
        return completion_content(data)


def client_for(
    config: ChatEndpointSettings,
    *,
    what: str,
    transport: httpx.AsyncBaseTransport | None = None,
) -> ChatClient | None:
    """The configured endpoint's client, or None when its backend is ``none`` (feature off)."""
    if config.backend == "none":
        return None
    return ChatClient(
        config.base_url, config.model, config.api_key, config.api_key_file, transport, what=what
    )
