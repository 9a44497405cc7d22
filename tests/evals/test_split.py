"""`candor eval prepare split`: a seeded, grouped, kind-balanced split of a dataset of your own."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import replace
from pathlib import Path

import pytest

from evals.datasets import prepare
from evals.datasets.format import (
    DatasetFormatError,
    Passage,
    Question,
    load_dataset,
    write_dataset,
)
from evals.datasets.split import assign_splits


def _questions() -> list[Question]:
    out = []
    for i in range(40):  # 40 answerable: passages p0..p19, two questions each
        out.append(Question(f"a{i}", f"what about thing {i}?", True, (f"p{i // 2}",), "answerable"))
    for i in range(20):
        out.append(Question(f"t{i}", f"who is person {i}?", False, (), "topic_absent"))
    for i in range(12):
        out.append(Question(f"n{i}", f"when did event {i} happen?", False, (), "near_miss"))
    # The same wording twice, differently spaced and cased: one group.
    out.append(Question("dup1", "How do I reset it?", False, (), "topic_absent"))
    out.append(Question("dup2", "how do  I reset IT?", False, (), "topic_absent"))
    # Two gold passages chain a and b into one group.
    out.append(Question("x1", "x one", True, ("p0", "q1"), "answerable"))
    out.append(Question("x2", "x two", True, ("q1",), "answerable"))
    return out


def test_questions_sharing_a_passage_or_their_wording_land_together() -> None:
    for seed in range(5):
        got = {q.id: q.split for q in assign_splits(_questions(), 0.5, seed)}
        for i in range(20):
            assert got[f"a{2 * i}"] == got[f"a{2 * i + 1}"]
        assert got["dup1"] == got["dup2"]
        assert got["x1"] == got["x2"] == got["a0"] == got["a1"]


def test_split_keeps_order_fields_and_balance_and_is_seeded() -> None:
    qs = _questions()
    a = assign_splits(qs, 0.5, seed=3)
    assert [replace(q, split=None) for q in a] == qs
    assert a == assign_splits(qs, 0.5, seed=3)
    assert a != assign_splits(qs, 0.5, seed=4)
    per_kind = Counter((q.kind, q.split) for q in a)
    for kind in ("answerable", "topic_absent", "near_miss"):
        test, train = per_kind[(kind, "test")], per_kind[(kind, "train")]
        # Dealt group by group: within one group (answerable groups hold 2-4) of half.
        assert abs(test - train) <= 4, (kind, test, train)
    quarter = Counter(q.split for q in assign_splits(qs, 0.25, seed=0))
    assert quarter["test"] == pytest.approx(0.25 * len(qs), abs=4)
    with pytest.raises(ValueError):
        assign_splits(qs, 1.0, seed=0)


def _write(tmp: Path, questions: list[Question]) -> Path:
    corpus = [Passage(f"p{i}", f"T{i}", f"text {i}") for i in range(20)]
    corpus.append(Passage("q1", "Q", "text q"))
    write_dataset(tmp / "mine", corpus, questions)
    return tmp / "mine"


def test_cli_writes_a_split_copy_and_refuses_to_overwrite_splits(tmp_path: Path) -> None:
    src = _write(tmp_path, _questions())
    out = tmp_path / "split"
    assert prepare.main(["split", str(src), "--out", str(out), "--seed", "1"]) == 0
    ds, original = load_dataset(out), load_dataset(src)
    assert ds.corpus == original.corpus
    assert {q.split for q in ds.questions} == {"train", "test"}
    assert [replace(q, split=None) for q in ds.questions] == list(original.questions)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["seed"] == 1
    assert sum(manifest["split_x_kind"].values()) == len(ds.questions)
    assert manifest["split_x_kind"] == dict(
        sorted(Counter(f"{q.split}:{q.kind}" for q in ds.questions).items())
    )
    again = tmp_path / "again"
    with pytest.raises(SystemExit, match="already have a split"):
        prepare.main(["split", str(out), "--out", str(again)])
    assert not again.exists()
    assert prepare.main(["split", str(out), "--out", str(again), "--resplit"]) == 0
    # Split in part: other commands refuse it and name this cure, which must then work.
    partly = [replace(q, split=None) if i % 3 else q for i, q in enumerate(ds.questions)]
    write_dataset(tmp_path / "partly", ds.corpus, partly, {})
    with pytest.raises(DatasetFormatError, match="--resplit"):
        load_dataset(tmp_path / "partly")
    cured = tmp_path / "cured"
    assert prepare.main(["split", str(tmp_path / "partly"), "--out", str(cured), "--resplit"]) == 0
    assert {q.split for q in load_dataset(cured).questions} == {"train", "test"}
    with pytest.raises(SystemExit, match="new directory"):
        prepare.main(["split", str(src), "--out", str(src)])
    with pytest.raises(SystemExit, match="between 0 and 1"):
        prepare.main(["split", str(src), "--out", str(tmp_path / "x"), "--test-fraction", "0"])


def test_a_kind_that_reaches_one_split_only_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    one_near_miss = [q for q in _questions() if q.kind != "near_miss"]
    one_near_miss.append(Question("n0", "when did it happen?", False, (), "near_miss"))
    src = _write(tmp_path, one_near_miss)
    assert prepare.main(["split", str(src), "--out", str(tmp_path / "split")]) == 0
    err = capsys.readouterr().err
    assert "warning: no near_miss questions in the" in err
    assert "warning: no answerable" not in err and "warning: no topic_absent" not in err
