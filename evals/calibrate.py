"""``candor calibrate``: fit the calibrated gate on a dataset's *train* split, write a config.

    candor calibrate RESULTS.jsonl [MORE.jsonl ...] --out policy.yaml [--target-far 0.05]
                     [--confident-far 0.01] [--weight W --weight W ...]
                     [--read-floor-cost 0.005]

Reads the rows ``candor eval run`` wrote, fits a logistic model over the gate's signals on the
train split only, and picks the tier bounds on the train split: ``uncertain`` is the lowest
confidence whose false-acceptance rate stays at or under ``--target-far``, ``confident`` the
same for ``--confident-far``. ``--read-floor-cost`` adds a read floor: the highest bound on
the confidence a certain reading could give below which the gate refuses without reading,
such that at most that share of the answerable train questions the gate would pass are lost.
Writes a complete threshold config with a new version and the
fit's provenance. scikit-learn is used here only (the ``eval`` extra); the gate just applies
the coefficients.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from evals.datasets.format import jsonl_objects
from gate_svc.policy import parse_policy
from gate_svc.reader_view import READER_SIGNALS

#: The signals the calibrated model reads. Raw counts that depend on a corpus's size (hits) or
#: a deployment's options (reranker, curated answers) are left out so the fit transfers, and so
#: is every signal that reads the top candidate against its tenant: the search engines' BM25
#: (term rarity among the tenant's passages), ratios and gaps to the runner-up, RRF and agreement
#: counts (how many rivals there are). Fitted on corpora of thousands of passages, those read a
#: tenant of ten as weak evidence: on HaluEval dealt into tenants of 10 passages the model that
#: read them passed 20 of 499 answerable test questions (docs/evaluation.md, "Small tenants").
#: What the evidence says of the question (coverage of its rare words, sentence alignment, the
#: reader) does not depend on who else is in the tenant.
#: The reader's column: the one a certain reading sets to 1 and the no-reading model leaves out.
#: On the log-odds scale (gate_svc.reader_view.reader_log_odds): on the pooled train rows it
#: read better than the probability in 5-fold CV on every source (docs/evaluation.md).
READER_FEATURE = "reader_log_odds"
FEATURES: tuple[str, ...] = (
    "top_cosine",
    "top_in_both",
    "facet_coverage",
    "missing_facets",
    "best_sentence_alignment",
    "pair_coverage",
    "top_pair_coverage",
    "answer_type_found",
    READER_FEATURE,
)
#: Heavy-tailed scores would enter as log(1 + x); none of the features above is.
LOG_FEATURES: frozenset[str] = frozenset()


def read_rows(path: Path, need: Sequence[str] = ("answerable", "signals")) -> list[dict[str, Any]]:
    """The rows of ``candor eval run``, less those recording a question that failed
    (``error``: only a run against a deployment writes them). A file that is not such rows
    stops with its name and line, not a traceback."""
    if path.is_dir():
        raise SystemExit(
            f"{path}: a directory; give the rows file `candor eval run --out` wrote (a dataset "
            "directory is the input of `eval run`)"
        )
    if not path.is_file():
        raise SystemExit(f"{path}: cannot read rows of `candor eval run`: no such file")
    problems: list[str] = []
    rows = []
    first_line: dict[str, int] = {}
    for n, row in jsonl_objects(path, problems):
        if isinstance(row.get("id"), str):
            # One question twice would be fitted and counted twice (two runs concatenated).
            if row["id"] in first_line:
                problems.append(
                    f"{path}:{n}: question id {row['id']!r} again (first at line "
                    f"{first_line[row['id']]})"
                )
            first_line.setdefault(row["id"], n)
        if "error" not in row and any(k not in row for k in need):
            problems.append(
                f"{path}:{n}: not a row of `candor eval run` (needs {', '.join(need)}): "
                "a dataset's questions.jsonl is the input of `eval run`, not of this command"
            )
        elif "error" not in row and (why := _row_problem(row)):
            problems.append(f"{path}:{n}: {why}")
        rows.append(row)
    if problems:
        raise SystemExit("\n".join(problems[:10]))
    if not rows:
        raise SystemExit(f"{path}: no rows")
    failed = sum(1 for r in rows if "error" in r)
    if failed:
        print(f"{path}: skipping {failed} row(s) of failed questions", file=sys.stderr)
    return [r for r in rows if "error" not in r]


def _row_problem(row: dict[str, Any]) -> str:
    """Why a row's label or signals cannot be fitted on, or "".

    "false" (a string) counted as answerable and null as unanswerable; a NaN signal ended the
    fit in a traceback that named no row."""
    if "answerable" in row and not isinstance(row["answerable"], bool):
        return f"answerable must be true or false, not {row['answerable']!r}"
    signals = row.get("signals")
    if "signals" in row and not isinstance(signals, dict):
        return "signals must be an object of signal values"
    for name, value in (signals or {}).items():
        if isinstance(value, bool) or not isinstance(value, int | float):
            return f"signal {name} must be a number, not {value!r}"
        if not math.isfinite(value):
            return f"signal {name} is {value}: every signal must be a finite number"
    return ""


MIN_PER_CLASS = 3
"""Fewer answerable or unanswerable train questions than this fit nothing worth shipping."""
FEW_PER_CLASS = 30
"""Below this, a bound's false-acceptance rate moves in steps of over 3%: said, not refused."""


def check_train_size(rows: Sequence[dict[str, Any]]) -> None:
    """Refuse a fit on too few train questions of either class; warn when they are few."""
    positives = sum(1 for r in rows if r["answerable"])
    counts = {"answerable": positives, "unanswerable": len(rows) - positives}
    if min(counts.values()) < MIN_PER_CLASS:
        raise SystemExit(
            f"calibration needs at least {MIN_PER_CLASS} answerable and {MIN_PER_CLASS} "
            f"unanswerable train questions; these rows have {counts['answerable']} and "
            f"{counts['unanswerable']}"
        )
    for kind, count in counts.items():
        if count < FEW_PER_CLASS:
            print(
                f"only {count} {kind} train questions: each one moves the fitted rates by "
                f"{1 / count:.0%}; label more before trusting the bounds",
                file=sys.stderr,
            )


def feature(row: dict[str, Any], name: str) -> float:
    x = float(row["signals"].get(name, 0.0))
    return math.log1p(max(0.0, x)) if name in LOG_FEATURES else x


def matrix(rows: Sequence[dict[str, Any]]) -> np.ndarray[Any, np.dtype[np.float64]]:
    return np.array([[feature(r, f) for f in FEATURES] for r in rows], dtype=np.float64)


def threshold_for_far(
    scores: np.ndarray[Any, Any],
    labels: np.ndarray[Any, Any],
    target: float,
    weights: np.ndarray[Any, Any] | None = None,
) -> float:
    """Lowest score threshold whose false-acceptance rate (negatives >= t) is <= target; with
    ``weights``, the rate is the passed negatives' share of the negatives' total weight."""
    neg = labels == 0
    if not neg.any():
        return float(scores.min())
    order = np.argsort(-scores[neg], kind="stable")
    negatives = scores[neg][order]
    if weights is None:
        allowed = math.floor(target * len(negatives))
    else:
        # How many of the highest negatives fit in the budget, in total weight.
        weight = weights[neg][order]
        allowed = int(
            np.searchsorted(np.cumsum(weight), target * weight.sum() * (1 + 1e-12), "right")
        )
    # Accepting strictly above the (allowed+1)-th highest negative keeps FAR <= target.
    boundary = negatives[allowed] if allowed < len(negatives) else -math.inf
    above = scores[scores > boundary]
    return float(above.min()) if len(above) else float(boundary + 1e-9)


def _sig(x: float) -> float:
    """Seven significant digits: readable in YAML, and a small scale never rounds to zero."""
    return float(f"{float(x):.7g}")


def source_weights(sizes: Sequence[int], shares: Sequence[float] | None) -> np.ndarray[Any, Any]:
    """Per-row weights for rows pooled from sources of ``sizes`` rows: each source's rows
    share its ``shares`` part of the total (normalised), so a large source cannot drown a
    small one; the weights average 1. ``None``: every row weighs 1 (plain pooling)."""
    if shares is None:
        return np.ones(sum(sizes))
    if len(shares) != len(sizes) or any(s <= 0 for s in shares):
        raise ValueError("need one positive weight per source")
    total = float(sum(shares))
    w: np.ndarray[Any, Any] = np.concatenate(
        [np.full(n, s / total / n) for n, s in zip(sizes, shares, strict=True)]
    )
    return w * (len(w) / float(w.sum()))


def read_floor(
    p: np.ndarray[Any, Any],
    certain: np.ndarray[Any, Any],
    labels: np.ndarray[Any, Any],
    uncertain: float,
    cost: float,
    weights: np.ndarray[Any, Any] | None = None,
) -> float:
    """The highest floor on ``certain`` (confidence with a certain reading) that refuses at most
    ``cost`` of the answerable rows' weight among those passed (``p >= uncertain``); 0 when
    no floor above the pass bound fits, or ``cost`` is 0."""
    if cost <= 0:
        return 0.0
    w = np.ones(len(labels)) if weights is None else weights
    passed = (labels == 1) & (p >= uncertain)
    order = np.argsort(certain[passed], kind="stable")
    floors, weight = certain[passed][order], w[passed][order]
    # Rows strictly below the floor are refused: the first `allowed` of them fit the budget.
    allowed = int(np.searchsorted(np.cumsum(weight), cost * w[labels == 1].sum(), "right"))
    if allowed >= len(floors):
        return 0.0
    floor = float(floors[allowed])
    return floor if floor > uncertain else 0.0


def _logistic(c: float) -> Any:
    """The one estimator both fits use, so the no-reading model is fitted like the main one."""
    from sklearn.linear_model import LogisticRegression

    return LogisticRegression(C=c, max_iter=2000, class_weight="balanced")


def _unread_model(
    z: np.ndarray[Any, Any],
    y: np.ndarray[Any, Any],
    c: float,
    weights: np.ndarray[Any, Any] | None,
    reader: int,
) -> dict[str, Any]:
    """The model refit on the standardised signals without the reader's column: the gate's
    confidence for a question it decides without reading (``calibrated.unread``). The main
    model with the reading at 0 would understate it: that is its lowest value, not its mean."""
    model = _logistic(c)
    model.fit(np.delete(z, reader, axis=1), y, sample_weight=weights)
    names = [f for i, f in enumerate(FEATURES) if i != reader]
    return {
        "bias": _sig(model.intercept_[0]),
        "coefficients": {f: _sig(w) for f, w in zip(names, model.coef_[0], strict=True)},
    }


def fit(
    rows: Sequence[dict[str, Any]],
    target_far: float,
    confident_far: float,
    c: float = 1.0,
    weights: np.ndarray[Any, Any] | None = None,
    read_floor_cost: float = 0.0,
) -> dict[str, Any]:
    """Fit on the given (train) rows; returns the ``calibrated`` and ``tiers`` config sections.
    ``weights`` (see :func:`source_weights`) weigh the rows in the fit and in the bounds;
    ``read_floor_cost`` > 0 adds a read floor (:func:`read_floor`). A model that weighs the
    reader also gets its no-reading refit (:func:`_unread_model`)."""
    x = matrix(rows)
    y = np.array([1 if r["answerable"] else 0 for r in rows])
    if len(set(y.tolist())) < 2:
        raise SystemExit("calibration needs both answerable and unanswerable train questions")
    if weights is None:
        means = x.mean(axis=0)
        scales = x.std(axis=0)
    else:
        means = np.average(x, axis=0, weights=weights)
        scales = np.sqrt(np.average((x - means) ** 2, axis=0, weights=weights))
    scales[scales < 1e-9] = 1.0  # a constant feature carries no information
    z = (x - means) / scales
    model = _logistic(c)
    model.fit(z, y, sample_weight=weights)
    coef = model.coef_[0]

    def prob(standardised: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        out: np.ndarray[Any, Any] = 1.0 / (
            1.0 + np.exp(-(model.intercept_[0] + standardised @ coef))
        )
        return out

    p = prob(z)
    uncertain = _between(p, threshold_for_far(p, y, target_far, weights))
    confident = max(uncertain, _between(p, threshold_for_far(p, y, confident_far, weights)))
    w = np.ones(len(y)) if weights is None else weights
    neg, pos = w * (y == 0), w * (y == 1)
    calibrated: dict[str, Any] = {
        "bias": _sig(model.intercept_[0]),
        "coefficients": {f: _sig(w) for f, w in zip(FEATURES, coef, strict=True)},
        "means": {f: _sig(m) for f, m in zip(FEATURES, means, strict=True)},
        "scales": {f: _sig(s) for f, s in zip(FEATURES, scales, strict=True)},
        "log_features": sorted(LOG_FEATURES),
    }
    passed = p >= uncertain
    reader = FEATURES.index(READER_FEATURE)
    if coef[reader] > 0:
        calibrated["unread"] = _unread_model(z, y, c, weights, reader)
    if coef[reader] > 0 and read_floor_cost > 0:
        sure = z.copy()
        sure[:, reader] = (1.0 - means[reader]) / scales[reader]
        certain = prob(sure)
        # Rounded down: rounding up would refuse the row the floor was set at.
        floor = math.floor(read_floor(p, certain, y, uncertain, read_floor_cost, weights) * 1e6)
        if floor:
            calibrated["read_floor"] = floor / 1e6
            passed &= certain >= floor / 1e6
    return {
        "calibrated": calibrated,
        "tiers": {"confident": confident, "uncertain": uncertain},
        "train": {
            "n": len(rows),
            "answerable": int(y.sum()),
            "far_at_uncertain": float(neg[passed].sum() / max(1e-12, neg.sum())),
            "frr_at_uncertain": float(pos[~passed].sum() / max(1e-12, pos.sum())),
        },
    }


def _between(p: np.ndarray[Any, Any], bound: float) -> float:
    """``bound`` moved halfway down to the next lower score, rounded as the config writes it.

    At a row's own score, the 6-digit rounding the file keeps (and the gate's arithmetic with
    the written coefficients, ~1e-5 off the fit's) refused that row or not by chance, so the
    train rates recorded with the config were not the written config's. Halfway, the same rows
    pass unless two scores lie within that noise of each other."""
    below = p[p < bound]
    if not (below.size and math.isfinite(bound)):
        return round(bound, 6)
    lower = float(below.max())
    written = round((bound + lower) / 2, 6)
    if written <= lower:
        # Scores within the rounding of each other: rounded to nearest, the bound fell to or
        # below the score it must exclude, and the written config passed that negative. The
        # next 6-digit value above it excludes it.
        written = math.ceil(lower * 1e6) / 1e6
        while written <= lower:  # float error: 0.125014 * 1e6 may ceil to itself
            written = round(written + 1e-6, 6)
    return written


def fit_seed001(rows: Sequence[dict[str, Any]]) -> dict[str, float]:
    """Seed 001's own model refit on these (train) rows: a, b, c of
    ``sigmoid(a * top_rrf + b * top_in_both + c)``, its tiers kept as the seed wrote them."""
    from sklearn.linear_model import LogisticRegression

    x = np.array([[feature(r, "top_rrf"), feature(r, "top_in_both")] for r in rows])
    y = np.array([1 if r["answerable"] else 0 for r in rows])
    if len(set(y.tolist())) < 2:
        raise ValueError("refitting seed 001 needs answerable and unanswerable rows")
    # Weak regularisation: two features, hundreds of rows; the seed's own scale (a≈120) must fit.
    model = LogisticRegression(C=1e4, max_iter=5000)
    model.fit(x, y)
    a, b = (float(w) for w in model.coef_[0])
    return {"a": _sig(a), "b": _sig(b), "c": _sig(float(model.intercept_[0]))}


def reader_model(rows: Sequence[dict[str, Any]]) -> str:
    """The one evidence reader that scored these rows (``reader_model``), or ``""``.

    Rows from a deployment (``--target``) do not say which reader it runs; rows scored by two
    readers cannot be fitted as one signal.
    """
    models = {str(r.get("reader_model", "")) for r in rows if READER_SIGNALS & r["signals"].keys()}
    known = sorted(models - {""})
    if len(known) > 1:
        raise SystemExit(f"rows were scored by several evidence readers: {known}")
    return known[0] if known and "" not in models else ""


def _sha256(path: Path) -> str:
    """Which rows a config was fitted on, whatever the file is called later."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


def write_config(
    fitted: dict[str, Any],
    out: Path,
    source: str,
    target_far: float,
    confident_far: float,
    read_floor_cost: float = 0.0,
) -> str:
    floor = f"read_floor_cost={read_floor_cost}; " if read_floor_cost else ""
    body = {
        "policy": "calibrated",
        "calibrated": {
            **fitted["calibrated"],
            "fitted_on": (
                f"{source}; split=train; n={fitted['train']['n']}; "
                f"target_far={target_far}; confident_far={confident_far}; {floor}"
                f"train_far={fitted['train']['far_at_uncertain']:.4f}; "
                f"train_frr={fitted['train']['frr_at_uncertain']:.4f}; "
                f"date={time.strftime('%Y-%m-%d')}"
            ),
        },
        "tiers": fitted["tiers"],
        "max_evidence": 5,
        "refusal_messages": {"en": "I don't have information on this in the knowledge base."},
    }
    digest = hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()[:8]
    version = f"{time.strftime('%Y-%m-%d')}.calibrated.{digest}"
    text = (
        "# Written by `candor calibrate`; fit on the train split only. Do not edit by hand:\n"
        "# refit, or copy to a new version.\n"
        + yaml.safe_dump({"version": version, **body}, sort_keys=False, width=100)
    )
    parse_policy(text)  # the gate must accept what we write
    out.parent.mkdir(parents=True, exist_ok=True)
    # A gate may be polling this path: it must see the old file or the new one, never half.
    partial = out.with_name(f".{out.name}.partial")
    partial.write_text(text)
    os.replace(partial, out)
    return version


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="candor calibrate")
    ap.add_argument(
        "results",
        type=Path,
        nargs="+",
        help="rows from `candor eval run`; several files are pooled, one source each",
    )
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument(
        "--target-far",
        type=float,
        default=0.05,
        help="false acceptance allowed at the pass (uncertain) bound",
    )
    ap.add_argument(
        "--confident-far",
        type=float,
        default=None,
        help="false acceptance allowed at the confident bound; default 0.01, or --target-far "
        "if that is lower",
    )
    ap.add_argument(
        "--weight",
        type=float,
        action="append",
        default=None,
        help="one per results file, in order: the share of the fit (and of the bounds' rates) "
        "that file's rows carry, e.g. your own questions beside a public set; default: every "
        "row weighs the same",
    )
    ap.add_argument(
        "--read-floor-cost",
        type=float,
        default=0.0,
        help="share of the answerable train questions the gate would pass that a read floor may "
        "refuse unread, to skip the evidence reader on refusals whose retrieval evidence is too "
        "weak for any reading to carry (e.g. 0.005); default 0: no floor",
    )
    ap.add_argument("--source", default="", help="dataset name for the provenance")
    args = ap.parse_args(argv)
    for flag, rate in (("--target-far", args.target_far), ("--confident-far", args.confident_far)):
        # `not 0 <= x < 1` is also true of NaN. At 1 every unanswerable question may pass: the
        # bound fell to 0 and the config answered "Who won the 1998 World Cup?" as confident.
        # Before the hint below, which assumes a rate.
        if rate is not None and not 0 <= rate < 1:
            ap.error(f"{flag} must be a rate in [0, 1), got {rate}")
    if args.confident_far is None:
        args.confident_far = min(0.01, args.target_far)
        if args.target_far < 0.01:
            print(
                f"--target-far {args.target_far} is below the confident tier's default rate "
                "(0.01): both bounds are fitted at it, so every pass is confident; give "
                "--confident-far to keep an uncertain tier",
                file=sys.stderr,
            )
    if not 0 <= args.read_floor_cost < 1:
        ap.error("--read-floor-cost must be in [0, 1)")
    if args.confident_far > args.target_far:
        ap.error(
            f"--confident-far ({args.confident_far}) must not exceed --target-far "
            f"({args.target_far}): the confident tier is the stricter one"
        )
    if args.weight is not None and len(args.weight) != len(args.results):
        ap.error(
            f"--weight given {len(args.weight)} time(s) for {len(args.results)} results file(s)"
        )
    if args.weight is not None and any(not (w > 0 and math.isfinite(w)) for w in args.weight):
        ap.error("--weight must be a positive finite number")
    given = [p.resolve() for p in args.results]
    if len(set(given)) < len(given):
        ap.error("a results file is given twice: pool it once (--weight weighs a source)")
    sources: list[list[dict[str, Any]]] = []
    for path in args.results:
        train = [r for r in read_rows(path) if r.get("split") == "train"]
        if not train:
            raise SystemExit(
                f"{path}: no train-split rows: calibrate never fits on test questions "
                "(an unsplit dataset gets a split from `candor eval prepare split`)"
            )
        skipped = sum(1 for r in train if r["signals"].get("reader_skipped"))
        if skipped:
            # Rows from a deployed gate that did not read (a certain reading would still refuse)
            # enter with reader = 0, its lower bound, which overstates the reader's weight.
            print(
                f"{path}: {skipped} train row(s) have no reading (reader_skipped); "
                "to fit the reader's weight, run `candor eval run` in-process",
                file=sys.stderr,
            )
        sources.append(train)
    rows = [r for train in sources for r in train]
    check_train_size(rows)
    weights = (
        None if args.weight is None else source_weights([len(t) for t in sources], args.weight)
    )
    fitted = fit(
        rows,
        args.target_far,
        args.confident_far,
        weights=weights,
        read_floor_cost=args.read_floor_cost,
    )
    model = reader_model(rows)
    if model and fitted["calibrated"]["coefficients"].get(READER_FEATURE):
        fitted["calibrated"]["reader_model"] = model
    # --source names the data; the rows' digests stay, so the fit can still be traced to them
    # (by file name only: the provenance is served by GetPolicy, local paths are not its to say).
    provenance = " + ".join(
        f"{p.name} (sha256 {_sha256(p)[:12]}"
        + ("" if args.weight is None else f", weight {w:g}")
        + ")"
        for p, w in zip(args.results, args.weight or [1.0] * len(args.results), strict=True)
    )
    if args.source:
        provenance = f"{args.source}: {provenance}"
    version = write_config(
        fitted, args.out, provenance, args.target_far, args.confident_far, args.read_floor_cost
    )
    floor = fitted["calibrated"].get("read_floor")
    if args.read_floor_cost and not floor:
        print(
            "no read floor written: the model does not weigh the reader, or no floor above the "
            "pass bound stays within --read-floor-cost",
            file=sys.stderr,
        )
    if fitted["train"]["frr_at_uncertain"] >= 1.0:
        print(
            "warning: the written config refuses every answerable train question at this "
            "--target-far (a negative scores above them all); look at the rows before using it",
            file=sys.stderr,
        )
    print(
        f"wrote {args.out} version {version}: train n={fitted['train']['n']}, "
        f"FAR {fitted['train']['far_at_uncertain']:.3f}, "
        f"FRR {fitted['train']['frr_at_uncertain']:.3f} at uncertain >= "
        f"{fitted['tiers']['uncertain']:.3f}" + (f", read floor {floor:.3f}" if floor else "")
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
