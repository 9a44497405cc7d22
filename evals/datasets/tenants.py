"""``candor eval prepare tenants DATASET --per-tenant N --out DIR``: the same data as many small
tenants.

A gate fitted on one large corpus meets tenants of a handful of documents in production, where
every score that counts rivals or weighs a term by its rarity among the tenant's own passages
reads differently. This deals a dataset's passages, shuffled with the seed, into tenants of
``N`` passages (the last may hold fewer) and asks every question where its evidence is:

- an answerable question in the tenant holding most of its gold passages (ties: the first
  listed); gold passages dealt elsewhere are dropped from its ``gold_ids``, as no retrieval in
  its tenant could find them;
- a near miss whose ``meta`` names its answer-redacted passage (``near_miss_id``, as the
  HaluEval builder writes) beside that passage, so the on-topic evidence stays in reach;
- any other negative in a tenant drawn with the seed.

Splits, answers, kinds and ``meta`` are kept, so a policy fitted on the source's train split is
reported on the same test questions. A dataset that already names tenants is refused: dealing
it again would hide the tenants its author chose.
"""

from __future__ import annotations

import argparse
import random
import sys
from collections import Counter
from dataclasses import replace
from pathlib import Path

from evals.datasets.builder import derived_manifest, write_built
from evals.datasets.format import Dataset, Passage, Question, load_dataset

TENANT_PREFIX = "part-"


def deal(dataset: Dataset, per_tenant: int, seed: int) -> tuple[list[Passage], list[Question]]:
    """The corpus dealt into tenants of ``per_tenant`` passages and every question given the
    tenant its evidence is in (see the module doc)."""
    if per_tenant < 1:
        raise ValueError("per_tenant must be at least 1")
    named = sum(p.tenant is not None for p in dataset.corpus) + sum(
        q.tenant is not None for q in dataset.questions
    )
    if named:
        raise ValueError(f"{named} passages or questions already name a tenant")
    order = list(range(len(dataset.corpus)))
    rng = random.Random(seed)
    rng.shuffle(order)
    n_tenants = max(1, -(-len(order) // per_tenant))
    width = len(str(n_tenants))
    tenant_of: dict[str, str] = {}
    for slot, i in enumerate(order):
        tenant_of[dataset.corpus[i].id] = f"{TENANT_PREFIX}{slot // per_tenant + 1:0{width}d}"
    corpus = [replace(p, tenant=tenant_of[p.id]) for p in dataset.corpus]
    tenants = sorted(set(tenant_of.values()))
    questions = []
    for q in dataset.questions:
        if q.gold_ids:
            counts = Counter(tenant_of[g] for g in q.gold_ids)
            best = max(counts.values())
            tenant = next(tenant_of[g] for g in q.gold_ids if counts[tenant_of[g]] == best)
            gold = tuple(g for g in q.gold_ids if tenant_of[g] == tenant)
            questions.append(replace(q, tenant=tenant, gold_ids=gold))
            continue
        near = q.meta.get("near_miss_id") if q.meta else None
        beside = tenant_of.get(near) if isinstance(near, str) else None
        questions.append(replace(q, tenant=beside or rng.choice(tenants)))
    return corpus, questions


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("dataset", type=Path, help="a dataset directory in the generic format")
    ap.add_argument("--per-tenant", type=int, required=True, help="passages per tenant")
    ap.add_argument("--out", type=Path, required=True, help="where to write the dealt copy")
    ap.add_argument("--seed", type=int, default=7, help="default 7")


def run(args: argparse.Namespace) -> int:
    if args.per_tenant < 1:
        raise SystemExit("--per-tenant must be at least 1")
    if args.out.resolve() == args.dataset.resolve():
        raise SystemExit("--out must be a new directory: the source dataset is not rewritten")
    ds = load_dataset(args.dataset, partial_split=True)
    try:
        corpus, questions = deal(ds, args.per_tenant, args.seed)
    except ValueError as exc:
        raise SystemExit(
            f"{args.dataset}: {exc}; this builder deals an untenanted dataset"
        ) from None
    dropped = sum(
        len(a.gold_ids) - len(b.gold_ids) for a, b in zip(ds.questions, questions, strict=True)
    )
    manifest = derived_manifest(
        f"{args.dataset.name} in tenants of {args.per_tenant}",
        args.dataset,
        ds.manifest,
        args.seed,
        per_tenant=args.per_tenant,
        tenants=len({p.tenant for p in corpus}),
        gold_ids_dropped=dropped,
    )
    write_built(args.out, corpus, questions, manifest)
    print(
        f"wrote {args.out}: {manifest['tenants']} tenants, {dropped} gold ids dealt away",
        file=sys.stderr,
    )
    return 0
