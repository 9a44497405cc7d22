"""Any OpenAI-compatible ``/v1/chat/completions`` endpoint (vLLM, Ollama, llama.cpp server, ...).

Streams over HTTP with ``httpx``: ``data: {chat.completion.chunk}`` lines, ended by
``data: [DONE]``. The model cites with ``[n]`` markers as the prompt asks
(``generator_svc.prompts``), parsed into Draft citations when the stream ends.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
from collections.abc import AsyncGenerator, Callable
from typing import Any

import httpx

from generator_svc.llm.base import (
    CHARS_PER_TOKEN_CAP,
    TRUNCATED,
    BackendError,
    Draft,
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
    parse_marked_citations,
    render,
    spare_first,
    uncited_sentences,
)

log = logging.getLogger("candor.generator.llm")


def _malformed(what: str, data: str = "") -> BackendError:
    """The stream broke its protocol; what it sent (``data``) goes to the log, not the caller."""
    return BackendError(
        "MALFORMED_STREAM", f"malformed chat completion stream: {what}", upstream=data[:80]
    )


class OpenAICompatBackend:
    name = "openai_compat"

    def __init__(
        self,
        *,
        base_url: str,
        model: str,
        templates: PromptTemplates,
        api_key: str = "",
        timeout_seconds: float = 30.0,
        connect_timeout_seconds: float = 5.0,
        retry: RetryPolicy | None = None,
        max_output_tokens: int = 512,
        temperature: float = 0.0,
        include_usage: bool = True,
        transport: httpx.AsyncBaseTransport | None = None,
        sleep: Sleep = asyncio.sleep,
        rng: Callable[[], float] = random.random,
    ) -> None:
        """``base_url`` ends before ``/chat/completions``, e.g. ``http://127.0.0.1:8000/v1``.

        ``timeout_seconds`` bounds each read (the wait for the first byte and between chunks),
        not the whole answer; the caller's gRPC deadline bounds that.
        """
        if not base_url:
            raise ValueError("openai_compat: base_url is required")
        if not model:
            raise ValueError("openai_compat: model is required")
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = httpx.AsyncClient(
            base_url=base_url.rstrip("/") + "/",
            headers=headers,
            timeout=httpx.Timeout(timeout_seconds, connect=connect_timeout_seconds),
            transport=transport,
        )
        self._model, self._templates = model, templates
        self._retry = retry or RetryPolicy()
        self._max_tokens, self._temperature = max_output_tokens, temperature
        self._include_usage = include_usage
        self._sleep, self._rng = sleep, rng

    async def aclose(self) -> None:
        await self._client.aclose()

    def _body(self, inp: GenerationInput) -> dict[str, Any]:
        prompt = render(self._templates, inp, native_citations=False)
        body: dict[str, Any] = {
            "model": self._model,
            "messages": [
                {"role": "system", "content": prompt.system},
                {"role": "user", "content": prompt.user},
            ],
            "stream": True,
            "temperature": self._temperature,
            "max_tokens": self._max_tokens,
        }
        if self._include_usage:
            body["stream_options"] = {"include_usage": True}
        return body

    async def _open(self, body: dict[str, Any]) -> httpx.Response:
        request = self._client.build_request("POST", "chat/completions", json=body)
        try:
            response = await self._client.send(request, stream=True)
        except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
            raise RetryableError(
                "UPSTREAM_UNAVAILABLE", f"cannot reach the LLM endpoint: {exc!r}"
            ) from exc
        except httpx.TimeoutException as exc:
            raise BackendError("TIMEOUT", f"LLM endpoint timed out: {exc!r}") from exc
        except httpx.HTTPError as exc:
            raise RetryableError("UPSTREAM_UNAVAILABLE", f"LLM request failed: {exc!r}") from exc
        if response.status_code == 200:
            content_type = response.headers.get("content-type", "")
            if "text/event-stream" not in content_type:
                await response.aclose()
                raise _malformed(f"expected text/event-stream, got {content_type or 'nothing'!r}")
            return response
        try:
            detail = (await response.aread()).decode("utf-8", "replace")
        except httpx.HTTPError:
            detail = ""
        finally:
            await response.aclose()
        raise status_error(response.status_code, detail, response.headers)

    async def stream(self, inp: GenerationInput) -> AsyncGenerator[str | Draft, None]:
        body = self._body(inp)
        response = await open_with_retries(
            lambda: self._open(body),
            self._retry,
            backend=self.name,
            sleep=self._sleep,
            rng=self._rng,
            deadline=inp.deadline,
        )
        parts: list[str] = []
        received = 0
        usage: dict[str, Any] = {}
        finish = ""
        try:
            done = False
            async for line in response.aiter_lines():
                if not line or line.startswith(":"):
                    continue  # event separator or keep-alive comment
                field, _, value = line.partition(":")
                if field in ("event", "id", "retry"):
                    continue
                if field != "data":
                    raise _malformed("an unexpected line", line)
                data = value.strip()
                if data == "[DONE]":
                    done = True
                    break
                chunk = self._parse(data)
                if isinstance(chunk.get("usage"), dict):
                    usage = chunk["usage"]
                for choice in chunk["choices"]:
                    if not isinstance(choice, dict):
                        raise _malformed("a choice that is not an object", data)
                    finish = choice.get("finish_reason") or finish
                    delta = choice.get("delta") or {}
                    text = delta.get("content") if isinstance(delta, dict) else None
                    if isinstance(text, str) and text:
                        parts.append(text)
                        received += len(text)
                        yield text
                if received > self._max_tokens * CHARS_PER_TOKEN_CAP:
                    finish, done = "length", True  # it ignored max_tokens: stop reading
                    break
            if not done:
                raise _malformed("the stream ended before data: [DONE]")
        except httpx.TimeoutException as exc:
            raise BackendError("TIMEOUT", f"LLM stream stalled: {exc!r}") from exc
        except httpx.HTTPError as exc:
            raise BackendError("UPSTREAM_UNAVAILABLE", f"LLM stream broke off: {exc!r}") from exc
        finally:
            await response.aclose()
        text = "".join(parts)
        if not text.strip():
            raise BackendError("UPSTREAM_ERROR", f"the model returned no text (finish {finish!r})")
        unverifiable = [
            f"cites nothing: {sentence!r}"
            for sentence in uncited_sentences(text, spare_first(inp), lead_in_of(inp))
        ]
        if finish == "length":
            log.warning("LLM answer hit max_tokens", extra={"backend": self.name})
            unverifiable.append(TRUNCATED)
        citations = parse_marked_citations(text, inp.evidence)
        clarification = looks_like_clarification(text, citations, inp.query)
        prompt_tokens = usage.get("prompt_tokens")
        completion_tokens = usage.get("completion_tokens")
        yield Draft(
            text,
            citations,
            int(prompt_tokens) if isinstance(prompt_tokens, int) else self._estimate_input(body),
            int(completion_tokens) if isinstance(completion_tokens, int) else estimate_tokens(text),
            is_clarification=clarification,
            unverifiable=() if clarification else tuple(unverifiable),
        )

    @staticmethod
    def _parse(data: str) -> dict[str, Any]:
        try:
            chunk = json.loads(data)
        except json.JSONDecodeError as exc:
            raise _malformed("data is not JSON", data) from exc
        if not isinstance(chunk, dict):
            raise _malformed("data is not an object", data)
        if "error" in chunk:
            error = chunk["error"]
            message = error.get("message", error) if isinstance(error, dict) else error
            raise BackendError(
                "UPSTREAM_ERROR", "the LLM endpoint reported an error", upstream=str(message)[:300]
            )
        if not isinstance(chunk.get("choices"), list):
            raise _malformed("a chunk without a choices list", data)
        return chunk

    @staticmethod
    def _estimate_input(body: dict[str, Any]) -> int:
        return sum(estimate_tokens(m["content"]) for m in body["messages"])
