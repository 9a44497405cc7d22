"""Once per key per window: for log lines that would otherwise repeat on every call."""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable

from candor.lru import LRU


class Throttle:
    """Says yes to a key at most once every ``seconds``, remembering the last ``size`` keys
    (a key forgotten is due again, so memory stays bounded whatever the keys are)."""

    def __init__(
        self, seconds: float, size: int = 10_000, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._seconds, self._clock = seconds, clock
        self._last: LRU[Hashable, float] = LRU(size)

    def due(self, key: Hashable) -> bool:
        """Whether ``key`` was last due ``seconds`` ago or more (or never); if so it is now."""
        now = self._clock()
        last = self._last.get(key)
        if last is not None and now - last < self._seconds:
            return False
        self._last.put(key, now)
        return True
