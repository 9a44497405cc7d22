"""The builders' shared group arithmetic, on hand-computed cases."""

from __future__ import annotations

from evals.datasets.builder import first_further_below, within_limit


def test_within_limit_keeps_whole_groups_in_order() -> None:
    assert within_limit([3, 4, 2, 1], None) == [0, 1, 2, 3]
    assert within_limit([3, 4, 2, 1], 6) == [0, 2, 3]  # 4 would overflow; 2 and 1 still fit
    assert within_limit([7], 6) == []


def test_first_further_below_balances_towards_the_share() -> None:
    # Empty buckets, half each: bucket one's gap 0.5*3 equals bucket two's, so not further below.
    assert not first_further_below(0, 0, 3, 0.5)
    assert first_further_below(0, 3, 3, 0.5)  # gaps 3 against 0
    assert not first_further_below(1, 3, 4, 0.25)  # gaps 1.0 against 3.0
    assert first_further_below(0, 6, 2, 0.25)  # gaps 2.0 against 0.0
