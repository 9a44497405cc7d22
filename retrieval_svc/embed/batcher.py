"""Opportunistic batching of query embeddings.

Queries that arrive while batches are being embedded wait for the next batch instead of each
taking its own turn, so a burst shares forward passes. A lone query is embedded at once, so
batching adds no latency when idle. Up to ``workers`` batches run at a time (one per core).
The bundled int8 embedder runs each text of a batch on its own, so that a query's vector does
not depend on what arrived with it; there the batcher only caps embedding at ``workers``.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import Executor

import numpy as np
import numpy.typing as npt

from retrieval_svc.embed.base import Embedder

Pending = tuple[str, "asyncio.Future[npt.NDArray[np.float32]]"]


class QueryBatcher:
    def __init__(
        self, embedder: Embedder, executor: Executor, max_batch: int = 16, workers: int = 2
    ) -> None:
        self._embedder, self._executor = embedder, executor
        self._max, self._workers = max_batch, workers
        self._pending: list[Pending] = []
        self._tasks: set[asyncio.Task[None]] = set()
        self.batches = 0
        """Forward passes run (for tests and metrics)."""

    async def embed(self, text: str) -> npt.NDArray[np.float32]:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[npt.NDArray[np.float32]] = loop.create_future()
        self._pending.append((text, future))
        if len(self._tasks) < self._workers:
            task = loop.create_task(self._drain())
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        return await future

    async def _drain(self) -> None:
        loop = asyncio.get_running_loop()
        while self._pending:
            batch, self._pending = self._pending[: self._max], self._pending[self._max :]
            live = [(t, f) for t, f in batch if not f.done()]  # a caller may have given up
            if not live:
                continue
            try:
                vectors = await loop.run_in_executor(
                    self._executor, self._embedder.embed, [t for t, _ in live]
                )
                self.batches += 1
            except Exception as exc:
                for _, f in live:
                    if not f.done():
                        f.set_exception(exc)
                continue
            for (_, f), v in zip(live, vectors, strict=True):
                if not f.done():
                    f.set_result(v)
