"""candor.throttle.Throttle: once per key per window, in bounded memory."""

from __future__ import annotations

from candor.throttle import Throttle


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_key_is_due_once_per_window_and_keys_are_independent() -> None:
    clock = Clock()
    throttle = Throttle(10.0, clock=clock)
    assert throttle.due("a") and throttle.due("b")
    assert not throttle.due("a")
    clock.now += 9.9
    assert not throttle.due("a")
    clock.now += 0.1
    assert throttle.due("a") and not throttle.due("a")
    # The window runs from when a key was last due, not from when it was last asked.
    clock.now += 5
    assert not throttle.due("a")
    clock.now += 5
    assert throttle.due("a")


def test_a_forgotten_key_is_due_again() -> None:
    clock = Clock()
    throttle = Throttle(10.0, size=2, clock=clock)
    assert throttle.due("a") and throttle.due("b") and throttle.due("c")
    assert not throttle.due("c") and not throttle.due("b")
    assert throttle.due("a")  # pushed out by "c": memory stays at two keys
