"""``candor eval prepare split DATASET --out DIR``: a seeded train/test split for your own data.

``candor calibrate`` fits on the train split only and reports belong on the test split, but a
hand-labelled dataset usually comes without one. This writes a copy whose questions carry a
``split``, drawn so that the test split cannot be fitted through the back door:

- questions that share a gold passage, or ask the same thing in the same words, form one group,
  and a group lands whole in one split (a passage's questions fitted on and then reported on
  would flatter the report);
- groups are shuffled with the seed and dealt kind by kind (a group counts as its commonest
  kind), each to whichever split is further below its share, so both splits keep the
  dataset's mix of answerable, topic-absent and near-miss questions.

The corpus is copied unchanged. A dataset that already has splits is refused unless
``--resplit`` says to draw them again.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from collections import Counter
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from evals.datasets.builder import (
    derived_manifest,
    first_further_below,
    linked_groups,
    write_built,
)
from evals.datasets.format import KINDS, Question, Split, load_dataset


def _groups(questions: Sequence[Question]) -> list[list[int]]:
    """Indices of the questions, grouped by shared gold passages or identical wording."""
    return linked_groups(
        [
            [*(("gold", g) for g in q.gold_ids), ("text", " ".join(q.question.lower().split()))]
            for q in questions
        ]
    )


def assign_splits(questions: Sequence[Question], test_fraction: float, seed: int) -> list[Question]:
    """The questions with a ``split`` each, in their original order (see the module doc)."""
    return _deal(questions, _groups(questions), test_fraction, seed)


def _deal(
    questions: Sequence[Question], groups: list[list[int]], test_fraction: float, seed: int
) -> list[Question]:
    if not 0.0 < test_fraction < 1.0:
        raise ValueError("test_fraction must be between 0 and 1")
    groups = list(groups)
    random.Random(seed).shuffle(groups)
    by_kind: dict[str, list[list[int]]] = {}
    for group in groups:
        counts = Counter(questions[i].kind for i in group)
        # Ties go to the kind listed first in the format (answerable, then the negatives).
        kind = max(counts, key=lambda k: (counts[k], -KINDS.index(k)))
        by_kind.setdefault(kind, []).append(group)
    split: dict[int, Split] = {}
    for kind in KINDS:
        test = train = 0
        for group in by_kind.get(kind, []):
            to_test = first_further_below(test, train, len(group), test_fraction)
            for i in group:
                split[i] = "test" if to_test else "train"
            if to_test:
                test += len(group)
            else:
                train += len(group)
    return [replace(q, split=split[i]) for i, q in enumerate(questions)]


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("dataset", type=Path, help="a dataset directory in the generic format")
    ap.add_argument("--out", type=Path, required=True, help="where to write the split copy")
    ap.add_argument("--seed", type=int, default=0, help="default 0")
    ap.add_argument(
        "--test-fraction",
        type=float,
        default=0.5,
        help="share of the questions in the test split, by whole groups (default 0.5)",
    )
    ap.add_argument(
        "--resplit", action="store_true", help="draw new splits even if the dataset has some"
    )


def run(args: argparse.Namespace) -> int:
    if not 0.0 < args.test_fraction < 1.0:
        raise SystemExit("--test-fraction must be between 0 and 1")
    if args.out.resolve() == args.dataset.resolve():
        raise SystemExit("--out must be a new directory: the source dataset is not rewritten")
    ds = load_dataset(args.dataset, partial_split=True)  # drawing them all again is the cure
    already = sum(q.split is not None for q in ds.questions)
    if already and not args.resplit:
        raise SystemExit(
            f"{args.dataset}: {already} of {len(ds.questions)} questions already have a split; "
            "pass --resplit to draw new ones"
        )
    groups = _groups(ds.questions)
    questions = _deal(ds.questions, groups, args.test_fraction, args.seed)
    counts = Counter(f"{q.split}:{q.kind}" for q in questions)
    manifest = derived_manifest(
        f"{args.dataset.name} split",
        args.dataset,
        ds.manifest,
        args.seed,
        test_fraction=args.test_fraction,
        groups=len(groups),
        split_x_kind=dict(sorted(counts.items())),
    )
    write_built(args.out, ds.corpus, questions, manifest)
    print(f"wrote {args.out}: {json.dumps(manifest['split_x_kind'])}", file=sys.stderr)
    for kind in sorted({q.kind for q in questions}):
        lacking = [s for s in ("train", "test") if not counts[f"{s}:{kind}"]]
        if lacking:
            # Too few groups of this kind to deal both ways: calibrate or the report will lack it.
            print(
                f"warning: no {kind} questions in the {' or '.join(lacking)} split; "
                "label more of them (in separate passages) for both splits to have some",
                file=sys.stderr,
            )
    return 0
