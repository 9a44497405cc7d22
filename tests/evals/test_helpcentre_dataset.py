"""The sample help centre as a dataset: valid in the generic format, gold ids resolvable."""

from __future__ import annotations

from pathlib import Path

from evals.datasets import helpcentre
from evals.datasets.format import load_dataset
from evals.datasets.prepare import main


def test_builds_a_valid_dataset_with_every_gold_article(tmp_path: Path) -> None:
    assert main(["helpcentre", "--out", str(tmp_path / "hc")]) == 0
    ds = load_dataset(tmp_path / "hc")
    ids = {p.id for p in ds.corpus}
    assert len(ds.corpus) == len(list(helpcentre.SAMPLES.glob("[0-9]*.md")))
    assert sum(q.answerable for q in ds.questions) == 20
    assert sum(not q.answerable for q in ds.questions) == 15
    for q in ds.questions:
        assert set(q.gold_ids) <= ids
        assert bool(q.gold_ids) == q.answerable


def test_titles_come_from_the_first_heading_and_are_not_repeated_in_the_text() -> None:
    by_id = {p.id: p for p in helpcentre.passages()}
    refunds = by_id["05-refunds-for-unused-labels"]
    assert refunds.title == "Refunds for Unused Labels"
    assert not refunds.text.startswith("#")
    assert "30 days" in refunds.text
