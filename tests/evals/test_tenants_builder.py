"""`candor eval prepare tenants`: a dataset dealt into small tenants, each question asked where
its evidence is."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from evals.datasets import prepare
from evals.datasets.format import (
    Dataset,
    Passage,
    Question,
    check_tenants,
    load_dataset,
    write_dataset,
)
from evals.datasets.tenants import deal


def _dataset() -> Dataset:
    corpus = tuple(Passage(f"p{i}", f"title {i}", f"text {i}") for i in range(23))
    questions = (
        Question("a0", "one gold?", True, ("p3",), "answerable", split="test", answer="x"),
        # Two gold passages: kept where most of them are, the others dealt away.
        Question("a1", "three golds?", True, ("p1", "p2", "p9"), "answerable", split="train"),
        Question("n0", "near?", False, (), "near_miss", split="test", meta={"near_miss_id": "p17"}),
        Question("t0", "absent?", False, (), "topic_absent", split="train"),
        Question("t1", "absent too?", False, (), "topic_absent", split="test"),
    )
    return Dataset(corpus, questions)


def test_passages_are_dealt_into_tenants_of_the_size_asked() -> None:
    corpus, _ = deal(_dataset(), per_tenant=5, seed=1)
    sizes = sorted(Counter(p.tenant for p in corpus).values())
    assert sizes == [3, 5, 5, 5, 5]
    assert [p.id for p in corpus] == [f"p{i}" for i in range(23)]  # order and ids kept


def test_every_question_is_asked_where_its_evidence_is() -> None:
    ds = _dataset()
    for seed in range(6):
        corpus, questions = deal(ds, per_tenant=4, seed=seed)
        tenant_of = {p.id: p.tenant for p in corpus}
        q = {x.id: x for x in questions}
        assert q["a0"].tenant == tenant_of["p3"] and q["a0"].gold_ids == ("p3",)
        assert q["a0"].split == "test" and q["a0"].answer == "x"
        kept = q["a1"].gold_ids
        assert kept and all(tenant_of[g] == q["a1"].tenant for g in kept)
        others = [g for g in ("p1", "p2", "p9") if g not in kept]
        assert all(tenant_of[g] != q["a1"].tenant for g in others)
        # The tenant holding most of them wins.
        assert len(kept) >= max(Counter(tenant_of[g] for g in ("p1", "p2", "p9")).values())
        assert q["n0"].tenant == tenant_of["p17"]
        assert q["t0"].tenant in set(tenant_of.values())
        check_tenants(Dataset(tuple(corpus), tuple(questions)), "default")


def test_the_deal_is_seeded() -> None:
    ds = _dataset()
    assert deal(ds, 4, seed=3) == deal(ds, 4, seed=3)
    assert deal(ds, 4, seed=3)[0] != deal(ds, 4, seed=4)[0]


def test_one_tenant_per_passage_and_one_for_all() -> None:
    ds = _dataset()
    alone, _ = deal(ds, per_tenant=1, seed=0)
    assert len({p.tenant for p in alone}) == 23
    together, questions = deal(ds, per_tenant=100, seed=0)
    assert {p.tenant for p in together} == {q.tenant for q in questions} == {"part-1"}


def test_refuses_a_dataset_that_names_tenants_and_a_size_below_one() -> None:
    ds = _dataset()
    named = Dataset((Passage("p0", "", "x", tenant="acme"), *ds.corpus[1:]), ds.questions)
    with pytest.raises(ValueError, match="already name a tenant"):
        deal(named, 5, 0)
    with pytest.raises(ValueError, match="at least 1"):
        deal(ds, 0, 0)


def test_cli_writes_a_loadable_dataset_with_its_manifest(tmp_path: Path) -> None:
    ds = _dataset()
    src = tmp_path / "src"
    write_dataset(src, ds.corpus, ds.questions)
    out = tmp_path / "dealt"
    assert prepare.main(["tenants", str(src), "--per-tenant", "5", "--out", str(out)]) == 0
    dealt = load_dataset(out)
    check_tenants(dealt, "default")
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["tenants"] == 5 and manifest["per_tenant"] == 5 and manifest["seed"] == 7
    assert manifest["gold_ids_dropped"] == 3 - len(
        next(q for q in dealt.questions if q.id == "a1").gold_ids
    )
    with pytest.raises(SystemExit, match="already name a tenant"):
        prepare.main(["tenants", str(out), "--per-tenant", "5", "--out", str(tmp_path / "again")])
