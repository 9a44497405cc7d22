"""EmbedTurns: at most ``slots`` holders; the waiter with the fewest batches left goes next,
first come first served among equals; a waiter that gives up never holds a slot."""

from __future__ import annotations

import asyncio

import pytest

from retrieval_svc.embed.turns import EmbedTurns


async def _hold(
    turns: EmbedTurns, name: str, left: int, order: list[str], go: asyncio.Event
) -> None:
    async with turns.turn(left):
        order.append(name)
        await go.wait()


def test_the_write_with_fewest_batches_left_goes_next() -> None:
    async def run() -> list[str]:
        turns, order, go = EmbedTurns(slots=1), [], asyncio.Event()
        first = asyncio.ensure_future(_hold(turns, "first", 50, order, go))
        await asyncio.sleep(0)
        waiting = [
            asyncio.ensure_future(_hold(turns, name, left, order, go))
            for name, left in [("large", 40), ("small", 1), ("medium", 5), ("small-later", 1)]
        ]
        await asyncio.sleep(0)
        assert order == ["first"], "one slot: the others wait"
        go.set()
        await asyncio.gather(first, *waiting)
        return order

    assert asyncio.run(run()) == ["first", "small", "small-later", "medium", "large"]


def test_no_more_than_the_slots_run_at_once() -> None:
    async def run() -> int:
        turns, peak, running = EmbedTurns(slots=2), 0, 0

        async def batch() -> None:
            nonlocal peak, running
            async with turns.turn(1):
                running += 1
                peak = max(peak, running)
                await asyncio.sleep(0.001)
                running -= 1

        await asyncio.gather(*(batch() for _ in range(20)))
        return peak

    assert asyncio.run(run()) == 2


def test_a_waiter_that_gives_up_passes_its_turn_on() -> None:
    async def run() -> list[str]:
        turns, order, go = EmbedTurns(slots=1), [], asyncio.Event()
        holder = asyncio.ensure_future(_hold(turns, "holder", 9, order, go))
        await asyncio.sleep(0)
        quitter = asyncio.ensure_future(_hold(turns, "quitter", 1, order, go))
        patient = asyncio.ensure_future(_hold(turns, "patient", 3, order, go))
        await asyncio.sleep(0)
        quitter.cancel()
        go.set()
        await asyncio.gather(holder, patient)
        with pytest.raises(asyncio.CancelledError):
            await quitter
        return order

    assert asyncio.run(run()) == ["holder", "patient"]


def test_a_turn_handed_over_as_its_waiter_gives_up_goes_to_the_next() -> None:
    async def run() -> list[str]:
        turns, order, go = EmbedTurns(slots=1), [], asyncio.Event()
        go.set()
        await turns._acquire(1)  # the one slot, held by the test
        quitter = asyncio.ensure_future(_hold(turns, "quitter", 1, order, go))
        patient = asyncio.ensure_future(_hold(turns, "patient", 2, order, go))
        await asyncio.sleep(0)
        turns.release()  # handed to the quitter...
        quitter.cancel()  # ...which gives up before it runs
        with pytest.raises(asyncio.CancelledError):
            await quitter
        await asyncio.wait_for(patient, 5)
        return order

    assert asyncio.run(run()) == ["patient"]
