"""Metric functions against cases worked out by hand (the arithmetic is in the comments)."""

from __future__ import annotations

import math

import pytest

from evals import metrics as m

T, F = True, False


# --- AUROC -----------------------------------------------------------------------------------


def test_auroc_by_hand() -> None:
    # positives {0.35, 0.8} vs negatives {0.1, 0.4}: 0.35>0.1, 0.35<0.4, 0.8>both -> 3/4
    assert m.auroc([0.1, 0.4, 0.35, 0.8], [F, F, T, T]) == 0.75
    assert m.auroc([0.1, 0.4, 0.35, 0.8], [0, 0, 1, 1]) == 0.75  # type: ignore[list-item]


def test_auroc_ties_count_half() -> None:
    # positives {0.5, 0.9} vs negatives {0.5, 0.1}: 0.5=0.5 (1/2), 0.5>0.1, 0.9>both -> 3.5/4
    assert m.auroc([0.5, 0.9, 0.5, 0.1], [T, T, F, F]) == 0.875
    assert m.auroc([0.3, 0.3, 0.3], [T, F, F]) == 0.5
    assert m.auroc([2.0, 2.0, 1.0, 1.0], [T, F, T, F]) == 0.5


def test_auroc_extremes_and_one_class() -> None:
    assert m.auroc([3, 2, 1], [T, T, F]) == 1.0
    assert m.auroc([1, 2, 3], [T, T, F]) == 0.0
    assert m.auroc([-math.inf, math.inf], [F, T]) == 1.0
    assert m.auroc([0.2, 0.9], [T, T]) is None
    assert m.auroc([0.2, 0.9], [F, F]) is None
    assert m.auroc([], []) is None


def test_inputs_are_checked() -> None:
    with pytest.raises(ValueError, match="length mismatch"):
        m.auroc([0.1, 0.2], [T])
    with pytest.raises(ValueError, match="NaN"):
        m.auroc([math.nan, 0.2], [T, F])
    with pytest.raises(ValueError, match="booleans"):
        m.auroc([0.1, 0.2], [2, 0])  # type: ignore[list-item]


def test_auroc_by_kind() -> None:
    scores = [0.9, 0.6, 0.1, 0.2, 0.7, 0.5]
    kinds = ["answerable", "answerable", "topic_absent", "topic_absent", "near_miss", "near_miss"]
    # near miss: 0.9>0.7, 0.9>0.5, 0.6<0.7, 0.6>0.5 -> 3/4
    # all: 0.9 beats 4, 0.6 beats 0.1, 0.2, 0.5 -> 7/8
    assert m.auroc_by_kind(scores, kinds) == {"all": 0.875, "topic_absent": 1.0, "near_miss": 0.75}
    assert list(m.auroc_by_kind([1, 0, 0], ["answerable", "zzz", "near_miss"])) == [
        "all",
        "near_miss",
        "zzz",
    ]
    assert m.auroc_by_kind([0.1], ["topic_absent"]) == {"all": None, "topic_absent": None}


# --- ROC, FRR at FAR -------------------------------------------------------------------------

SCORES = [0.9, 0.8, 0.8, 0.3]
LABELS = [T, T, F, F]


def test_roc_curve_groups_ties() -> None:
    points = m.roc_curve(SCORES, LABELS)
    assert [(p.threshold, p.far, p.frr, p.passed) for p in points] == [
        (math.inf, 0.0, 1.0, 0),
        (0.9, 0.0, 0.5, 1),
        (0.8, 0.5, 0.0, 3),  # the tie at 0.8 passes one answerable and one not, together
        (0.3, 1.0, 0.0, 4),
    ]
    assert (points[1].fpr, points[1].tpr) == (0.0, 0.5)
    with pytest.raises(ValueError, match="both"):
        m.roc_curve([0.1], [T])


def test_frr_at_far() -> None:
    at0 = m.frr_at_far(SCORES, LABELS, 0.0)
    assert at0 is not None and (at0.threshold, at0.far, at0.frr) == (0.9, 0.0, 0.5)
    at49 = m.frr_at_far(SCORES, LABELS, 0.49)
    assert at49 is not None and at49.threshold == 0.9
    at50 = m.frr_at_far(SCORES, LABELS, 0.5)
    assert at50 is not None and (at50.threshold, at50.frr) == (0.8, 0.0)
    # FRR 0 at both 0.8 and 0.3: the higher threshold (lower FAR) wins.
    at100 = m.frr_at_far(SCORES, LABELS, 1.0)
    assert at100 is not None and (at100.threshold, at100.far) == (0.8, 0.5)
    # Every negative outscores every positive: only "pass nothing" meets FAR 0.
    none_pass = m.frr_at_far([0.1, 0.9], [T, F], 0.0)
    assert none_pass is not None
    assert (none_pass.threshold, none_pass.far, none_pass.frr) == (math.inf, 0.0, 1.0)
    assert m.frr_at_far([0.1, 0.2], [T, T], 0.05) is None
    with pytest.raises(ValueError):
        m.frr_at_far(SCORES, LABELS, 1.5)


def test_frr_at_far_by_kind() -> None:
    scores = [0.9, 0.6, 0.1, 0.2, 0.7, 0.5, 0.95]
    kinds = [
        "answerable",
        "answerable",
        "topic_absent",
        "topic_absent",
        "near_miss",
        "near_miss",
        "near_miss",
    ]
    # Topic absent alone: 0.6 passes both answerable and neither negative. Near miss alone at
    # FAR <= 1/3: 0.95 must pass, so the best is threshold 0.9 (FAR 1/3, FRR 1/2).
    assert m.frr_at_far_by_kind(scores, kinds, 0.0) == {"topic_absent": 0.0, "near_miss": 1.0}
    assert m.frr_at_far_by_kind(scores, kinds, 0.34) == {"topic_absent": 0.0, "near_miss": 0.5}
    # Pooled, one threshold at FAR 0 must stay above the near miss at 0.95: nothing passes,
    # though against absent topics alone everything answerable could.
    pooled = m.frr_at_far(scores, [k == "answerable" for k in kinds], 0.0)
    assert pooled is not None and pooled.frr == 1.0
    assert m.frr_at_far_by_kind([0.1], ["topic_absent"], 0.05) == {"topic_absent": None}
    assert list(m.frr_at_far_by_kind([1, 0, 0], ["answerable", "zzz", "near_miss"], 0.1)) == [
        "near_miss",
        "zzz",
    ]


def test_apply_threshold() -> None:
    assert m.apply_threshold(SCORES, 0.8) == [T, T, T, F]
    assert m.apply_threshold(SCORES, math.inf) == [F, F, F, F]
    chosen = m.frr_at_far(SCORES, LABELS, 0.5)
    assert chosen is not None
    passed = m.apply_threshold([0.85, 0.2, 0.8], chosen.threshold)
    assert m.summarize_decisions(passed, [T, T, F]).far == 1.0


# --- decisions -------------------------------------------------------------------------------

PASSED = [T, F, T, F, T]
ANSWERABLE = [T, T, F, F, T]
ADMITTED = [["d1"], [], ["x"], [], ["d9", "d2"]]
GOLD = [["d1"], ["d5"], [], [], ["d3"]]


def test_decision_rates() -> None:
    # negatives: #2 passed, #3 refused -> FAR 1/2; positives #0, #1, #4: #1 refused -> FRR 1/3
    assert m.false_acceptance_rate(PASSED, ANSWERABLE) == 0.5
    assert m.false_refusal_rate(PASSED, ANSWERABLE) == pytest.approx(1 / 3)
    # right decisions: #0, #3, #4 -> 3/5
    assert m.refusal_accuracy(PASSED, ANSWERABLE) == 0.6
    # answerable and passed: #0 (gold d1 admitted), #4 (d3 not admitted) -> 1/2
    assert m.wrong_evidence_acceptance(PASSED, ANSWERABLE, ADMITTED, GOLD) == 0.5
    assert m.gold_in_evidence(ADMITTED, GOLD) == [T, F, F, F, F]


def test_decision_rates_with_an_empty_class() -> None:
    assert m.false_acceptance_rate([T, F], [T, T]) is None
    assert m.false_refusal_rate([T, F], [F, F]) is None
    assert m.refusal_accuracy([], []) is None
    assert m.wrong_evidence_acceptance([F], [T], [["a"]], [["a"]]) is None  # nothing accepted


def test_summarize_decisions() -> None:
    s = m.summarize_decisions(PASSED, ANSWERABLE, m.gold_in_evidence(ADMITTED, GOLD))
    assert (s.n, s.answerable, s.unanswerable, s.passed) == (5, 3, 2, 3)
    assert (s.false_acceptances, s.false_refusals, s.wrong_evidence) == (1, 1, 1)
    assert (s.far, s.refusal_accuracy, s.wrong_evidence_acceptance, s.coverage) == (
        0.5,
        0.6,
        0.5,
        0.6,
    )
    assert s.frr == pytest.approx(1 / 3)
    bare = m.summarize_decisions(PASSED, ANSWERABLE)
    assert bare.wrong_evidence is None and bare.wrong_evidence_acceptance is None


def test_pass_rate_by_kind() -> None:
    kinds = ["answerable", "answerable", "near_miss", "topic_absent"]
    assert m.pass_rate_by_kind([T, F, T, F], kinds) == {
        "answerable": 0.5,
        "near_miss": 1.0,
        "topic_absent": 0.0,
    }


# --- recall ----------------------------------------------------------------------------------


def test_recall_at_k() -> None:
    ranked = [["a", "b", "c"], ["c", "c", "b", "a"], ["x"], ["y"]]
    gold = [["b"], ["a"], [], ["z"]]
    # question 3 has no gold and is not counted; #2's repeated "c" counts once, so "a" is 3rd
    assert m.recall_at(ranked, gold, (1, 2, 3, 10)) == {1: 0.0, 2: 1 / 3, 3: 2 / 3, 10: 2 / 3}
    assert m.recall_at_k([["a"]], [[]], 1) is None
    with pytest.raises(ValueError):
        m.recall_at_k(ranked, gold, 0)


# --- risk-coverage ---------------------------------------------------------------------------


def test_risk_coverage() -> None:
    rc = m.risk_coverage([0.9, 0.8, 0.7, 0.6], [F, T, F, T])
    assert [(p.coverage, p.risk) for p in rc.points] == [
        (0.25, 0.0),
        (0.5, 0.5),
        (0.75, pytest.approx(1 / 3)),
        (1.0, 0.5),
    ]
    # no ties: the mean of the top-k risks, (0 + 1/2 + 1/3 + 1/2) / 4
    assert rc.aurc == pytest.approx((0 + 0.5 + 1 / 3 + 0.5) / 4)


def test_risk_coverage_ties_enter_together() -> None:
    rc = m.risk_coverage([0.9, 0.5, 0.5, 0.1], [F, T, F, T])
    assert [(p.threshold, p.accepted) for p in rc.points] == [(0.9, 1), (0.5, 3), (0.1, 4)]
    # 0 * 1/4 + (1/3) * 2/4 + (1/2) * 1/4
    assert rc.aurc == pytest.approx(1 / 6 + 1 / 8)
    empty = m.risk_coverage([], [])
    assert empty.points == [] and empty.aurc is None
    assert m.risk_coverage([0.3, 0.2], [F, F]).aurc == 0.0


# --- calibration -----------------------------------------------------------------------------


def test_expected_calibration_error() -> None:
    conf = [0.05, 0.15, 0.95, 1.0, 0.5]
    outcome = [F, F, T, T, F]
    # bins 0: |0.05-0|, 1: |0.15-0|, 5: |0.5-0|, 9 (0.95 and 1.0): |0.975-1| x 2 -> 0.75 / 5
    assert m.expected_calibration_error(conf, outcome) == pytest.approx(0.15)
    # one bin: mean confidence 2.65 / 5 = 0.53, frequency 2 / 5 = 0.4
    assert m.expected_calibration_error(conf, outcome, n_bins=1) == pytest.approx(0.13)
    assert m.expected_calibration_error([0.25] * 4, [T, F, F, F]) == 0.0
    assert m.expected_calibration_error([], []) is None
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        m.expected_calibration_error([1.2], [T])


def test_reliability_bins_edges() -> None:
    bins = m.reliability_bins([0.0, 0.1, 0.3, 0.7, 1.0], [F, T, F, T, T], n_bins=10)
    assert [b.count for b in bins] == [1, 1, 0, 1, 0, 0, 0, 1, 0, 1]  # 1.0 in the last bin
    assert (bins[0].lower, bins[0].upper) == (0.0, 0.1)
    assert bins[2].mean_confidence is None and bins[2].frequency is None
    assert (bins[9].mean_confidence, bins[9].frequency) == (1.0, 1.0)


# --- seed 000's sweep ------------------------------------------------------------------------


def test_threshold_sweep() -> None:
    rows = m.threshold_sweep(
        [90, 70, 50, 30], [T, F, T, F], thresholds=[0, 60, 100], gold_admitted=[T, T, F, F]
    )
    got = [(r.threshold, r.passed, r.missed, r.hallucinations, r.wrong_evidence) for r in rows]
    assert got == [(0, 4, 0, 2, 1), (60, 2, 1, 1, 0), (100, 0, 2, 0, 0)]
    assert [(r.far, r.frr) for r in rows] == [(1.0, 0.0), (0.5, 0.5), (0.0, 1.0)]
    default = m.threshold_sweep([0.0, 1.0], [T, F])
    assert len(default) == 21 and default[0].threshold == 0.0 and default[-1].threshold == 1.0
    assert default[0].wrong_evidence is None
    assert m.threshold_sweep([], []) == []
    assert len(m.threshold_sweep([0.5, 0.5], [T, F])) == 1


def test_answer_accuracy_counts_passed_negatives_as_wrong_and_skips_unjudged() -> None:
    from evals.metrics import answer_accuracy

    passed = [True, True, True, True, False]
    answerable = [True, True, False, True, True]
    correct: list[bool | None] = [True, False, None, None, True]
    # judged answered: q0 right, q1 wrong, q2 (negative) wrong; q3 unjudged; q4 refused
    assert answer_accuracy(passed, answerable, correct) == pytest.approx(1 / 3)
    assert answer_accuracy([False] * 5, answerable, correct) is None


# --- bootstrap intervals ---------------------------------------------------------------------


def test_bootstrap_redraws_within_each_kind_and_is_deterministic() -> None:
    import numpy as np

    kinds = ["answerable"] * 30 + ["near_miss"] * 10 + ["topic_absent"] * 5
    labels = np.array(kinds)

    def counts(idx: m.IntArray) -> dict[str, float | None]:
        drawn = labels[idx]
        return {k: float((drawn == k).sum()) for k in ("answerable", "near_miss", "topic_absent")}

    # Every resample keeps the composition: each count's interval is a single point.
    assert m.bootstrap_intervals(kinds, counts, 50) == {
        "answerable": (30.0, 30.0),
        "near_miss": (10.0, 10.0),
        "topic_absent": (5.0, 5.0),
    }
    values = np.arange(45, dtype=float)

    def mean(idx: m.IntArray) -> dict[str, float | None]:
        return {"mean": float(values[idx].mean())}

    a = m.bootstrap_intervals(kinds, mean, 200, seed=1)
    assert a == m.bootstrap_intervals(kinds, mean, 200, seed=1)
    assert a != m.bootstrap_intervals(kinds, mean, 200, seed=2)


def test_bootstrap_interval_of_a_share_matches_the_normal_approximation() -> None:
    import numpy as np

    # 400 questions, half of them "hits": the share's 95% interval is about 0.5 +- 1.96 *
    # sqrt(0.25 / 400) = 0.5 +- 0.049.
    hits = np.array([i % 2 == 0 for i in range(400)])
    found = m.bootstrap_intervals(
        ["answerable"] * 400, lambda idx: {"share": float(hits[idx].mean())}, 2000
    )["share"]
    assert found is not None
    lo, hi = found
    assert lo < 0.5 < hi
    assert 0.085 < hi - lo < 0.11


def test_bootstrap_skips_undefined_draws_and_checks_its_arguments() -> None:
    import numpy as np

    flips = iter(np.random.default_rng(0).random(1000))

    def sometimes(idx: m.IntArray) -> dict[str, float | None]:
        r = next(flips)
        return {"often": None if r < 0.2 else 1.0, "rarely": None if r < 0.8 else 1.0}

    out = m.bootstrap_intervals(["answerable"] * 5, sometimes, 100)
    assert out == {"often": (1.0, 1.0), "rarely": None}
    for bad in ({"resamples": 0}, {"level": 1.0}, {"level": 0.0}):
        with pytest.raises(ValueError):
            m.bootstrap_intervals(["answerable"], lambda idx: {}, **bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        m.bootstrap_intervals([], lambda idx: {})
