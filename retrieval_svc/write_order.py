"""Writes to the same documents land in the order their calls arrived."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence


class ArrivalOrder:
    """Per-document queue of write calls, by arrival.

    An upsert generating hypothetical questions waits seconds for an LLM before it takes the
    write lock: a delete (or a plainer upsert) of the same document sent after it landed
    first, and the older call then restored what the newer one removed. Each call takes its
    place per document on arrival and waits, before writing, for the calls that arrived
    earlier for any of its documents (calls for other documents do not wait).
    """

    def __init__(self) -> None:
        self._last: dict[tuple[str, str], asyncio.Future[None]] = {}

    def __len__(self) -> int:
        """Documents with a call in flight."""
        return len(self._last)

    @contextlib.asynccontextmanager
    async def slot(
        self, tenant: str, ids: Sequence[str]
    ) -> AsyncIterator[Callable[[], Awaitable[None]]]:
        """Take this call's place; yields the wait for the calls before it, to await right
        before writing. The place is given up only once those are done and this call's own
        write has landed, even when it is cancelled."""
        loop = asyncio.get_running_loop()
        mine: asyncio.Future[None] = loop.create_future()
        keys = [(tenant, i) for i in dict.fromkeys(ids)]
        earlier = {self._last[k] for k in keys if k in self._last}
        for k in keys:
            self._last[k] = mine

        async def turn() -> None:
            if earlier:
                # asyncio.wait, not gather: a gather cancelled with its waiter cancels what it
                # waits for, and those futures are other calls' places. One caller giving up
                # cancelled an earlier call's place, and every later call queued on it failed
                # with the cancel, its write never made (an outside probe).
                await asyncio.wait(earlier)

        try:
            yield turn
        finally:
            pending = [f for f in earlier if not f.done()]

            def done(_: object = None) -> None:
                if not mine.done():
                    mine.set_result(None)
                for k in keys:
                    if self._last.get(k) is mine:
                        del self._last[k]

            if pending:
                asyncio.gather(*pending, return_exceptions=True).add_done_callback(done)
            else:
                done()
