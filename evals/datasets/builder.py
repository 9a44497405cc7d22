"""What every public-dataset builder shares: its output directory, writing, and common options."""

from __future__ import annotations

import argparse
from collections.abc import Hashable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from candor.file_digest import sha256_file
from evals.datasets.format import (
    CORPUS_FILE,
    MANIFEST_FILE,
    QUESTIONS_FILE,
    Passage,
    Question,
    write_dataset,
    write_manifest,
)

DEFAULT_OUT_DIR = Path(__file__).resolve().parents[2] / ".cache" / "datasets"


def default_out_dir(name: str, limit: int | None, seed: int, default_seed: int = 0) -> Path:
    """``.cache/datasets/<name>[-n<limit>][-s<seed>]`` under the repository."""
    if limit is not None:
        name += f"-n{limit}"
    if seed != default_seed:
        name += f"-s{seed}"
    return DEFAULT_OUT_DIR / name


def within_limit(sizes: Sequence[int], limit: int | None) -> list[int]:
    """Positions of the groups (of ``sizes`` questions, in shuffled order) kept whole within
    ``limit`` questions; every position when there is no limit."""
    if limit is None:
        return list(range(len(sizes)))
    kept, total = [], 0
    for i, size in enumerate(sizes):
        if total + size <= limit:
            kept.append(i)
            total += size
    return kept


def first_further_below(first: int, second: int, size: int, share: float) -> bool:
    """Whether bucket one (target: ``share`` of the questions) is further below its target than
    bucket two once a group of ``size`` more questions is counted; balances splits and halves
    group by group."""
    total = first + second + size
    return share * total - first > (1 - share) * total - second


def linked_groups(keys: Sequence[Iterable[Hashable]]) -> list[list[int]]:
    """The items (by index) grouped so that any two sharing a key, directly or through others,
    are in one group: each group ascending, the groups in order of their first item."""
    parent = list(range(len(keys)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    owner: dict[Hashable, int] = {}
    for i, item_keys in enumerate(keys):
        for key in item_keys:
            a, b = root(i), root(owner.setdefault(key, i))
            if a != b:
                parent[max(a, b)] = min(a, b)
    members: dict[int, list[int]] = {}
    for i in range(len(keys)):
        members.setdefault(root(i), []).append(i)
    return list(members.values())


def write_built(
    out: Path,
    corpus: Sequence[Passage],
    questions: Sequence[Question],
    manifest: Mapping[str, Any],
) -> Path:
    """Write a built dataset, its manifest recording the sha256 of both written files."""
    (out / MANIFEST_FILE).unlink(missing_ok=True)  # no stale manifest beside new data
    write_dataset(out, corpus, questions)
    outputs = {name: sha256_file(out / name) for name in (CORPUS_FILE, QUESTIONS_FILE)}
    write_manifest(out, {**manifest, "outputs": outputs})
    return out


def derived_manifest(
    name: str, source: Path, source_manifest: Mapping[str, Any] | None, seed: int, **details: Any
) -> dict[str, Any]:
    """The manifest of a copy made from another dataset: what it came from, and how."""
    return {
        "name": name,
        "source": str(source),
        "source_manifest": dict(source_manifest or {}),
        "seed": seed,
        **details,
    }


def add_common_arguments(
    ap: argparse.ArgumentParser,
    *,
    seed: int,
    test_fraction: float,
    source_count: str,
    source_help: str,
    cache_dir: Path,
) -> None:
    """``--out --seed --limit --test-fraction --source --cache-dir``, as every builder has them."""
    ap.add_argument(
        "--out", type=Path, default=None, help="output directory (default: .cache/datasets/...)"
    )
    ap.add_argument("--seed", type=int, default=seed, help=f"default {seed}")
    ap.add_argument(
        "--limit",
        type=int,
        default=None,
        help=f"use N source questions (default: all {source_count})",
    )
    ap.add_argument(
        "--test-fraction",
        type=float,
        default=test_fraction,
        help=f"share of the questions in the test split, by whole groups (default {test_fraction})",
    )
    ap.add_argument("--source", type=Path, default=None, help=source_help)
    ap.add_argument("--cache-dir", type=Path, default=cache_dir, help="download cache")
