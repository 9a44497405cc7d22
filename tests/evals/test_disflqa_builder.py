"""The Disfl-QA builder on a small synthetic task file in the source's own format: offline."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import pytest

from evals.datasets import disflqa
from evals.datasets.disflqa import BuildOptions, build, detokenize, parse_examples, read_task
from evals.datasets.format import load_dataset
from evals.datasets.pinned import SourceError

# Tokenised the way the source is: punctuation and clitics split off by spaces.
PARAGRAPHS = [
    f"The river {name} is {n} km long . It flows through the town of {town} , "
    f"where the {name} bridge was built in {1800 + n} ."
    for n, (name, town) in enumerate(
        [
            ("Alder", "Brook"),
            ("Birch", "Cove"),
            ("Cedar", "Dale"),
            ("Dogwood", "Elm"),
            ("Elder", "Fern"),
            ("Fir", "Glen"),
            ("Gum", "Holt"),
            ("Hazel", "Isle"),
        ],
        start=10,
    )
]


def _examples() -> list[dict[str, str]]:
    rows = []
    for p in PARAGRAPHS:
        name = p.split()[2]
        rows.append(
            {
                "input": f"How long is the {name} no the river {name} ?  \ncontext: {p}",
                "target": p.split()[4] + " km",
            }
        )
        rows.append(
            {
                "input": f"When was the {name} bridge built ?  \ncontext: {p}",
                "target": p.split()[-2],
            }
        )
        rows.append(
            {"input": f"Who painted the {name} bridge ?  \ncontext: {p}", "target": "unknown"}
        )
    rows.append({"input": f"  \ncontext: {PARAGRAPHS[0]}", "target": "unknown"})
    return rows


def _task_bytes(rows: list[dict[str, str]] | None = None) -> bytes:
    return json.dumps({"name": "disfl_qa", "examples": rows or _examples()}).encode()


def test_detokenize_rejoins_punctuation_clitics_hyphens_and_quotes() -> None:
    assert detokenize(
        'Earth \' s crust , the " Islamic State " and large - scale ( 1,300 ft ) .'
    ) == ('Earth\'s crust, the "Islamic State" and large-scale (1,300 ft).')
    assert detokenize("it does n't  flow ?  ") == "it doesn't flow?"


def test_parse_skips_empty_questions_and_rejects_malformed_examples() -> None:
    examples, skipped = parse_examples(_task_bytes())
    assert skipped == 1 and len(examples) == 3 * len(PARAGRAPHS)
    assert examples[0].question == "How long is the Alder no the river Alder?"
    assert examples[0].answer == "10 km" and examples[2].answer is None
    with pytest.raises(SourceError, match="example 0"):
        parse_examples(_task_bytes([{"input": "no context here", "target": "x"}]))
    with pytest.raises(SourceError, match="not a BIG-bench task"):
        parse_examples(b"[]")


def test_build_withholds_paragraphs_and_labels_kinds() -> None:
    examples, skipped = parse_examples(_task_bytes())
    built = build(examples, BuildOptions(seed=0, absent_fraction=0.25), skipped)
    corpus_ids = {p.id for p in built.corpus}
    counts = built.manifest["counts"]
    assert counts["withheld_paragraphs"] == 2 and len(built.corpus) == 6
    for q in built.questions:
        paragraph = q.meta["paragraph"]
        if q.kind == "topic_absent":
            assert paragraph not in corpus_ids and not q.answerable
        else:
            assert paragraph in corpus_ids
            assert q.answerable == (q.kind == "answerable")
            assert q.gold_ids == ((paragraph,) if q.answerable else ())
    # The "Who painted" questions are the unanswerable ones; on an indexed paragraph they are
    # near misses.
    assert {q.kind for q in built.questions if "painted" in q.question} == {
        "near_miss",
        "topic_absent",
    }
    assert counts["by_kind"] == {"answerable": 12, "near_miss": 6, "topic_absent": 6}
    # Whole paragraphs per split.
    split_of: dict[str, set[str | None]] = {}
    for q in built.questions:
        split_of.setdefault(q.meta["paragraph"], set()).add(q.split)
    assert all(len(s) == 1 for s in split_of.values())
    assert {q.split for q in built.questions} == {"train", "test"}


def test_build_is_deterministic_per_seed_and_honours_limit() -> None:
    examples, _ = parse_examples(_task_bytes())
    a = build(examples, BuildOptions(seed=3))
    assert a == build(examples, BuildOptions(seed=3))
    assert {p.id for p in a.corpus} != {p.id for p in build(examples, BuildOptions(seed=4)).corpus}
    limited = build(examples, BuildOptions(seed=3, limit=7))
    assert len(limited.questions) == 6  # two whole paragraphs of three questions each


def test_topic_absent_answered_by_an_indexed_paragraph_is_dropped() -> None:
    # The second paragraph repeats the first one's bridge fact, so the first paragraph's "when"
    # question can be answered from it even when the first paragraph is withheld.
    first, second = PARAGRAPHS[0], PARAGRAPHS[1] + " The Alder bridge was built in 1810 ."
    rows = _examples()[:6]
    for row in rows[3:]:
        row["input"] = row["input"].replace(PARAGRAPHS[1], second)
    examples, _ = parse_examples(_task_bytes(rows))
    for seed in range(20):
        built = build(examples, BuildOptions(seed=seed, absent_fraction=0.5))
        if disflqa.passage_id(detokenize(first)) not in {p.id for p in built.corpus}:
            assert built.manifest["counts"]["dropped_topic_absent_answered_elsewhere"] == 1
            assert not any(
                q.question == "When was the Alder bridge built?" for q in built.questions
            )
            return
    pytest.fail("no seed withheld the first paragraph")


def test_read_task_from_sdist_and_prepare_writes_a_valid_dataset(tmp_path: Path) -> None:
    data = _task_bytes()
    sdist = tmp_path / "bigbench-1.0.0.tar.gz"
    with tarfile.open(sdist, "w:gz") as tar:
        info = tarfile.TarInfo("bigbench-1.0.0/" + disflqa.MEMBER)
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    origin, read = read_task(sdist)
    assert read == data and origin["type"] == "sdist" and origin["member_sha256"]
    out = disflqa.prepare(tmp_path / "out", BuildOptions(seed=0), source=sdist)
    dataset = load_dataset(out)
    assert len(dataset.questions) == 24 and dataset.manifest is not None
    assert dataset.manifest["counts"]["skipped_empty_question"] == 1

    empty = tmp_path / "empty.tar.gz"
    with tarfile.open(empty, "w:gz"):
        pass
    with pytest.raises(SourceError, match="not found"):
        read_task(empty)
    with pytest.raises(SourceError, match="no such file"):
        read_task(tmp_path / "missing.tar.gz")


def test_reader_pairs_come_from_fit_paragraphs_of_a_built_dataset(tmp_path: Path) -> None:
    """The two Disfl-QA pair builders end to end: the retrieval one on the embedded stores, in a
    work directory that does not exist yet, and the own-paragraph one beside it."""
    from evals import reader_data
    from evals.datasets.format import write_dataset, write_manifest

    examples, skipped = parse_examples(_task_bytes())
    built = build(examples, BuildOptions(seed=0, absent_fraction=0.25), skipped)
    dataset = tmp_path / "dataset"
    write_dataset(dataset, built.corpus, built.questions)
    write_manifest(dataset, dict(built.manifest))
    task = tmp_path / "task.json"
    task.write_bytes(_task_bytes())

    fit, _ = reader_data.disflqa_reader_paragraphs(built.questions)
    fit_lines = {
        reader_data.DISFLQA_LINE_BASE + int(q.meta["source_index"])
        for q in built.questions
        if q.split == "train" and q.meta["paragraph"] in fit
    }
    retrieved = reader_data.build_disflqa_pairs(dataset, tmp_path / "not" / "yet")
    assert retrieved and {p.question_line for p in retrieved} <= fit_lines
    # Retrieval ran over the fit paragraphs alone: no test or holdout paragraph is a chunk.
    others = [p.text for p in built.corpus if p.id not in fit]
    assert others and not any(pair.evidence in text for pair in retrieved for text in others)
    assert all(any(pair.evidence in p.text for p in built.corpus) for pair in retrieved)
    own = reader_data.build_disflqa_own_pairs(dataset, task, besides=retrieved)
    assert own and {p.question_line for p in own} <= fit_lines
    assert not set(own) & set(retrieved)
    # Own-paragraph pairs are answers or human-written near misses, never off topic.
    assert {p.label for p in own} <= {"answers", "near_miss"}
