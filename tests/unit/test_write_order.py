"""Writes to one document land in arrival order, whoever gives up waiting."""

from __future__ import annotations

import asyncio

import pytest

from retrieval_svc.write_order import ArrivalOrder


async def _write(
    order: ArrivalOrder,
    landed: list[str],
    name: str,
    ids: list[str],
    hold: asyncio.Event | None = None,
) -> None:
    """One write call: its place, its turn, then (once ``hold`` is set) its write lands."""
    async with order.slot("t", ids) as turn:
        await turn()
        if hold is not None:
            await hold.wait()
        landed.append(name)


async def test_a_call_for_other_documents_does_not_wait() -> None:
    order = ArrivalOrder()
    landed: list[str] = []
    slow = asyncio.Event()

    a = asyncio.create_task(_write(order, landed, "a", ["x"], slow))
    await asyncio.sleep(0)
    await _write(order, landed, "b", ["z"])
    assert landed == ["b"]
    slow.set()
    await a
    assert landed == ["b", "a"] and len(order) == 0


async def test_one_caller_giving_up_does_not_cancel_the_calls_queued_beside_it() -> None:
    # A writes {x, y} slowly; B waits on x, C on y. B's caller left: its wait, a gather,
    # cancelled A's place, and C, queued on it too, failed with B's cancel, never written.
    order = ArrivalOrder()
    landed: list[str] = []
    a_may_land = asyncio.Event()

    a = asyncio.create_task(_write(order, landed, "a", ["x", "y"], a_may_land))
    await asyncio.sleep(0)
    b = asyncio.create_task(_write(order, landed, "b", ["x"]))
    c = asyncio.create_task(_write(order, landed, "c", ["y"]))
    d = asyncio.create_task(_write(order, landed, "d", ["x"]))
    await asyncio.sleep(0.01)
    b.cancel()
    await asyncio.sleep(0.01)
    assert landed == []  # C and D still wait for A
    a_may_land.set()
    await asyncio.wait_for(asyncio.gather(a, c, d), 1.0)
    with pytest.raises(asyncio.CancelledError):
        await b
    assert landed[0] == "a" and sorted(landed[1:]) == ["c", "d"]
    assert len(order) == 0  # every place given up once its write was done


async def test_a_cancelled_call_keeps_its_place_until_the_calls_before_it_are_done() -> None:
    # Its write may still be landing (the store write is not cancellable): a later call for
    # the same document must not overtake it.
    order = ArrivalOrder()
    landed: list[str] = []
    a_may_land = asyncio.Event()

    a = asyncio.create_task(_write(order, landed, "a", ["x"], a_may_land))
    await asyncio.sleep(0)
    b = asyncio.create_task(_write(order, landed, "b", ["x"]))
    await asyncio.sleep(0)
    b.cancel()
    c = asyncio.create_task(_write(order, landed, "c", ["x"]))
    await asyncio.sleep(0.01)
    assert landed == []
    a_may_land.set()
    await asyncio.wait_for(asyncio.gather(a, c), 1.0)
    assert landed == ["a", "c"]
