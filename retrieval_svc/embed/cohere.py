"""Cohere embeddings (v2 ``/v2/embed``) through the official ``cohere`` client.

Cohere embeds documents and queries differently (``input_type`` ``search_document`` vs
``search_query``) into one vector space. The ``Embedder`` protocol has a single ``embed``, so an
instance is bound to one input type and :meth:`CohereEmbedder.for_queries` returns its twin for
the query path. Both share the HTTP connection pool and have the same ``name`` — they make
vectors for the same collection — so the knowledge base uses the document instance for ingest
and the query instance for ``Retrieve``. Two immutable instances rather than a flag flipped per
call: ingest and queries embed concurrently on different threads, and a shared mutable flag
would race.

Texts go out in batches of at most 96 (the API's limit). 429, 408/409 and 5xx answers and
transport errors (timeouts, resets) are retried with bounded exponential backoff and jitter,
honouring ``Retry-After``; the client's own retry loop is switched off so there is exactly one
policy. Anything else, retries exhausted, or a body that isn't a well-formed float-embedding
response raises :class:`CohereEmbedError`. Vectors are L2-normalised here (Cohere's are close to
unit length but the contract is exact).

The API key comes from ``api_key_file`` (a mounted Secret; wins when set) or ``api_key``.
"""

from __future__ import annotations

import copy
import random
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

import cohere
import httpx
import numpy as np
import numpy.typing as npt
from cohere.core.api_error import ApiError
from cohere.core.parse_error import ParsingError

from candor.secrets import read_secret

InputType = Literal["search_document", "search_query"]

MAX_BATCH = 96
"""The v2 embed endpoint accepts at most 96 texts per call."""

FIXED_DIMS: Mapping[str, int] = {
    "embed-english-v3.0": 1024,
    "embed-multilingual-v3.0": 1024,
    "embed-english-light-v3.0": 384,
    "embed-multilingual-light-v3.0": 384,
}
"""v3 models: one output size, ``output_dimension`` not accepted."""

DEFAULT_DIMS: Mapping[str, int] = {"embed-v4.0": 1536}
"""Newer models: this size unless ``dimension`` asks for another (sent as output_dimension)."""

OUTPUT_DIMS: Mapping[str, frozenset[int]] = {"embed-v4.0": frozenset({256, 512, 1024, 1536})}
"""The sizes a newer model's ``output_dimension`` accepts (Cohere's embed API reference): any
other failed every embed call with HTTP 400 after a clean start-up."""

DEFAULT_MODEL = "embed-multilingual-v3.0"
RETRYABLE_STATUS = frozenset({408, 409, 429})


class CohereEmbedError(RuntimeError):
    """Embedding through Cohere failed; ``status_code`` is the HTTP status when there was one."""

    def __init__(
        self,
        message: str,
        *,
        status_code: int | None = None,
        retryable: bool = False,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.retryable = retryable
        self.retry_after = retry_after
        """Seconds the server asked us to wait (``Retry-After``), if it said."""


def read_api_key(api_key: str = "", api_key_file: str = "") -> str:
    """The key from the mounted file if one is configured, else the inline value."""
    key = read_secret(api_key, api_key_file, what="Cohere API key")
    if not key:
        raise ValueError("Cohere embedder needs api_key_file or api_key")
    return key


def resolve_dimension(model: str, dimension: int | None) -> tuple[int, int | None]:
    """(vector size, output_dimension to send) for ``model``."""
    if dimension is not None and dimension < 1:
        raise ValueError("dimension must be positive")
    if model in FIXED_DIMS:
        fixed = FIXED_DIMS[model]
        if dimension is not None and dimension != fixed:
            raise ValueError(f"{model} makes {fixed}-d vectors; dimension={dimension} not possible")
        return fixed, None
    if dimension is not None:
        allowed = OUTPUT_DIMS.get(model)
        if allowed is not None and dimension not in allowed:
            raise ValueError(
                f"{model} makes vectors of {', '.join(map(str, sorted(allowed)))} dimensions; "
                f"dimension={dimension} not possible"
            )
        return dimension, dimension
    if model in DEFAULT_DIMS:
        return DEFAULT_DIMS[model], None
    raise ValueError(f"unknown Cohere model {model!r}: set dimension explicitly")


class CohereEmbedder:
    """One Cohere embed model bound to one ``input_type``; see the module docstring."""

    def __init__(
        self,
        *,
        model: str = DEFAULT_MODEL,
        input_type: InputType = "search_document",
        api_key: str = "",
        api_key_file: str = "",
        dimension: int | None = None,
        base_url: str = "",
        timeout_seconds: float = 15.0,
        batch_size: int = MAX_BATCH,
        max_retries: int = 4,
        backoff_seconds: float = 0.5,
        max_backoff_seconds: float = 8.0,
        httpx_client: httpx.Client | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if input_type not in ("search_document", "search_query"):
            raise ValueError(f"input_type must be search_document or search_query: {input_type}")
        if not 1 <= batch_size <= MAX_BATCH:
            raise ValueError(f"batch_size must be between 1 and {MAX_BATCH}")
        if max_retries < 0 or backoff_seconds < 0 or max_backoff_seconds < 0:
            raise ValueError("max_retries and backoff times must be >= 0")
        self.dim, self._output_dimension = resolve_dimension(model, dimension)
        self.name = f"cohere-{model}/{self.dim}"
        self.model = model
        self.input_type: InputType = input_type
        self._batch_size = batch_size
        self._max_retries = max_retries
        self._backoff = backoff_seconds
        self._max_backoff = max_backoff_seconds
        self._sleep = sleep
        self._owns_http = httpx_client is None
        self._http = httpx_client or httpx.Client(timeout=timeout_seconds)
        self._client = cohere.ClientV2(
            api_key=read_api_key(api_key, api_key_file),
            base_url=base_url or None,
            client_name="candor",
            timeout=timeout_seconds,
            max_retries=0,  # one retry policy: ours
            httpx_client=self._http,
            log_warning_experimental_features=False,
        )

    def for_queries(self) -> CohereEmbedder:
        """The twin that embeds with ``input_type="search_query"`` (same client, same name)."""
        return self._with_input_type("search_query")

    def for_documents(self) -> CohereEmbedder:
        return self._with_input_type("search_document")

    def _with_input_type(self, input_type: InputType) -> CohereEmbedder:
        twin = copy.copy(self)
        twin.input_type = input_type
        twin._owns_http = False  # the original closes the shared pool
        return twin

    def close(self) -> None:
        if self._owns_http:
            self._http.close()

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        items = list(texts)
        parts = [
            self._embed_batch(items[i : i + self._batch_size])
            for i in range(0, len(items), self._batch_size)
        ]
        return np.concatenate(parts)

    def _embed_batch(self, batch: list[str]) -> npt.NDArray[np.float32]:
        attempt = 0
        while True:
            try:
                return self._parse(self._request(batch), len(batch))
            except CohereEmbedError as error:
                if not error.retryable or attempt >= self._max_retries:
                    if error.retryable:
                        raise CohereEmbedError(
                            f"{error} (gave up after {attempt + 1} attempts)",
                            status_code=error.status_code,
                            retryable=True,
                        ) from error
                    raise
                self._sleep(self._delay(attempt, error.retry_after))
                attempt += 1

    def _request(self, batch: list[str]) -> Any:
        extra: dict[str, Any] = {}
        if self._output_dimension is not None:
            extra["output_dimension"] = self._output_dimension
        try:
            return self._client.embed(
                model=self.model,
                input_type=self.input_type,
                texts=batch,
                embedding_types=["float"],
                truncate="END",
                request_options={"max_retries": 0},
                **extra,
            )
        except ApiError as exc:
            raise _api_error(exc) from exc
        except httpx.TransportError as exc:
            raise CohereEmbedError(
                f"Cohere embed transport error: {type(exc).__name__}: {exc}", retryable=True
            ) from exc
        except (ParsingError, TypeError, ValueError, AttributeError, KeyError) as exc:
            # The client builds its response models without validation; a body of the wrong
            # shape (e.g. ``embeddings`` as a list) surfaces here as a TypeError and friends.
            raise CohereEmbedError(
                f"Cohere embed returned a malformed body: {type(exc).__name__}: {exc}"
            ) from exc

    def _parse(self, response: Any, expected: int) -> npt.NDArray[np.float32]:
        floats = getattr(getattr(response, "embeddings", None), "float_", None)
        if not isinstance(floats, list):
            raise CohereEmbedError("Cohere embed returned a malformed body: no embeddings.float")
        if len(floats) != expected:
            raise CohereEmbedError(
                f"Cohere embed returned a malformed body: {len(floats)} embeddings "
                f"for {expected} texts"
            )
        try:
            vectors = np.asarray(floats, dtype=np.float32)
        except (TypeError, ValueError) as exc:
            raise CohereEmbedError(
                f"Cohere embed returned a malformed body: embeddings are not numbers ({exc})"
            ) from exc
        if vectors.ndim != 2 or vectors.shape[1] != self.dim:
            raise CohereEmbedError(
                f"Cohere embed returned vectors of shape {vectors.shape}, "
                f"expected ({expected}, {self.dim}) for {self.name}"
            )
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        if not np.all(np.isfinite(norms)) or np.any(norms == 0):
            raise CohereEmbedError("Cohere embed returned a zero or non-finite vector")
        out: npt.NDArray[np.float32] = (vectors / norms).astype(np.float32)
        return out

    def _delay(self, attempt: int, retry_after: float | None) -> float:
        if retry_after is not None:
            return min(max(retry_after, 0.0), self._max_backoff)
        ceiling = min(self._backoff * float(2**attempt), self._max_backoff)
        return ceiling * (0.5 + random.random() / 2)  # jitter: between half and all of it


def _api_error(exc: ApiError) -> CohereEmbedError:
    status = exc.status_code
    if status is not None and 200 <= status < 300:
        # The client raises ApiError(status=200) when a success body isn't JSON.
        return CohereEmbedError(
            f"Cohere embed returned a malformed body (HTTP {status}): {_snippet(exc.body)}",
            status_code=status,
        )
    retryable = status is not None and (status >= 500 or status in RETRYABLE_STATUS)
    return CohereEmbedError(
        f"Cohere embed failed: HTTP {status}: {_message(exc.body)}",
        status_code=status,
        retryable=retryable,
        retry_after=_retry_after(exc.headers or {}),
    )


def _message(body: Any) -> str:
    if isinstance(body, Mapping) and isinstance(body.get("message"), str):
        return str(body["message"])[:300]
    return _snippet(body)


def _snippet(body: Any) -> str:
    text = body if isinstance(body, str) else repr(body)
    return text[:300]


def _retry_after(headers: Mapping[str, str]) -> float | None:
    lowered = {k.lower(): v for k, v in headers.items()}
    value = lowered.get("retry-after", "").strip()
    try:
        return float(value) if value else None
    except ValueError:
        return None  # an HTTP date: fall back to our own backoff
