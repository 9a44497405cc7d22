"""Metrics for a gate that answers or refuses: pure functions over plain lists.

Conventions, the same in every function:

- ``answerable[i]`` is the label: ``True`` when question *i* can be answered from the corpus
  (the positive class), ``False`` for a negative control (topic absent, near miss).
- ``scores[i]`` is a policy's confidence that question *i* should pass: higher means "more
  answerable". A *threshold* ``t`` passes exactly the questions with ``score >= t``; the
  threshold ``math.inf`` passes nothing.
- ``passed[i]`` is a gate decision: ``True`` = PASS (answered), ``False`` = REFUSE.
- A rate whose denominator is empty is ``None`` (e.g. the false acceptance rate of a set with no
  unanswerable question), never ``nan``, so results serialise to JSON as ``null``.
- Mismatched lengths and NaN scores raise ``ValueError``; an infinite score ranks below or
  above every finite one (no gate emits one: confidences are probabilities or cosines).

The definitions (``docs/datasets.md`` repeats them for report readers):

- **AUROC**: probability that a random answerable question scores above a random unanswerable
  one, ties counting one half (Mann-Whitney U with mid-ranks).
- **FAR** (false acceptance rate): passed unanswerable / unanswerable.
- **FRR** (false refusal rate): refused answerable / answerable.
- **Refusal accuracy**: questions whose answer-or-refuse decision was right (answerable passed,
  unanswerable refused) / all questions.
- **Wrong-evidence acceptance**: answerable questions that passed *without* any gold passage
  among the admitted evidence / answerable questions that passed.
- **Recall@k**: questions with a gold passage among the first *k* distinct ranked ids /
  questions with gold ids.
- **Risk-coverage**: accepting the questions scoring ``>= t``, coverage = accepted / all and
  risk = accepted errors / accepted; its area (AURC) is the step integral of risk over
  coverage, which equals the mean over *k* of the risk of the top-*k* questions when no scores
  tie (ties enter together).
- **FRR at FAR <= target**: over every threshold on the scores, the smallest FRR whose FAR does
  not exceed the target (of thresholds tied on that FRR, the highest).
- **ECE** (expected calibration error): *n_bins* equal-width bins over [0, 1] (bin *i* holds
  confidences in ``[i/n, (i+1)/n)``, the last bin also 1.0); the count-weighted mean of
  ``|mean confidence - observed frequency|`` over non-empty bins.
- **Bootstrap interval**: the percentile interval of a statistic over resamples of the
  questions, drawn with replacement *within each kind*, so every resample keeps the test
  set's composition and only which questions of each kind are drawn varies.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence, Sized
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]
IntArray = npt.NDArray[np.int64]

NEGATIVE_KIND_ORDER = ("topic_absent", "near_miss", "unanswerable")


# ---------------------------------------------------------------------------------------------
# Input checks


def _scores(scores: Sequence[float], name: str = "scores") -> FloatArray:
    arr = np.asarray(scores, dtype=np.float64).reshape(-1)
    if np.isnan(arr).any():
        raise ValueError(f"{name} must not contain NaN")
    return arr


def _bools(values: Sequence[bool], name: str) -> BoolArray:
    arr = np.asarray(values).reshape(-1)
    if arr.size and arr.dtype != np.bool_:
        if not np.isin(arr, (0, 1)).all():
            raise ValueError(f"{name} must be booleans (or 0/1)")
        arr = arr.astype(np.bool_)
    return arr.astype(np.bool_)


def _same_length(**arrays: Sized) -> None:
    lengths = {name: len(a) for name, a in arrays.items()}
    if len(set(lengths.values())) > 1:
        raise ValueError(f"length mismatch: {lengths}")


def _ratio(num: int, den: int) -> float | None:
    return num / den if den else None


# ---------------------------------------------------------------------------------------------
# Ranking quality


def auroc(scores: Sequence[float], answerable: Sequence[bool]) -> float | None:
    """Area under the ROC curve, answerable (positive) vs unanswerable; ties count 1/2.

    ``None`` when either class is empty.
    """
    s = _scores(scores)
    y = _bools(answerable, "answerable")
    _same_length(scores=s, answerable=y)
    n_pos = int(y.sum())
    n_neg = len(y) - n_pos
    if n_pos == 0 or n_neg == 0:
        return None
    ranks = _midranks(s)
    u = float(ranks[y].sum()) - n_pos * (n_pos + 1) / 2.0
    return u / (n_pos * n_neg)


def _midranks(values: FloatArray) -> FloatArray:
    """1-based ranks, tied values sharing the mean of their ranks."""
    order = np.argsort(values, kind="mergesort")
    sorted_vals = values[order]
    ranks = np.empty(len(values), dtype=np.float64)
    i = 0
    n = len(values)
    while i < n:
        j = i
        while j + 1 < n and sorted_vals[j + 1] == sorted_vals[i]:
            j += 1
        ranks[order[i : j + 1]] = (i + j) / 2.0 + 1.0
        i = j + 1
    return ranks


def auroc_by_kind(scores: Sequence[float], kinds: Sequence[str]) -> dict[str, float | None]:
    """AUROC of the answerable questions against each kind of negative, and against all.

    ``kinds[i]`` is a question's kind (``answerable``, ``topic_absent``, ``near_miss``, ...).
    Returns ``{"all": ..., "topic_absent": ..., "near_miss": ...}`` with a key for each
    negative kind present (known kinds first, then others sorted).
    """
    s = _scores(scores)
    _same_length(scores=s, kinds=kinds)
    positive = [k == "answerable" for k in kinds]
    out: dict[str, float | None] = {"all": auroc(s.tolist(), positive)}
    for kind, idx in _each_negative_kind(kinds):
        out[kind] = auroc(s[idx].tolist(), [positive[i] for i in idx])
    return out


def _each_negative_kind(kinds: Sequence[str]) -> list[tuple[str, list[int]]]:
    """Each negative kind present (known kinds first, then others sorted), with the indices of
    the answerable questions and that kind's."""
    present = {k for k in kinds if k != "answerable"}
    ordered = [k for k in NEGATIVE_KIND_ORDER if k in present] + sorted(
        present - set(NEGATIVE_KIND_ORDER)
    )
    return [
        (kind, [i for i, k in enumerate(kinds) if k in ("answerable", kind)]) for kind in ordered
    ]


@dataclass(frozen=True)
class OperatingPoint:
    """The gate's error rates when it passes the questions scoring ``>= threshold``."""

    threshold: float
    """``math.inf`` passes nothing."""
    far: float
    frr: float
    passed: int
    """How many questions pass at this threshold."""

    @property
    def tpr(self) -> float:
        """True positive rate (answerable passed), ``1 - frr``: the ROC y-axis."""
        return 1.0 - self.frr

    @property
    def fpr(self) -> float:
        """False positive rate, the same as ``far``: the ROC x-axis."""
        return self.far


def roc_curve(scores: Sequence[float], answerable: Sequence[bool]) -> list[OperatingPoint]:
    """Every distinct operating point, from ``threshold = inf`` (pass nothing: FAR 0, FRR 1)
    down to the lowest score (pass everything: FAR 1, FRR 0).

    Raises ``ValueError`` unless both classes are present.
    """
    s = _scores(scores)
    y = _bools(answerable, "answerable")
    _same_length(scores=s, answerable=y)
    n_pos = int(y.sum())
    n_neg = len(y) - n_pos
    if n_pos == 0 or n_neg == 0:
        raise ValueError("roc_curve needs both answerable and unanswerable questions")
    order = np.argsort(-s, kind="mergesort")
    s_sorted, y_sorted = s[order], y[order]
    points = [OperatingPoint(threshold=math.inf, far=0.0, frr=1.0, passed=0)]
    tp = fp = 0
    i = 0
    n = len(s_sorted)
    while i < n:
        t = s_sorted[i]
        while i < n and s_sorted[i] == t:
            if y_sorted[i]:
                tp += 1
            else:
                fp += 1
            i += 1
        points.append(
            OperatingPoint(threshold=float(t), far=fp / n_neg, frr=1.0 - tp / n_pos, passed=i)
        )
    return points


def frr_at_far(
    scores: Sequence[float], answerable: Sequence[bool], target_far: float
) -> OperatingPoint | None:
    """The operating point with the smallest FRR among those with FAR ``<= target_far``.

    The threshold is chosen on these scores; apply it to other data with
    :func:`apply_threshold`. Ties on FRR go to the higher threshold. ``None`` when either class
    is empty.
    """
    if not 0.0 <= target_far <= 1.0:
        raise ValueError("target_far must be within [0, 1]")
    y = _bools(answerable, "answerable")
    if y.all() or not y.any():
        _same_length(scores=scores, answerable=y)
        return None
    best: OperatingPoint | None = None
    for p in roc_curve(scores, answerable):
        if p.far <= target_far + 1e-12 and (best is None or p.frr < best.frr):
            best = p
    return best


def frr_at_far_by_kind(
    scores: Sequence[float], kinds: Sequence[str], target_far: float
) -> dict[str, float | None]:
    """:func:`frr_at_far`'s FRR with the answerable questions against each kind of negative
    alone (keys as :func:`auroc_by_kind`'s, without ``all``).

    Each kind gets its own threshold: how well the confidence could serve a knowledge base
    whose unanswerable questions were all of that kind, not the error rates of one threshold.
    """
    s = _scores(scores)
    _same_length(scores=s, kinds=kinds)
    out: dict[str, float | None] = {}
    for kind, idx in _each_negative_kind(kinds):
        point = frr_at_far(s[idx].tolist(), [kinds[i] == "answerable" for i in idx], target_far)
        out[kind] = point.frr if point else None
    return out


def apply_threshold(scores: Sequence[float], threshold: float) -> list[bool]:
    """The decisions at ``threshold``: ``score >= threshold`` passes (e.g. a threshold chosen
    by :func:`frr_at_far` on the train split, applied to the test split)."""
    return [bool(p) for p in _scores(scores) >= threshold]


# ---------------------------------------------------------------------------------------------
# Decisions


def false_acceptance_rate(passed: Sequence[bool], answerable: Sequence[bool]) -> float | None:
    """Unanswerable questions that passed / unanswerable questions."""
    p = _bools(passed, "passed")
    y = _bools(answerable, "answerable")
    _same_length(passed=p, answerable=y)
    return _ratio(int((p & ~y).sum()), int((~y).sum()))


def false_refusal_rate(passed: Sequence[bool], answerable: Sequence[bool]) -> float | None:
    """Answerable questions refused / answerable questions."""
    p = _bools(passed, "passed")
    y = _bools(answerable, "answerable")
    _same_length(passed=p, answerable=y)
    return _ratio(int((~p & y).sum()), int(y.sum()))


def refusal_accuracy(passed: Sequence[bool], answerable: Sequence[bool]) -> float | None:
    """Questions with the right decision (answerable passed, unanswerable refused) / all."""
    p = _bools(passed, "passed")
    y = _bools(answerable, "answerable")
    _same_length(passed=p, answerable=y)
    return _ratio(int((p == y).sum()), len(y))


def gold_in_evidence(
    admitted_ids: Sequence[Collection[str]], gold_ids: Sequence[Collection[str]]
) -> list[bool]:
    """Per question: whether any gold id is among the admitted evidence's document ids."""
    _same_length(admitted_ids=admitted_ids, gold_ids=gold_ids)
    return [bool(set(a) & set(g)) for a, g in zip(admitted_ids, gold_ids, strict=True)]


def wrong_evidence_acceptance(
    passed: Sequence[bool],
    answerable: Sequence[bool],
    admitted_ids: Sequence[Collection[str]],
    gold_ids: Sequence[Collection[str]],
) -> float | None:
    """Answerable questions passed with no gold id among the admitted evidence / answerable
    questions passed. ``admitted_ids[i]`` are the *document* (parent) ids of the evidence the
    gate admitted for question *i*."""
    p = _bools(passed, "passed")
    y = _bools(answerable, "answerable")
    _same_length(passed=p, answerable=y, admitted_ids=admitted_ids)
    gold = np.asarray(gold_in_evidence(admitted_ids, gold_ids), dtype=np.bool_)
    accepted = p & y
    return _ratio(int((accepted & ~gold).sum()), int(accepted.sum()))


@dataclass(frozen=True)
class DecisionSummary:
    """Counts and rates of one policy's decisions on one set of questions."""

    n: int
    answerable: int
    unanswerable: int
    passed: int
    false_acceptances: int
    """Unanswerable questions that passed ("hallucinations" in seed 000's sweep)."""
    false_refusals: int
    """Answerable questions refused ("missed")."""
    wrong_evidence: int | None
    """Answerable questions passed without a gold passage in the evidence (``None``: not
    measured)."""
    far: float | None
    frr: float | None
    refusal_accuracy: float | None
    wrong_evidence_acceptance: float | None
    coverage: float | None
    """Questions passed / all questions."""


def summarize_decisions(
    passed: Sequence[bool],
    answerable: Sequence[bool],
    gold_admitted: Sequence[bool] | None = None,
) -> DecisionSummary:
    """All decision metrics at once. ``gold_admitted[i]``: a gold passage was among the
    evidence admitted for question *i* (see :func:`gold_in_evidence`); omit it when unknown."""
    p = _bools(passed, "passed")
    y = _bools(answerable, "answerable")
    _same_length(passed=p, answerable=y)
    wrong: int | None = None
    wea: float | None = None
    if gold_admitted is not None:
        g = _bools(gold_admitted, "gold_admitted")
        _same_length(passed=p, gold_admitted=g)
        wrong = int((p & y & ~g).sum())
        wea = _ratio(wrong, int((p & y).sum()))
    fa = int((p & ~y).sum())
    fr = int((~p & y).sum())
    n_pos = int(y.sum())
    return DecisionSummary(
        n=len(y),
        answerable=n_pos,
        unanswerable=len(y) - n_pos,
        passed=int(p.sum()),
        false_acceptances=fa,
        false_refusals=fr,
        wrong_evidence=wrong,
        far=_ratio(fa, len(y) - n_pos),
        frr=_ratio(fr, n_pos),
        refusal_accuracy=_ratio(int((p == y).sum()), len(y)),
        wrong_evidence_acceptance=wea,
        coverage=_ratio(int(p.sum()), len(y)),
    )


def pass_rate_by_kind(passed: Sequence[bool], kinds: Sequence[str]) -> dict[str, float]:
    """Share of each kind's questions that passed: ``1 - FRR`` for ``answerable``, the FAR of
    that kind of negative for the others."""
    p = _bools(passed, "passed")
    _same_length(passed=p, kinds=kinds)
    out: dict[str, float] = {}
    for kind in dict.fromkeys(kinds):
        idx = [i for i, k in enumerate(kinds) if k == kind]
        out[kind] = float(p[idx].mean())
    return out


# ---------------------------------------------------------------------------------------------
# Retrieval


def recall_at_k(
    ranked_ids: Sequence[Sequence[str]], gold_ids: Sequence[Collection[str]], k: int
) -> float | None:
    """Share of questions (those with gold ids) with a gold id among the first ``k`` distinct
    ranked ids. Repeated ids (several chunks of one document) count once, at their first
    rank, so pass chunk-level or document-level rankings alike. ``None`` if no question has
    gold ids."""
    if k < 1:
        raise ValueError("k must be >= 1")
    _same_length(ranked_ids=ranked_ids, gold_ids=gold_ids)
    hits = total = 0
    for ranked, gold in zip(ranked_ids, gold_ids, strict=True):
        if not gold:
            continue
        total += 1
        top = list(dict.fromkeys(ranked))[:k]
        hits += any(r in gold for r in top)
    return _ratio(hits, total)


def recall_at(
    ranked_ids: Sequence[Sequence[str]],
    gold_ids: Sequence[Collection[str]],
    ks: Iterable[int] = (1, 5, 10),
) -> dict[int, float | None]:
    """:func:`recall_at_k` for each ``k`` (``{1: ..., 5: ..., 10: ...}``)."""
    return {k: recall_at_k(ranked_ids, gold_ids, k) for k in ks}


# ---------------------------------------------------------------------------------------------
# Risk-coverage


@dataclass(frozen=True)
class RiskCoveragePoint:
    threshold: float
    accepted: int
    coverage: float
    risk: float


@dataclass(frozen=True)
class RiskCoverage:
    points: list[RiskCoveragePoint]
    """One point per distinct score, from the highest threshold (least coverage) down."""
    aurc: float | None
    """Area under the risk-coverage curve (lower is better); ``None`` for no questions."""


def risk_coverage(scores: Sequence[float], errors: Sequence[bool]) -> RiskCoverage:
    """Risk (errors among accepted) against coverage, accepting questions by descending score.

    ``errors[i]`` says whether accepting question *i* would be an error: for the gate usually
    ``not answerable[i]``, or also an answerable question without its gold passage in the
    evidence (the caller decides and says so in the report).
    """
    s = _scores(scores)
    e = _bools(errors, "errors")
    _same_length(scores=s, errors=e)
    n = len(s)
    if n == 0:
        return RiskCoverage(points=[], aurc=None)
    order = np.argsort(-s, kind="mergesort")
    s_sorted, e_sorted = s[order], e[order]
    points: list[RiskCoveragePoint] = []
    area = 0.0
    err = 0
    i = 0
    prev_cov = 0.0
    while i < n:
        t = s_sorted[i]
        while i < n and s_sorted[i] == t:
            err += int(e_sorted[i])
            i += 1
        cov = i / n
        risk = err / i
        area += risk * (cov - prev_cov)
        prev_cov = cov
        points.append(RiskCoveragePoint(threshold=float(t), accepted=i, coverage=cov, risk=risk))
    return RiskCoverage(points=points, aurc=area)


# ---------------------------------------------------------------------------------------------
# Calibration


@dataclass(frozen=True)
class ReliabilityBin:
    lower: float
    upper: float
    count: int
    mean_confidence: float | None
    """``None`` for an empty bin."""
    frequency: float | None
    """Observed share of positive outcomes in the bin; ``None`` for an empty bin."""


def _bin_index(c: FloatArray, n_bins: int) -> npt.NDArray[np.int64]:
    return np.minimum((c * n_bins).astype(np.int64), n_bins - 1)


def reliability_bins(
    confidences: Sequence[float], outcomes: Sequence[bool], n_bins: int = 10
) -> list[ReliabilityBin]:
    """Equal-width bins over [0, 1] for a reliability diagram (as in the ECE)."""
    if n_bins < 1:
        raise ValueError("n_bins must be >= 1")
    c = _scores(confidences, "confidences")
    o = _bools(outcomes, "outcomes")
    _same_length(confidences=c, outcomes=o)
    if ((c < 0) | (c > 1)).any():
        raise ValueError("confidences must be within [0, 1]")
    idx = _bin_index(c, n_bins)
    bins = []
    for b in range(n_bins):
        mask = idx == b
        count = int(mask.sum())
        bins.append(
            ReliabilityBin(
                lower=b / n_bins,
                upper=(b + 1) / n_bins,
                count=count,
                mean_confidence=float(c[mask].mean()) if count else None,
                frequency=float(o[mask].mean()) if count else None,
            )
        )
    return bins


def expected_calibration_error(
    confidences: Sequence[float], outcomes: Sequence[bool], n_bins: int = 10
) -> float | None:
    """ECE over ``n_bins`` equal-width bins: ``sum_b (n_b / n) * |conf_b - freq_b|``.

    ``confidences[i]`` in [0, 1] is the stated probability that ``outcomes[i]`` is true (for the
    gate: that question *i* is answerable, or that a passed answer is right). Bin *b* holds
    ``[b/n_bins, (b+1)/n_bins)``; the last bin also holds 1.0. ``None`` for no questions.
    """
    bins = reliability_bins(confidences, outcomes, n_bins)
    n = sum(b.count for b in bins)
    if n == 0:
        return None
    return sum(
        b.count / n * abs(b.mean_confidence - b.frequency)
        for b in bins
        if b.mean_confidence is not None and b.frequency is not None
    )


# ---------------------------------------------------------------------------------------------
# Seed 000's threshold sweep


@dataclass(frozen=True)
class SweepRow:
    """One row of "missed vs hallucinations per threshold"."""

    threshold: float
    passed: int
    missed: int
    """Answerable questions refused (false refusals)."""
    hallucinations: int
    """Unanswerable questions passed (false acceptances)."""
    wrong_evidence: int | None
    """Answerable questions passed without a gold passage in the evidence (``None`` when
    ``gold_admitted`` was not given)."""
    far: float | None
    frr: float | None


def threshold_sweep(
    scores: Sequence[float],
    answerable: Sequence[bool],
    thresholds: Sequence[float] | None = None,
    gold_admitted: Sequence[bool] | None = None,
) -> list[SweepRow]:
    """Missed answers vs hallucinations at each threshold (``score >= threshold`` passes).

    For seed 000 pass its answer-gate scale, e.g. ``thresholds=range(0, 101, 5)`` over the
    average admitted confidence. Without ``thresholds``: 21 evenly spaced values from the
    lowest to the highest score. Rows come in the order of ``thresholds``.
    """
    s = _scores(scores)
    y = _bools(answerable, "answerable")
    _same_length(scores=s, answerable=y)
    g = None
    if gold_admitted is not None:
        g = _bools(gold_admitted, "gold_admitted")
        _same_length(scores=s, gold_admitted=g)
    if thresholds is None:
        if len(s) == 0:
            return []
        lo, hi = float(s.min()), float(s.max())
        thresholds = np.linspace(lo, hi, 21).tolist() if hi > lo else [lo]
    rows = []
    for t in thresholds:
        p = s >= t
        summary = summarize_decisions(p.tolist(), y.tolist(), None if g is None else g.tolist())
        rows.append(
            SweepRow(
                threshold=float(t),
                passed=summary.passed,
                missed=summary.false_refusals,
                hallucinations=summary.false_acceptances,
                wrong_evidence=summary.wrong_evidence,
                far=summary.far,
                frr=summary.frr,
            )
        )
    return rows


def answer_accuracy(
    passed: Sequence[bool], answerable: Sequence[bool], correct: Sequence[bool | None]
) -> float | None:
    """Share of answered questions whose answer is right.

    A passed unanswerable question is always wrong (there is no right answer to give); a
    passed answerable one counts when its answer was judged (``correct[i]`` not None). None
    when nothing judged was answered.
    """
    p = _bools(passed, "passed")
    y = _bools(answerable, "answerable")
    _same_length(passed=p, answerable=y, correct=correct)
    right = wrong = 0
    for was_passed, ok, c in zip(p.tolist(), y.tolist(), correct, strict=True):
        if not was_passed:
            continue
        if not ok:
            wrong += 1
        elif c is not None:
            right, wrong = right + int(c), wrong + int(not c)
    return _ratio(right, right + wrong)


def bootstrap_intervals(
    kinds: Sequence[str],
    statistics: Callable[[IntArray], Mapping[str, float | None]],
    resamples: int = 1000,
    level: float = 0.95,
    seed: int = 0,
) -> dict[str, tuple[float, float] | None]:
    """Percentile intervals of each statistic ``statistics(idx)`` returns, over ``resamples``
    index arrays that redraw the questions with replacement within each kind.

    A statistic that is ``None`` on some resamples (a class drawn empty) is taken over the rest;
    ``None`` when it is ``None`` on more than half of them. Deterministic for ``seed``.
    """
    if resamples < 1:
        raise ValueError("resamples must be at least 1")
    if not 0.0 < level < 1.0:
        raise ValueError("level must be within (0, 1)")
    if not kinds:
        raise ValueError("bootstrap_intervals needs questions")
    rng = np.random.default_rng(seed)
    groups = [
        np.flatnonzero(np.asarray(kinds) == kind).astype(np.int64) for kind in sorted(set(kinds))
    ]
    drawn: dict[str, list[float]] = {}
    for _ in range(resamples):
        idx = np.concatenate([g[rng.integers(0, len(g), len(g))] for g in groups])
        for name, value in statistics(idx).items():
            values = drawn.setdefault(name, [])
            if value is not None:
                values.append(float(value))
    tail = 100 * (1 - level) / 2
    return {
        name: (
            (float(np.percentile(v, tail)), float(np.percentile(v, 100 - tail)))
            if 2 * len(v) >= resamples
            else None
        )
        for name, v in drawn.items()
    }
