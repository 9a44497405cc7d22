"""Query embeddings that arrive together share forward passes; errors reach every caller."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import numpy.typing as npt
import pytest

from retrieval_svc.embed.batcher import QueryBatcher


class CountingEmbedder:
    """Embeds text as [len(text), 0, ...]; slow enough that queries pile up behind a batch."""

    name, dim = "counting/4", 4

    def __init__(self, fail: bool = False) -> None:
        self.calls: list[int] = []
        self.fail = fail
        self._lock = threading.Lock()

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        with self._lock:
            self.calls.append(len(texts))
        time.sleep(0.05)
        if self.fail:
            raise RuntimeError("model crashed")
        return np.array([[len(t), 0, 0, 0] for t in texts], dtype=np.float32)


async def test_a_burst_is_embedded_in_few_batches_and_each_caller_gets_its_vector() -> None:
    model = CountingEmbedder()
    with ThreadPoolExecutor(4) as pool:
        batcher = QueryBatcher(model, pool, max_batch=16, workers=2)
        texts = ["q" * n for n in range(1, 21)]
        vectors = await asyncio.gather(*(batcher.embed(t) for t in texts))
    assert [int(v[0]) for v in vectors] == list(range(1, 21))
    assert sum(model.calls) == 20
    assert len(model.calls) <= 4 and max(model.calls) > 1


async def test_a_lone_query_is_embedded_immediately() -> None:
    model = CountingEmbedder()
    with ThreadPoolExecutor(2) as pool:
        batcher = QueryBatcher(model, pool)
        start = time.perf_counter()
        await batcher.embed("hello")
        assert time.perf_counter() - start < 0.5
    assert model.calls == [1]


async def test_a_failing_model_fails_every_waiting_caller() -> None:
    with ThreadPoolExecutor(2) as pool:
        batcher = QueryBatcher(CountingEmbedder(fail=True), pool)
        results = await asyncio.gather(
            *(batcher.embed(f"q{i}") for i in range(5)), return_exceptions=True
        )
    assert all(isinstance(r, RuntimeError) for r in results)
    with pytest.raises(RuntimeError):
        await QueryBatcher(CountingEmbedder(fail=True), ThreadPoolExecutor(1)).embed("x")
