"""``candor eval report``: metrics, tables and plots for every policy on one split.

    candor eval report RESULTS.jsonl --split test --out docs/evaluation.md [--json PATH]

Reads rows from ``candor eval run``. Each policy is scored by its confidence (threshold-free:
AUROC, FRR at a FAR target, risk-coverage) and by its own decisions (FAR, FRR, refusal
accuracy, wrong-evidence acceptance). Negative controls are reported together and by kind
(topic absent, near miss). Plots are PNGs beside the Markdown.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from evals import metrics
from evals.calibrate import read_rows
from evals.harness import BASELINE_COLUMNS, UNSPLIT, config_columns

ORDER = (
    "seed000",
    "seed001",
    "seed001_refit",
    "seed003",
    "seed004",
    "top1_cosine",
    "always_answer",
)


def _policies(rows: Sequence[dict[str, Any]]) -> list[str]:
    """Threshold configs first (by label), then the baselines."""
    names = set(rows[0]["policies"]) if rows else set()
    return sorted(_configs(rows)) + [n for n in ORDER if n in names]


def _configs(rows: Sequence[dict[str, Any]]) -> list[str]:
    """The columns that are threshold configs (``policy@version``, or a deployment's
    decision), not the hand baselines: each gets bootstrap intervals."""
    names = set(rows[0]["policies"]) if rows else set()
    return sorted(names - BASELINE_COLUMNS)


#: The false-acceptance rates every report gives FRR at, and their keys ("5", "1").
FAR_TARGETS = {"5": 0.05, "1": 0.01}

#: Threshold-free statistics, and the order the interval table shows them in.
INTERVAL_KEYS = (
    "auroc",
    "auroc_topic_absent",
    "auroc_near_miss",
    "frr_at_far_5",
    "frr_at_far_1",
    "ece",
)


def threshold_free(
    scores: Sequence[float], answerable: Sequence[bool], kinds: Sequence[str]
) -> dict[str, float | None]:
    """The statistics of a policy's confidence alone (:data:`INTERVAL_KEYS`)."""
    by_kind = metrics.auroc_by_kind(scores, kinds)
    out: dict[str, float | None] = {
        "auroc": by_kind.get("all"),
        "auroc_topic_absent": by_kind.get("topic_absent"),
        "auroc_near_miss": by_kind.get("near_miss"),
    }
    for key, target in FAR_TARGETS.items():
        point = metrics.frr_at_far(scores, answerable, target)
        out[f"frr_at_far_{key}"] = point.frr if point else None
    # ECE measures a probability; a raw score (top-1 cosine goes below 0) has none to measure.
    probabilities = all(0.0 <= x <= 1.0 for x in scores)
    out["ece"] = metrics.expected_calibration_error(scores, answerable) if probabilities else None
    return out


def intervals(
    scores: Sequence[float], answerable: Sequence[bool], kinds: Sequence[str], resamples: int
) -> dict[str, list[float] | None]:
    """95% bootstrap intervals of :func:`threshold_free` (questions redrawn within each kind)."""
    s, y, k = np.asarray(scores), np.asarray(answerable, dtype=bool), np.asarray(kinds)

    def statistics(idx: metrics.IntArray) -> dict[str, float | None]:
        return threshold_free(s[idx].tolist(), y[idx].tolist(), k[idx].tolist())

    found = metrics.bootstrap_intervals(kinds, statistics, resamples)
    return {key: list(b) if (b := found.get(key)) else None for key in INTERVAL_KEYS}


def summarize(
    rows: Sequence[dict[str, Any]],
    dataset: str,
    intervals_for: Sequence[str] = (),
    resamples: int = 1000,
) -> dict[str, Any]:
    """The machine-readable result (schema in docs/evaluation.md). Policies named in
    ``intervals_for`` also get ``ci95``: bootstrap intervals over ``resamples`` redraws."""
    answerable = [bool(r["answerable"]) for r in rows]
    kinds = [str(r["kind"]) for r in rows]
    gold = [list(r["gold_ids"]) for r in rows]
    judged: list[bool | None] = [(r.get("generated") or {}).get("correct") for r in rows]
    has_answers = any(c is not None for c in judged)
    out: dict[str, Any] = {
        "dataset": dataset,
        "n": len(rows),
        "counts": {k: kinds.count(k) for k in sorted(set(kinds))},
        "policies": {},
        "recall": {},
    }
    for name in _policies(rows):
        decisions = [r["policies"][name] for r in rows]
        scores = [float(d["confidence"]) for d in decisions]
        free = threshold_free(scores, answerable, kinds)
        entry: dict[str, Any] = {k: free[k] for k in INTERVAL_KEYS if k != "ece"}
        entry["auroc_by_kind"] = {
            k: v for k, v in metrics.auroc_by_kind(scores, kinds).items() if k != "all"
        }
        entry["frr_at_far_by_kind"] = {
            key: metrics.frr_at_far_by_kind(scores, kinds, target)
            for key, target in FAR_TARGETS.items()
        }
        # A bare score (top1_cosine) makes no decisions: its decision keys are null, not absent,
        # so every policy has the documented keys.
        entry.update(
            dict.fromkeys(
                ("far", "frr", "refusal_accuracy", "wrong_evidence_acceptance", "coverage")
            ),
            pass_rate_by_kind=None,
        )
        if has_answers:
            entry["answer_accuracy"] = None
        if "outcome" in decisions[0]:
            passed = [d["outcome"] == "pass" for d in decisions]
            admitted = metrics.gold_in_evidence([d["evidence"] for d in decisions], gold)
            s = metrics.summarize_decisions(passed, answerable, admitted)
            entry.update(
                far=s.far,
                frr=s.frr,
                refusal_accuracy=s.refusal_accuracy,
                wrong_evidence_acceptance=s.wrong_evidence_acceptance,
                coverage=s.coverage,
                pass_rate_by_kind=metrics.pass_rate_by_kind(passed, kinds),
            )
            if has_answers:
                entry["answer_accuracy"] = metrics.answer_accuracy(passed, answerable, judged)
        entry["ece"] = free["ece"]
        entry["aurc"] = metrics.risk_coverage(scores, [not a for a in answerable]).aurc
        if name in intervals_for and resamples > 0:
            entry["ci95"] = intervals(scores, answerable, kinds, resamples)
        out["policies"][name] = entry
    if intervals_for and resamples > 0:
        out["bootstrap_resamples"] = resamples
    if has_answers:
        graded = [c for c in judged if c is not None]
        out["generator"] = {
            "judged": len(graded),
            "contains_reference": sum(graded) / len(graded),
            "yes_no_skipped": sum(
                1 for r, c in zip(rows, judged, strict=True) if r.get("generated") and c is None
            ),
        }
    positives = [i for i, a in enumerate(answerable) if a]
    for arm in ("dense", "keyword", "hybrid"):
        # Rows from a running deployment (`eval run --target`) carry the hybrid arm only.
        if not all(arm in rows[i]["ranked"] for i in positives):
            continue
        ranked = [rows[i]["ranked"][arm] for i in positives]
        recall = metrics.recall_at(ranked, [gold[i] for i in positives], (1, 5, 10))
        out["recall"][arm] = {str(k): v for k, v in recall.items()}
    return out


def _fmt(x: float | None, pct: bool = True) -> str:
    if x is None:
        return "–"
    return f"{100 * x:.1f}%" if pct else f"{x:.3f}"


def _interval(bounds: Sequence[float] | None, pct: bool) -> str:
    return "–" if bounds is None else f"{_fmt(bounds[0], pct)}–{_fmt(bounds[1], pct)}"


def _plots(rows: Sequence[dict[str, Any]], out_dir: Path, stem: str) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    answerable = [bool(r["answerable"]) for r in rows]
    # One class only (a split with no negatives, say): no ROC to draw; the tables show none.
    both = len(set(answerable)) == 2
    files = []
    fig, (roc, rc) = plt.subplots(1, 2, figsize=(11, 4.5))
    for name in _policies(rows):
        scores = [float(r["policies"][name]["confidence"]) for r in rows]
        if both:
            curve = metrics.roc_curve(scores, answerable)
            roc.plot([p.far for p in curve], [1 - p.frr for p in curve], label=name)
        risk = metrics.risk_coverage(scores, [not a for a in answerable])
        rc.plot([p.coverage for p in risk.points], [p.risk for p in risk.points], label=name)
    roc.plot([0, 1], [0, 1], ":", color="grey")
    roc.set(
        xlabel="false acceptance rate",
        ylabel="answerable passed (1 - FRR)",
        title="ROC: answerable vs unanswerable",
    )
    rc.set(
        xlabel="coverage (share answered)",
        ylabel="risk (unanswerable among answered)",
        title="Risk-coverage",
    )
    if both:
        roc.legend(fontsize=8)
    else:
        roc.set_title("ROC: needs both answerable and unanswerable questions")
    fig.tight_layout()
    files.append(f"{stem}-roc.png")
    fig.savefig(out_dir / files[-1], dpi=110)
    plt.close(fig)

    primary = _policies(rows)[0]
    conf = [float(r["policies"][primary]["confidence"]) for r in rows]
    fig, (hist, rel) = plt.subplots(1, 2, figsize=(11, 4.5))
    for kind in sorted({str(r["kind"]) for r in rows}):
        hist.hist(
            [c for c, r in zip(conf, rows, strict=True) if r["kind"] == kind],
            bins=20,
            range=(0, 1),
            alpha=0.5,
            label=kind,
        )
    hist.set(xlabel=f"{primary} confidence", ylabel="questions", title="Confidence by kind")
    hist.legend(fontsize=8)
    clipped = [min(max(c, 0.0), 1.0) for c in conf]  # a raw score's diagram is only a sketch
    bins = metrics.reliability_bins(clipped, answerable, 10)
    xs = [b.mean_confidence for b in bins if b.count]
    ys = [b.frequency for b in bins if b.count]
    rel.plot([0, 1], [0, 1], ":", color="grey")
    rel.plot(xs, ys, "o-")
    rel.set(
        xlabel="mean confidence",
        ylabel="share answerable",
        title=f"Reliability of {primary} confidence",
    )
    fig.tight_layout()
    files.append(f"{stem}-confidence.png")
    fig.savefig(out_dir / files[-1], dpi=110)
    plt.close(fig)
    return files


def _split_label(split: str, rows: Sequence[dict[str, Any]]) -> str:
    if split != "all":
        return f"{split} split"
    present = {str(r.get("split")) for r in rows}
    if present == {UNSPLIT}:
        return "all questions (unsplit dataset)"
    if present == {"train"}:
        # Said plainly: a config calibrated on these rows is being scored on its own fit.
        return "all questions (train split only: no test questions)"
    return "all questions (" + " and ".join(sorted(present)) + ")"


def markdown(
    summary: dict[str, Any], rows: Sequence[dict[str, Any]], plots: Sequence[str], split: str
) -> str:
    lines = [
        f"### {summary['dataset']} — {_split_label(split, rows)}, n = {summary['n']}",
        "",
        "Questions: " + ", ".join(f"{k} {v}" for k, v in summary["counts"].items()) + ".",
        "",
        "| policy | AUROC | AUROC topic-absent | AUROC near-miss | FRR @ FAR≤5% | FRR @ FAR≤1% "
        "| FAR | FRR | refusal accuracy | wrong-evidence acceptance | ECE |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, p in summary["policies"].items():
        lines.append(
            f"| {name} | {_fmt(p['auroc'], False)} | {_fmt(p['auroc_topic_absent'], False)} "
            f"| {_fmt(p['auroc_near_miss'], False)} | {_fmt(p['frr_at_far_5'])} "
            f"| {_fmt(p['frr_at_far_1'])} | {_fmt(p.get('far'))} | {_fmt(p.get('frr'))} "
            f"| {_fmt(p.get('refusal_accuracy'))} | {_fmt(p.get('wrong_evidence_acceptance'))} "
            f"| {_fmt(p['ece'], False)} |"
        )
    lines += [
        "",
        "AUROC, FRR @ FAR and ECE are computed from each policy's confidence; FAR, FRR, refusal "
        "accuracy and wrong-evidence acceptance from its own PASS/REFUSE decisions "
        "(`top1_cosine` is a bare score, so it has no decisions).",
        "",
    ]
    with_ci = {n: p["ci95"] for n, p in summary["policies"].items() if "ci95" in p}
    if with_ci:
        lines += [
            f"95% bootstrap intervals ({summary['bootstrap_resamples']} resamples of the "
            "questions, drawn within each kind):",
            "",
            "| policy | AUROC | AUROC topic-absent | AUROC near-miss | FRR @ FAR≤5% "
            "| FRR @ FAR≤1% | ECE |",
            "|---|---|---|---|---|---|---|",
        ]
        for name, ci in with_ci.items():
            cells = [_interval(ci[k], k.startswith("frr")) for k in INTERVAL_KEYS]
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
        lines.append("")
    first: dict[str, Any] = next(iter(summary["policies"].values()), {})
    negatives = list(first.get("frr_at_far_by_kind", {}).get("5", {}))
    if len(negatives) > 1:
        lines += [
            "AUROC and FRR at FAR with each kind of negative alone (its own threshold per kind: "
            "what the "
            "confidence could do for a knowledge base whose unanswerable questions were all of "
            "that kind):",
            "",
            "| policy | "
            + " | ".join(
                f"{k.replace('_', '-')} {h}"
                for k in negatives
                for h in ("AUROC", *(f"FRR @ FAR≤{t}%" for t in FAR_TARGETS))
            )
            + " |",
            "|---|" + "---|" * (len(negatives) * (1 + len(FAR_TARGETS))),
        ]
        for name, p in summary["policies"].items():
            alone = p["frr_at_far_by_kind"]
            cells = [
                c
                for k in negatives
                for c in (
                    _fmt(p["auroc_by_kind"].get(k), False),
                    *(_fmt(alone[t].get(k)) for t in FAR_TARGETS),
                )
            ]
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
        lines.append("")
    lines += [
        "Pass rate by kind (own decisions):",
        "",
        "| policy | " + " | ".join(summary["counts"]) + " |",
        "|---|" + "---|" * len(summary["counts"]),
    ]
    for name, p in summary["policies"].items():
        if p.get("pass_rate_by_kind") is not None:
            cells = [_fmt(p["pass_rate_by_kind"].get(k)) for k in summary["counts"]]
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
    if "generator" in summary:
        g = summary["generator"]
        lines += [
            "",
            f"Answer accuracy with the configured generator: its answer from the top evidence "
            f"contains the reference for {_fmt(g['contains_reference'])} of {g['judged']} "
            f"judged answerable questions ({g['yes_no_skipped']} yes/no references not judged). "
            "Among the questions each policy *answered* (a passed unanswerable question is "
            "always wrong):",
            "",
            "| policy | answer accuracy |",
            "|---|---|",
        ]
        for name, p in summary["policies"].items():
            if p.get("answer_accuracy") is not None:
                lines.append(f"| {name} | {_fmt(p['answer_accuracy'])} |")
    lines += [
        "",
        "Recall of the gold passage (answerable questions):",
        "",
        "| arm | @1 | @5 | @10 |",
        "|---|---|---|---|",
    ]
    for arm, r in summary["recall"].items():
        lines.append(f"| {arm} | {_fmt(r['1'])} | {_fmt(r['5'])} | {_fmt(r['10'])} |")
    if rows and "seed000" in rows[0]["policies"]:
        scores = [100 * float(r["policies"]["seed000"]["confidence"]) for r in rows]
        sweep = metrics.threshold_sweep(
            scores, [bool(r["answerable"]) for r in rows], list(range(0, 101, 10))
        )
        lines += [
            "",
            "Seed 000's sweep of its answer gate (missed answers vs hallucinations):",
            "",
            "| gate | passed | missed | hallucinations | FAR | FRR |",
            "|---|---|---|---|---|---|",
        ]
        for row in sweep:
            lines.append(
                f"| {row.threshold:g} | {row.passed} | {row.missed} "
                f"| {row.hallucinations} | {_fmt(row.far)} | {_fmt(row.frr)} |"
            )
    lines += [""] + [f"![{p}]({p})" for p in plots]
    return "\n".join(lines) + "\n"


REFIT_MIN_PER_CLASS = 10
"""Train questions of each class below which seed 001 is not refit (its fit would be noise)."""


def _add_seed001_refit(rows: Sequence[dict[str, Any]]) -> None:
    """Seed 001 with a, b, c refit on the train split (the seed says to refit offline)."""
    from evals.calibrate import fit_seed001
    from evals.harness import rescore
    from gate_svc.policy import parse_policy

    train = [r for r in rows if r.get("split") == "train"]
    if not train or "seed001" not in rows[0]["policies"]:
        return  # nothing to fit on (an unsplit dataset): the report shows the hand seeds only
    pos = sum(1 for r in train if r["answerable"])
    if min(pos, len(train) - pos) < REFIT_MIN_PER_CLASS:
        # It used to vanish from the report without a word, or be fitted on three rows.
        print(
            f"seed001_refit left out: the train split has {pos} answerable and "
            f"{len(train) - pos} unanswerable questions; refitting needs at least "
            f"{REFIT_MIN_PER_CLASS} of each",
            file=sys.stderr,
        )
        return
    coef = fit_seed001(train)
    config = parse_policy(
        'version: "baseline-seed001-refit"\npolicy: seed001\n'
        f"seed001: {{a: {coef['a']}, b: {coef['b']}, c: {coef['c']}}}\n"
    )
    rescore(rows, config, "seed001_refit")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="candor eval report")
    ap.add_argument("results", type=Path)
    ap.add_argument(
        "--split",
        default=None,
        choices=["train", "test", "all"],
        help="default: test, or all questions when there are no test questions",
    )
    ap.add_argument("--dataset", default="")
    ap.add_argument("--out", type=Path, default=None, help="Markdown file (plots beside it)")
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument(
        "--policy",
        type=Path,
        action="append",
        default=[],
        help="also decide with this config from the saved signals (not seed000)",
    )
    ap.add_argument(
        "--bootstrap",
        type=int,
        default=1000,
        metavar="N",
        help="resamples for the 95%% intervals of every threshold config's threshold-free "
        "statistics (0: none)",
    )
    args = ap.parse_args(argv)
    for flag, path in (("--out", args.out), ("--json", args.json)):
        if path is not None and path.is_dir():
            ap.error(f"{flag} {path} is a directory: name the file to write")
    if args.bootstrap < 0:
        ap.error("--bootstrap must be >= 0")
    rows = read_rows(args.results, need=("answerable", "signals", "policies"))
    _add_seed001_refit(rows)
    for label, config in config_columns(args.policy).items():
        from evals.harness import rescore

        if label in rows[0]["policies"]:
            # The same version should be the same config: `eval run` decided it already. A file
            # that decides the rows otherwise reuses a version for other content.
            check = f"{label}#given"
            rescore(rows, config, check)
            differs = [
                r["id"]
                for r in rows
                if abs(r["policies"][check]["confidence"] - r["policies"][label]["confidence"])
                > 1e-9
            ]
            for r in rows:
                del r["policies"][check]
            if differs:
                raise SystemExit(
                    f"{label}: the given file decides {len(differs)} rows otherwise than the "
                    f"config these rows were run with (first: {differs[0]}); one version must "
                    "name one config"
                )
            print(f"candor: {label} is in the rows already; kept", file=sys.stderr)
            continue
        rescore(rows, config, label)
    split = args.split or ("test" if any(r.get("split") == "test" for r in rows) else "all")
    if split != "all":
        rows = [r for r in rows if r.get("split") == split]
    if not rows:
        raise SystemExit(f"no rows in split {split!r}")
    summary = summarize(rows, args.dataset or args.results.stem, _configs(rows), args.bootstrap)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(summary, indent=2))
    plots: list[str] = []
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        plots = _plots(rows, args.out.parent, args.out.stem)
    text = markdown(summary, rows, plots, split)
    if args.out:
        args.out.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
