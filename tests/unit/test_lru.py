"""The bounded LRU the translation cache and the edge store's filter verdicts share."""

from __future__ import annotations

from candor.lru import LRU


def test_the_least_recently_used_entry_goes_first() -> None:
    cache: LRU[str, int] = LRU(2)
    cache.put("a", 1)
    cache.put("b", 2)
    assert cache.get("a") == 1  # now "b" is the least recently used
    cache.put("c", 3)
    assert (cache.get("b"), cache.get("a"), cache.get("c"), len(cache)) == (None, 1, 3, 2)


def test_size_zero_keeps_nothing() -> None:
    cache: LRU[str, int] = LRU(0)
    cache.put("a", 1)
    assert (cache.get("a"), len(cache)) == (None, 0)
