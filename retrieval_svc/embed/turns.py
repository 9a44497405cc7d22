"""Turns at the document embedder for writes that embed side by side.

At most ``slots`` batches run at once (one per core). When a slot frees, the waiting write with
the fewest batches left goes next, first come first served among equals: a one-line upsert
waits for one batch in progress, not for every batch of the uploads that arrived before it. A
pool's plain queue made it wait behind two batches of every upload in flight (seven 430-chunk
uploads: 2.9 s). The price is that a large upload waits while smaller writes keep arriving; only
a stream of them that fills every slot for as long as its deadline could stall it.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager


class EmbedTurns:
    def __init__(self, slots: int = 2) -> None:
        self._free = slots
        self._waiting: list[tuple[int, int, asyncio.Future[None]]] = []
        self._arrival = itertools.count()

    @asynccontextmanager
    async def turn(self, batches_left: int) -> AsyncIterator[None]:
        """Hold one slot for the body; writes with fewer ``batches_left`` are let in first."""
        await self._acquire(batches_left)
        try:
            yield
        finally:
            self.release()

    async def _acquire(self, batches_left: int) -> None:
        if self._free and not self._waiting:
            self._free -= 1
            return
        granted: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._waiting, (batches_left, next(self._arrival), granted))
        try:
            await granted
        except asyncio.CancelledError:
            if granted.done() and not granted.cancelled():
                self.release()  # handed a slot as the caller gave up: pass it on
            raise

    def release(self) -> None:
        """Give a slot back: to the first live waiter, or to the free count."""
        while self._waiting:
            _, _, granted = heapq.heappop(self._waiting)
            if not granted.done():
                granted.set_result(None)
                return
        self._free += 1
