"""How much of the caller's deadline a downstream call gets, hop after hop."""

from __future__ import annotations

import pytest

from candor.runtime.deadline import DeadlineExhausted, caller_bound, downstream_timeout


class Remaining:
    """The one ServicerContext method downstream_timeout reads."""

    def __init__(self, seconds: float | None) -> None:
        self.seconds = seconds

    def time_remaining(self) -> float | None:
        return self.seconds


def test_no_deadline_gets_the_cap() -> None:
    assert downstream_timeout(Remaining(None), 3.0) == 3.0  # type: ignore[arg-type]


def test_a_long_deadline_keeps_50_ms_to_answer() -> None:
    assert downstream_timeout(Remaining(1.0), 3.0) == pytest.approx(0.95)  # type: ignore[arg-type]
    assert downstream_timeout(Remaining(10.0), 3.0) == 3.0  # type: ignore[arg-type]


def test_two_hops_leave_most_of_a_100_ms_deadline_to_the_work() -> None:
    # The gate calls retrieval, which gives its arms what is left: a fixed 50 ms per hop once
    # left nothing of 100 ms, though a whole Evaluate takes ~25 ms.
    at_gate = downstream_timeout(Remaining(0.1), 3.0)  # type: ignore[arg-type]
    at_retrieval = downstream_timeout(Remaining(at_gate), 2.0)  # type: ignore[arg-type]
    assert at_retrieval >= 0.06


def test_a_deadline_too_close_to_call_anything_says_how_close() -> None:
    with pytest.raises(DeadlineExhausted, match="4 ms away"):
        downstream_timeout(Remaining(0.004), 3.0)  # type: ignore[arg-type]
    with pytest.raises(DeadlineExhausted, match="0 ms away"):
        downstream_timeout(Remaining(-0.2), 3.0)  # type: ignore[arg-type]


def test_a_call_that_ran_out_of_most_of_its_own_timeout_was_slow_not_cut_short() -> None:
    # The CLI's 30 s deadline leaves a 30 s generation cap 29.9 s: a generator hung that long
    # has failed, though the caller's deadline, strictly, set the timeout.
    at_gate = downstream_timeout(Remaining(30.0), 30.0)  # type: ignore[arg-type]
    assert at_gate < 30.0 and not caller_bound(at_gate, 30.0)
    tight = downstream_timeout(Remaining(0.3), 2.0)  # type: ignore[arg-type]
    assert caller_bound(tight, 2.0)
