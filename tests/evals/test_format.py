"""The generic dataset format: round trip, and every problem reported with its line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from evals.datasets.format import (
    DatasetFormatError,
    Passage,
    Question,
    check_tenants,
    load_corpus,
    load_dataset,
    load_questions,
    write_dataset,
)


def _write(path: Path, rows: list[Any]) -> None:
    path.write_text(
        "".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows), "utf-8"
    )


CORPUS = [
    {"id": "d1", "title": "Refunds", "text": "Refunds take 30 days."},
    {"id": "d2", "title": "", "text": "Labels are printed.", "tenant": "acme"},
]
QUESTIONS = [
    {
        "id": "q1",
        "question": "How long do refunds take?",
        "answerable": True,
        "gold_ids": ["d1"],
        "split": "train",
    },
    {
        "id": "q2",
        "question": "Do you ship to Mars?",
        "answerable": False,
        "gold_ids": [],
        "kind": "topic_absent",
        "split": "test",
        "meta": {"note": "x"},
    },
    {
        "id": "q3",
        "question": "Gift card refunds?",
        "answerable": False,
        "gold_ids": [],
        "split": "train",
    },
]


def test_round_trip_and_defaults(tmp_path: Path) -> None:
    _write(tmp_path / "corpus.jsonl", CORPUS)
    _write(tmp_path / "questions.jsonl", [*QUESTIONS, ""])  # a blank line is fine
    ds = load_dataset(tmp_path)
    assert ds.manifest is None
    assert ds.corpus[1] == Passage(id="d2", title="", text="Labels are printed.", tenant="acme")
    q1, q2, q3 = ds.questions
    assert (q1.kind, q1.split, q1.gold_ids, q1.answer) == ("answerable", "train", ("d1",), None)
    assert (q2.kind, q2.split, dict(q2.meta)) == ("topic_absent", "test", {"note": "x"})
    assert q3.kind == "unanswerable"
    assert [q.id for q in ds.split("test")] == ["q2"]
    assert len(ds.split(None)) == 3
    assert ds.passages_by_id()["d1"].title == "Refunds"

    out = write_dataset(tmp_path / "copy", ds.corpus, ds.questions, {"name": "t"})
    again = load_dataset(out)
    assert again.corpus == ds.corpus
    assert again.questions == ds.questions
    assert [q.meta for q in again.questions] == [q.meta for q in ds.questions]
    assert again.manifest == {"name": "t"}
    first = json.loads((out / "questions.jsonl").read_text().splitlines()[0])
    assert first == {**QUESTIONS[0], "kind": "answerable"}


def test_a_dataset_split_in_part_is_refused_and_one_without_splits_loads(tmp_path: Path) -> None:
    # Reports and calibrate read one split: the questions without one were silently left out
    # (an outside probe: "test split, n = 21" for 85 questions).
    _write(tmp_path / "corpus.jsonl", CORPUS)
    unsplit = [{k: v for k, v in q.items() if k != "split"} for q in QUESTIONS]
    _write(tmp_path / "questions.jsonl", [QUESTIONS[0], *unsplit[1:]])
    with pytest.raises(DatasetFormatError) as err:
        load_dataset(tmp_path)
    assert f"{tmp_path / 'questions.jsonl'}:2: 2 of 3 questions have no 'split'" in str(err.value)
    _write(tmp_path / "questions.jsonl", unsplit)
    ds = load_dataset(tmp_path)
    assert [q.split for q in ds.questions] == [None, None, None]
    assert len(ds.split(None)) == 3 and ds.split("test") == []


def test_every_problem_is_reported_with_its_line(tmp_path: Path) -> None:
    _write(
        tmp_path / "corpus.jsonl",
        [
            CORPUS[0],
            "{not json",
            {"id": "d1", "title": "dup", "text": "again"},
            {"id": "d3", "text": ""},
            {"id": "d4", "title": None, "text": "x", "txt": "typo"},
            [1, 2],
        ],
    )
    _write(
        tmp_path / "questions.jsonl",
        [
            {"id": "q1", "question": "ok?", "answerable": True, "gold_ids": ["nope"]},
            {"id": "q2", "question": "?", "answerable": True, "gold_ids": []},
            {"id": "q3", "question": "?", "answerable": "yes", "gold_ids": []},
            {"id": "q4", "question": "?", "answerable": False, "gold_ids": ["d1"]},
            {
                "id": "q5",
                "question": "?",
                "answerable": False,
                "gold_ids": [],
                "kind": "answerable",
            },
            {"id": "q6", "question": "?", "answerable": False, "gold_ids": [], "split": "dev"},
            {"id": "q7", "question": "", "answerable": False, "gold_ids": [], "kind": "odd"},
            {"id": "q1", "question": "?", "answerable": False, "gold_ids": [], "gold_id": []},
            {"id": "q2", "question": "dup?", "answerable": False, "gold_ids": []},
        ],
    )
    with pytest.raises(DatasetFormatError) as err:
        load_dataset(tmp_path)
    problems = err.value.problems
    corpus, questions = str(tmp_path / "corpus.jsonl"), str(tmp_path / "questions.jsonl")
    expected = [
        f"{corpus}:2: invalid JSON (Expecting property name",
        f"{corpus}:3: duplicate passage id 'd1' (first at {corpus}:1)",
        f"{corpus}:4: 'text' must be a non-empty string",
        f"{corpus}:4: 'title' must be a string",
        f"{corpus}:5: unknown field(s) ['txt'] (allowed: id, meta, question, source_kind, "
        "tenant, text, title, uri;",
        f"{corpus}:5: 'title' must be a string",
        f"{corpus}:6: expected a JSON object, got list",
        f"{questions}:1: gold id(s) ['nope'] not in corpus.jsonl",
        f"{questions}:2: an answerable question needs at least one gold id",
        f"{questions}:3: 'answerable' must be true or false",
        f"{questions}:4: an unanswerable question must have empty 'gold_ids'",
        f"{questions}:5: 'kind' 'answerable' contradicts 'answerable': false",
        f"{questions}:6: 'split' must be 'train' or 'test' when given",
        f"{questions}:7: 'question' must be a non-empty string",
        f"{questions}:7: 'kind' must be one of",
        f"{questions}:8: unknown field(s) ['gold_id']",
        f"{questions}:8: duplicate question id 'q1' (first at {questions}:1)",
        f"{questions}:9: duplicate question id 'q2' (first at {questions}:2)",
    ]
    assert len(problems) == len(expected), problems
    for prefix, problem in zip(expected, problems, strict=True):
        assert problem.startswith(prefix), (prefix, problem)
    assert str(err.value).startswith(f"{len(expected)} problem(s) in dataset:")


def test_separate_loaders_and_missing_files(tmp_path: Path) -> None:
    _write(tmp_path / "corpus.jsonl", CORPUS)
    assert [p.id for p in load_corpus(tmp_path / "corpus.jsonl")] == ["d1", "d2"]
    _write(tmp_path / "q.jsonl", [QUESTIONS[0]])
    assert load_questions(tmp_path / "q.jsonl")[0] == Question(
        id="q1",
        question="How long do refunds take?",
        answerable=True,
        gold_ids=("d1",),
        kind="answerable",
        split="train",
    )
    with pytest.raises(DatasetFormatError, match=r"questions\.jsonl: file not found"):
        load_dataset(tmp_path)
    (tmp_path / "questions.jsonl").write_text("")
    (tmp_path / "manifest.json").write_text("[1]")
    with pytest.raises(DatasetFormatError, match="expected a JSON object"):
        load_dataset(tmp_path)


def test_a_byte_order_mark_is_not_part_of_the_first_row_and_bad_bytes_name_their_line(
    tmp_path: Path,
) -> None:
    _write(tmp_path / "corpus.jsonl", CORPUS)
    _write(tmp_path / "questions.jsonl", QUESTIONS)
    for name in ("corpus.jsonl", "questions.jsonl"):
        path = tmp_path / name
        path.write_bytes(b"\xef\xbb\xbf" + path.read_bytes())
    ds = load_dataset(tmp_path)
    assert [p.id for p in ds.corpus] == ["d1", "d2"] and len(ds.questions) == 3
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_bytes(corpus.read_bytes().replace(b"Labels", b"Lab\xe9ls"))
    with pytest.raises(DatasetFormatError, match=r"corpus\.jsonl:2: not UTF-8"):
        load_dataset(tmp_path)


def test_a_question_is_asked_in_its_tenant_and_its_gold_must_be_there(tmp_path: Path) -> None:
    # Passages are indexed under their tenant: a question asked elsewhere can never find its
    # gold passage, and every policy was scored as refusing an answerable question.
    asked = {**QUESTIONS[0], "id": "q4", "gold_ids": ["d2"], "tenant": "acme"}
    _write(tmp_path / "corpus.jsonl", CORPUS)
    _write(tmp_path / "questions.jsonl", [asked])
    [q] = load_dataset(tmp_path).questions
    assert q.tenant == "acme"
    assert load_dataset(write_dataset(tmp_path / "copy", load_dataset(tmp_path).corpus, [q], {}))

    _write(tmp_path / "questions.jsonl", [{k: v for k, v in asked.items() if k != "tenant"}])
    untagged = load_dataset(tmp_path)  # the run decides the default tenant, so it checks
    with pytest.raises(DatasetFormatError, match="give the question that 'tenant'") as err:
        check_tenants(untagged, "eval")
    assert f"{tmp_path / 'questions.jsonl'}: question 'q4'" in str(err.value)
    # A passage tagged with the run's own tenant is where an untagged question is asked.
    check_tenants(untagged, "acme")


def test_line_separators_inside_json_strings_are_text_not_line_breaks(tmp_path: Path) -> None:
    # JSON allows U+2028/U+2029/U+0085 raw in a string, and our writer leaves them so; a reader
    # that split lines at them refused a dataset it wrote itself.
    text = "First line\u2028second\u2029third\x85fourth."
    out = write_dataset(
        tmp_path / "ds",
        [Passage("d1", "T", text)],
        [Question("q1", "Which line?", True, ("d1",), "answerable")],
        {},
    )
    (out / "manifest.json").write_text("\ufeff" + json.dumps({"name": "bom"}), "utf-8")
    ds = load_dataset(out)
    assert ds.corpus[0].text == text and ds.manifest == {"name": "bom"}


def test_unreadable_inputs_are_problems_not_tracebacks(tmp_path: Path) -> None:
    _write(tmp_path / "corpus.jsonl", ['{"id": "d1", "title": "", "text": "\\ud800"}'])
    _write(tmp_path / "questions.jsonl", ["[" * 100_000 + "]" * 100_000])
    with pytest.raises(DatasetFormatError) as err:
        load_dataset(tmp_path)
    text = str(err.value)
    assert "corpus.jsonl:1: a lone surrogate" in text
    assert "questions.jsonl:1: JSON nested too deeply" in text
    # A corpus that is not UTF-8 is one problem, not one more per gold id it would have held.
    (tmp_path / "corpus.jsonl").write_bytes(b'{"id": "d1", "title": "caf\xe9", "text": "x"}\n')
    _write(tmp_path / "questions.jsonl", [QUESTIONS[0]])
    with pytest.raises(DatasetFormatError) as err:
        load_dataset(tmp_path)
    assert len(err.value.problems) == 1 and "not UTF-8" in err.value.problems[0]
    with pytest.raises(DatasetFormatError, match="not a dataset directory"):
        load_dataset(tmp_path / "questions.jsonl")


@pytest.mark.parametrize("tenant", ["a/b", "..", "Acme Corp", ""])
def test_a_tenant_the_services_would_refuse_is_a_format_problem(
    tmp_path: Path, tenant: str
) -> None:
    # It names the tenant's index directory on the embedded stores: "a/b" or ".." is a path.
    _write(tmp_path / "corpus.jsonl", [{**CORPUS[0], "tenant": tenant}])
    _write(tmp_path / "questions.jsonl", [{**QUESTIONS[0], "tenant": tenant}])
    with pytest.raises(DatasetFormatError) as err:
        load_dataset(tmp_path)
    refused = "'tenant' must be 1-64 letters, digits, '_', '.', '-' when given"
    assert [p for p in err.value.problems if p.endswith(refused)] == [
        f"{tmp_path / name}:1: {refused}" for name in ("corpus.jsonl", "questions.jsonl")
    ]
