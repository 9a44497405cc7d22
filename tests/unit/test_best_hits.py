"""best_hits: a store's search cut at its limit, ties at the limit decided by chunk id."""

from __future__ import annotations

from retrieval_svc.stores.base import TIE_SCAN, Chunk, Hit, best_hits


def _hit(name: str, score: float) -> Hit:
    c = Chunk(
        tenant="t",
        chunk_id=f"{name}#p0c0",
        parent_id=f"{name}#p0",
        document_id=name,
        title="",
        text=name,
        source_kind=1,
        uri="",
        generation="g1",
    )
    return Hit(c, score)


class _Store:
    """Answers ``search(n)`` with the first ``n`` of its hits in the order it keeps them."""

    def __init__(self, hits: list[Hit]) -> None:
        self.hits = hits
        self.asked: list[int] = []

    def search(self, n: int) -> list[Hit]:
        self.asked.append(n)
        return self.hits[:n]


def _names(hits: list[Hit]) -> list[str]:
    return [h.chunk.document_id for h in hits]


def test_without_a_tie_at_the_limit_one_search_of_one_more() -> None:
    store = _Store([_hit("a", 3), _hit("b", 2), _hit("c", 1), _hit("d", 0.5)])

    assert _names(best_hits(store.search, 2)) == ["a", "b"]
    assert store.asked == [3]


def test_a_tie_running_past_the_first_read_is_read_to_its_end() -> None:
    # Kept last-written first: the store alone would pick z, y, x.
    tied = [_hit(n, 1.0) for n in "zyxwvu"]
    store = _Store([_hit("top", 2), *tied, _hit("low", 0.1)])

    assert _names(best_hits(store.search, 3)) == ["top", "u", "v"]
    assert store.asked == [4, 8]


def test_equal_scores_above_the_limit_are_ordered_by_chunk_id() -> None:
    store = _Store([_hit("b", 2), _hit("a", 2), _hit("c", 1)])

    assert _names(best_hits(store.search, 2)) == ["a", "b"]


def test_fewer_hits_than_the_limit_are_all_returned_best_first() -> None:
    store = _Store([_hit("b", 1), _hit("a", 1)])

    assert _names(best_hits(store.search, 5)) == ["a", "b"]
    assert store.asked == [6]


def test_a_tie_longer_than_the_scan_stops_there() -> None:
    store = _Store([_hit(f"d{i:03}", 1.0) for i in range(999, -1, -1)])

    hits = best_hits(store.search, 2)

    assert store.asked == [3, 6, 2 * TIE_SCAN]
    # Past the scan the store's order decides which copies are read; they are still cut by id.
    assert _names(hits) == sorted(_names(store.hits[: 2 * TIE_SCAN]))[:2]


def test_limit_zero_asks_nothing() -> None:
    store = _Store([_hit("a", 1)])

    assert best_hits(store.search, 0) == []
    assert store.asked == []
