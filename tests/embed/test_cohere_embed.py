"""Cohere embedder at the HTTP layer: the real ``cohere`` client over an httpx.MockTransport.

Responses follow the v2 ``/v2/embed`` shape: ``{"id", "embeddings": {"float": [[...]]}, "texts",
"meta": {"api_version", "billed_units"}, "response_type": "embeddings_by_type"}``; errors are
``{"id", "message"}`` with the HTTP status.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from retrieval_svc.embed.base import Embedder
from retrieval_svc.embed.cohere import MAX_BATCH, CohereEmbedder, CohereEmbedError, read_api_key

DIM = 1024  # embed-multilingual-v3.0
Handler = Callable[[httpx.Request], httpx.Response]


def vector_for(text: str, dim: int = DIM) -> list[float]:
    """A deterministic, deliberately *unnormalised* vector per text."""
    rng = np.random.default_rng(abs(hash(text)) % 2**32)
    return [float(x) for x in rng.normal(0.0, 3.0, dim)]


def ok_body(texts: list[str], dim: int = DIM) -> dict[str, Any]:
    return {
        "id": "5f1ef2a3-6c1a-4a52-9f0a-2c1f6c3d2e10",
        "embeddings": {"float": [vector_for(t, dim) for t in texts]},
        "texts": texts,
        "meta": {
            "api_version": {"version": "2"},
            "billed_units": {"input_tokens": sum(len(t.split()) for t in texts)},
        },
        "response_type": "embeddings_by_type",
    }


def error_body(message: str) -> dict[str, Any]:
    return {"id": "0b9d8f4e-1111-4c3b-9f7e-3b2a1c0d9e8f", "message": message}


class FakeCohere:
    """Records every request; answers from a script of handlers, then echoes embeddings."""

    def __init__(self, *script: Handler, dim: int = DIM) -> None:
        self.dim = dim
        self.requests: list[httpx.Request] = []
        self.bodies: list[dict[str, Any]] = []
        self._script = list(script)
        self._lock = threading.Lock()

    def __call__(self, request: httpx.Request) -> httpx.Response:
        with self._lock:
            self.requests.append(request)
            body = json.loads(request.content)
            self.bodies.append(body)
            handler = self._script.pop(0) if self._script else None
        if handler is not None:
            return handler(request)
        return httpx.Response(200, json=ok_body(body["texts"], self.dim))


def make(fake: FakeCohere, **kwargs: Any) -> tuple[CohereEmbedder, list[float]]:
    sleeps: list[float] = []
    kwargs.setdefault("api_key", "test-key")
    embedder = CohereEmbedder(
        httpx_client=httpx.Client(transport=httpx.MockTransport(fake)),
        sleep=sleeps.append,
        **kwargs,
    )
    return embedder, sleeps


def status(code: int, message: str = "boom", headers: dict[str, str] | None = None) -> Handler:
    return lambda _request: httpx.Response(code, json=error_body(message), headers=headers)


def test_request_body_and_headers_match_the_v2_api() -> None:
    fake = FakeCohere()
    embedder, _ = make(fake, api_key="sk-secret")
    vectors = embedder.embed(["How do I void a label?", "Refunds take 14 days."])

    assert vectors.shape == (2, DIM)
    (request,) = fake.requests
    assert request.method == "POST"
    assert request.url == httpx.URL("https://api.cohere.com/v2/embed")
    assert request.headers["authorization"] == "Bearer sk-secret"
    assert request.headers["content-type"] == "application/json"
    assert fake.bodies[0] == {
        "model": "embed-multilingual-v3.0",
        "input_type": "search_document",
        "texts": ["How do I void a label?", "Refunds take 14 days."],
        "embedding_types": ["float"],
        "truncate": "END",
    }


def test_the_query_twin_sends_search_query_and_shares_name_and_client() -> None:
    fake = FakeCohere()
    documents, _ = make(fake)
    queries = documents.for_queries()
    queries.embed(["void label"])
    documents.embed(["You can void a label within 30 days."])

    assert [b["input_type"] for b in fake.bodies] == ["search_query", "search_document"]
    assert queries.name == documents.name == "cohere-embed-multilingual-v3.0/1024"
    assert queries.dim == documents.dim == DIM
    assert documents.input_type == "search_document"  # the original is unchanged
    assert queries.for_documents().input_type == "search_document"
    as_protocol: list[Embedder] = [documents, queries]
    assert len(as_protocol) == 2


def test_vectors_are_l2_normalised_float32_in_input_order() -> None:
    fake = FakeCohere()
    embedder, _ = make(fake)
    texts = ["alpha", "beta", "gamma"]
    vectors = embedder.embed(texts)

    assert vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-6)
    for text, vector in zip(texts, vectors, strict=True):
        raw = np.asarray(vector_for(text), dtype=np.float64)
        np.testing.assert_allclose(vector, raw / np.linalg.norm(raw), atol=1e-6)


def test_texts_are_sent_in_batches_of_at_most_96() -> None:
    fake = FakeCohere()
    embedder, _ = make(fake)
    texts = [f"chunk {i}" for i in range(2 * MAX_BATCH + 8)]
    vectors = embedder.embed(texts)

    assert [len(b["texts"]) for b in fake.bodies] == [96, 96, 8]
    assert [t for b in fake.bodies for t in b["texts"]] == texts
    assert vectors.shape == (len(texts), DIM)
    expected_last = np.asarray(vector_for(texts[-1]))
    np.testing.assert_allclose(vectors[-1], expected_last / np.linalg.norm(expected_last), 1e-5)


def test_smaller_batch_size_is_honoured_and_larger_is_rejected() -> None:
    fake = FakeCohere()
    embedder, _ = make(fake, batch_size=10)
    embedder.embed([str(i) for i in range(25)])
    assert [len(b["texts"]) for b in fake.bodies] == [10, 10, 5]
    with pytest.raises(ValueError, match="batch_size"):
        make(FakeCohere(), batch_size=97)


def test_empty_input_makes_no_call() -> None:
    fake = FakeCohere()
    embedder, _ = make(fake)
    vectors = embedder.embed([])
    assert vectors.shape == (0, DIM)
    assert fake.requests == []


def test_429_then_200_is_retried_after_backoff() -> None:
    fake = FakeCohere(status(429, "You are using a Trial key, which is limited"))
    embedder, sleeps = make(fake, backoff_seconds=0.5)
    vectors = embedder.embed(["hello"])

    assert vectors.shape == (1, DIM)
    assert len(fake.requests) == 2
    assert fake.bodies[0] == fake.bodies[1]
    assert len(sleeps) == 1
    assert 0.25 <= sleeps[0] <= 0.5


def test_retry_after_header_is_honoured_but_capped() -> None:
    fake = FakeCohere(
        status(429, headers={"Retry-After": "3"}),
        status(503, headers={"Retry-After": "120"}),
    )
    embedder, sleeps = make(fake, max_backoff_seconds=8.0)
    embedder.embed(["hello"])
    assert sleeps == [3.0, 8.0]


def test_500s_exhaust_the_retries_and_raise_a_clear_error() -> None:
    fake = FakeCohere(*[status(500, "internal server error")] * 10)
    embedder, sleeps = make(fake, max_retries=3, backoff_seconds=0.5, max_backoff_seconds=1.5)

    with pytest.raises(CohereEmbedError) as info:
        embedder.embed(["hello"])

    assert len(fake.requests) == 4  # one try + three retries, then stop
    assert len(sleeps) == 3
    assert all(0 < s <= 1.5 for s in sleeps)
    assert sleeps[2] >= 0.75  # backoff grew (capped at 1.5, jittered down to half at most)
    error = info.value
    assert error.status_code == 500
    assert error.retryable
    assert "HTTP 500" in str(error)
    assert "internal server error" in str(error)
    assert "gave up after 4 attempts" in str(error)


def test_transport_errors_are_retried() -> None:
    def timeout(request: httpx.Request) -> httpx.Response:
        raise httpx.ReadTimeout("read timed out", request=request)

    fake = FakeCohere(timeout)
    embedder, sleeps = make(fake)
    assert embedder.embed(["hello"]).shape == (1, DIM)
    assert len(sleeps) == 1

    always = FakeCohere(*[timeout] * 5)
    failing, _ = make(always, max_retries=1)
    with pytest.raises(CohereEmbedError, match="ReadTimeout") as info:
        failing.embed(["hello"])
    assert len(always.requests) == 2
    assert info.value.status_code is None


@pytest.mark.parametrize(
    ("code", "message"),
    [(400, "invalid input_type"), (401, "invalid api token"), (422, "too many texts")],
)
def test_client_errors_are_not_retried(code: int, message: str) -> None:
    fake = FakeCohere(status(code, message))
    embedder, sleeps = make(fake)
    with pytest.raises(CohereEmbedError, match=f"HTTP {code}: {message}") as info:
        embedder.embed(["hello"])
    assert len(fake.requests) == 1
    assert sleeps == []
    assert info.value.status_code == code
    assert not info.value.retryable
    assert "test-key" not in str(info.value)


def _reply(payload: Any) -> Handler:
    return lambda _request: httpx.Response(200, json=payload)


@pytest.mark.parametrize(
    ("handler", "expected"),
    [
        (lambda _r: httpx.Response(200, text="<html>gateway</html>"), "malformed body"),
        (_reply({"id": "x", "texts": ["hello"]}), "no embeddings.float"),
        (_reply({"id": "x", "embeddings": {"int8": [[1, 2]]}}), "no embeddings.float"),
        (_reply({"id": "x", "embeddings": [[0.1, 0.2]]}), "malformed body: TypeError"),
        (_reply(["not", "an", "object"]), "malformed body"),
        (_reply({"id": "x", "embeddings": {"float": []}}), "0 embeddings for 1 texts"),
        (_reply({"id": "x", "embeddings": {"float": [["a", "b"]]}}), "not numbers"),
        (_reply({"id": "x", "embeddings": {"float": [[0.1, 0.2, 0.3]]}}), "expected (1, 1024)"),
        (_reply({"id": "x", "embeddings": {"float": [[0.0] * DIM]}}), "zero or non-finite"),
    ],
)
def test_malformed_bodies_raise_a_clear_error(handler: Handler, expected: str) -> None:
    fake = FakeCohere(handler)
    embedder, sleeps = make(fake)
    with pytest.raises(CohereEmbedError, match="Cohere embed") as info:
        embedder.embed(["hello"])
    assert expected in str(info.value)
    assert not info.value.retryable
    assert sleeps == []
    assert len(fake.requests) == 1


def test_embed_v4_sends_output_dimension() -> None:
    fake = FakeCohere(dim=256)
    embedder, _ = make(fake, model="embed-v4.0", dimension=256)
    assert embedder.embed(["hello"]).shape == (1, 256)
    assert fake.bodies[0]["output_dimension"] == 256
    assert fake.bodies[0]["model"] == "embed-v4.0"
    assert embedder.name == "cohere-embed-v4.0/256"


def test_dimension_rules() -> None:
    assert make(FakeCohere(), model="embed-v4.0")[0].dim == 1536
    assert make(FakeCohere(), model="embed-multilingual-light-v3.0")[0].dim == 384
    with pytest.raises(ValueError, match="1024-d"):
        make(FakeCohere(), model="embed-english-v3.0", dimension=512)
    with pytest.raises(ValueError, match="set dimension"):
        make(FakeCohere(), model="embed-v9.9")
    # embed-v4.0 takes four output sizes; any other failed every call with HTTP 400.
    with pytest.raises(ValueError, match="256, 512, 1024, 1536 dimensions"):
        make(FakeCohere(), model="embed-v4.0", dimension=384)
    assert make(FakeCohere(), model="embed-v4.0", dimension=1024)[0].dim == 1024
    assert make(FakeCohere(), model="embed-v9.9", dimension=300)[0].dim == 300


def test_api_key_from_a_mounted_file_wins(tmp_path: Path) -> None:
    key_file = tmp_path / "cohere-api-key"
    key_file.write_text("sk-from-file\n", encoding="utf-8")
    fake = FakeCohere()
    embedder, _ = make(fake, api_key="sk-inline", api_key_file=str(key_file))
    embedder.embed(["hello"])
    assert fake.requests[0].headers["authorization"] == "Bearer sk-from-file"


def test_api_key_is_required(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="api_key"):
        read_api_key("", "")
    with pytest.raises(ValueError, match="cannot read"):
        read_api_key("", str(tmp_path / "missing"))
    empty = tmp_path / "empty"
    empty.write_text("\n", encoding="utf-8")
    with pytest.raises(ValueError, match="is empty"):
        read_api_key("sk-inline", str(empty))
    assert read_api_key(" sk-inline ", "") == "sk-inline"
