"""The HaluEval builder on a tiny synthetic source (see halueval_fixture.py): offline, fast."""

from __future__ import annotations

import json
import re
from collections import defaultdict
from pathlib import Path

import pytest

from candor.text import content_terms
from evals.datasets import halueval
from evals.datasets.format import load_dataset
from evals.datasets.halueval import (
    BuildOptions,
    BuiltDataset,
    answer_pattern,
    build,
    locate_answer,
    read_source,
    redact,
    split_sentences,
)
from tests.evals.halueval_fixture import Fixture, write_fixture


@pytest.fixture(scope="module")
def fixture(tmp_path_factory: pytest.TempPathFactory) -> Fixture:
    return write_fixture(tmp_path_factory.mktemp("halueval-src"))


@pytest.fixture(scope="module")
def built(fixture: Fixture) -> BuiltDataset:
    return build(read_source(fixture.directory), BuildOptions(seed=0))


def _norm(text: str) -> str:
    return " ".join(text.casefold().split())


def _clean(knowledge: str) -> str:
    return " ".join(split_sentences(knowledge))


def _by_line(built: BuiltDataset) -> dict[int, str]:
    return {q.meta["source_line"]: q.kind for q in built.questions}


# --- text helpers ----------------------------------------------------------------------------


def test_sentences_repair_paragraph_joins_and_keep_initials() -> None:
    text = (
        "Arthur's Magazine (1844–1846) was published in the 19th century.First for Women is "
        'a magazine. J. R. R. Tolkien served in the U.S. Army with Dr. Smith. "Quoted." Then 3 '
        "more.He left."
    )
    assert split_sentences(text) == [
        "Arthur's Magazine (1844–1846) was published in the 19th century.",
        "First for Women is a magazine.",
        "J. R. R. Tolkien served in the U.S. Army with Dr. Smith.",
        '"Quoted."',
        "Then 3 more.",
        "He left.",
    ]


def test_answer_location_and_redaction() -> None:
    assert answer_pattern("yes") is None and answer_pattern(" No ") is None
    assert halueval.answer_form("Is it?", "No.") == "yes_no"
    assert halueval.answer_form("Which is older, Ab Co or Cd Co?", "Ab Co") == "choice"
    assert halueval.answer_form("Where is Ab Co?", "Delhi") == "open"
    assert answer_pattern("...") is None
    passage = "The Oberoi family runs hotels.The Oberoi Group has its head office in Delhi."
    pattern = locate_answer("Delhi", passage)
    assert pattern is not None
    assert locate_answer("Del", passage) is None  # whole words only
    assert locate_answer("The Oberoi Group", "Its owner is Oberoi Group. Fine.") is not None
    text, removed, total = redact(passage, [pattern])
    assert (text, removed, total) == ("The Oberoi family runs hotels.", 1, 2)


def test_an_answer_reworded_is_an_answer() -> None:
    terms = frozenset(content_terms("Victor John Mature"))
    assert halueval.carries_answer("The film starred Victor Mature and Hedy Lamarr.", terms)
    assert not halueval.carries_answer("Victor Borge played the piano.", terms)  # one of three
    # Two-word answers need both words; one-word answers are the answer string's job.
    dolphins = frozenset(content_terms("the Miami Dolphins"))
    assert not halueval.carries_answer("He grew up in Miami.", dolphins)
    assert halueval.carries_answer("The Dolphins of Miami won.", dolphins)
    assert not halueval.carries_answer("Kato drove.", frozenset(content_terms("Kato")))
    passage = (
        "Victor John Mature was an actor.The remake starred Victor Mature as Samson."
        "It was filmed in Mexico."
    )
    pattern = locate_answer("Victor John Mature", passage)
    assert pattern is not None
    assert redact(passage, [pattern])[1:] == (1, 3)  # the answer string alone
    assert redact(passage, [pattern], [terms]) == ("It was filmed in Mexico.", 2, 3)


# --- the built dataset -----------------------------------------------------------------------


def test_counts_match_manifest_and_halves_are_balanced(built: BuiltDataset) -> None:
    counts = built.manifest["counts"]
    kinds: defaultdict[str, int] = defaultdict(int)
    for q in built.questions:
        kinds[q.kind] += 1
    assert counts["questions"] == len(built.questions)
    assert counts["by_kind"] == {k: kinds[k] for k in ("answerable", "topic_absent", "near_miss")}
    assert counts["corpus"] == len(built.corpus)
    assert sum(counts["corpus_by_origin"].values()) == len(built.corpus)
    dropped = sum(built.manifest["dropped_negatives_possibly_answerable"].values())
    assert counts["selected_questions"] == 78 == len(built.questions) + dropped
    # Halves are balanced on the selection (before drops), group by group.
    assert abs(kinds["answerable"] - (78 - kinds["answerable"])) <= 2
    assert kinds["near_miss"] > 0 and kinds["topic_absent"] > 0
    split_total = sum(sum(v.values()) for v in counts["by_split"].values())
    assert split_total == len(built.questions)
    for kind in ("answerable", "topic_absent", "near_miss"):
        test = counts["by_split"]["test"].get(kind, 0)
        train = counts["by_split"]["train"].get(kind, 0)
        assert abs(test - train) <= 4, kind
    origin = counts["corpus_by_origin"]
    assert origin["summarization"] == 30 and origin["dialogue"] >= 30  # all there are
    assert {q.id for q in built.questions} == {f"halueval-qa-{n:05d}" for n in _by_line(built)}


def test_answerable_gold_passages_are_indexed_unredacted(
    built: BuiltDataset, fixture: Fixture
) -> None:
    corpus = {p.id: p.text for p in built.corpus}
    for q in built.questions:
        if q.kind != "answerable":
            assert q.gold_ids == () and q.answer is None
            continue
        (gold,) = q.gold_ids
        assert corpus[gold] == _clean(fixture.qa[q.meta["source_line"]]["knowledge"])
        assert q.answer == fixture.qa[q.meta["source_line"]]["right_answer"]


def test_no_topic_absent_text_reaches_the_corpus(built: BuiltDataset, fixture: Fixture) -> None:
    corpus_text = [_norm(p.text) for p in built.corpus]
    absent = [q for q in built.questions if q.kind == "topic_absent"]
    assert absent
    for q in absent:
        knowledge = fixture.qa[q.meta["source_line"]]["knowledge"]
        assert _norm(_clean(knowledge)) not in corpus_text
        for sentence in split_sentences(knowledge):
            if len(sentence.split()) >= 6:
                assert not any(_norm(sentence) in t for t in corpus_text), sentence


def test_near_miss_passages_replace_the_original_without_the_answer(
    built: BuiltDataset, fixture: Fixture
) -> None:
    corpus = {p.id: p.text for p in built.corpus}
    near = [q for q in built.questions if q.kind == "near_miss"]
    assert near
    for q in near:
        row = fixture.qa[q.meta["source_line"]]
        redacted = corpus[q.meta["near_miss_id"]]
        pattern = answer_pattern(row["right_answer"])
        assert pattern is not None and not pattern.search(redacted)
        assert _norm(_clean(row["knowledge"])) not in {_norm(t) for t in corpus.values()}
        # What is left is on topic: sentences of the original, verbatim.
        original = {_norm(x) for x in split_sentences(row["knowledge"])}
        assert {_norm(x) for x in split_sentences(redacted)} <= original
        assert q.meta["source_answer"] == row["right_answer"]
        assert q.meta["sentences_removed"] >= 1
        assert (
            q.meta["terms_in_near_miss"] + q.meta["terms_removed"] == (q.meta["terms_in_passage"])
        )
        terms = set(content_terms(q.question))
        before = terms & set(content_terms(_clean(row["knowledge"])))
        after = terms & set(content_terms(redacted))
        assert q.meta["terms_removed"] == len(before - after)
    stats = built.manifest["near_miss"]
    assert stats["questions"] == len(near)
    assert stats["mean_terms_removed"] == pytest.approx(
        sum(q.meta["terms_removed"] for q in near) / len(near), abs=1e-4
    )


def test_near_misses_lose_the_answer_reworded_or_are_dropped(
    built: BuiltDataset, fixture: Fixture
) -> None:
    corpus = {p.id: p.text for p in built.corpus}
    near = [q for q in built.questions if q.kind == "near_miss"]
    for q in near:
        terms = frozenset(content_terms(q.meta["source_answer"]))
        redacted = corpus[q.meta["near_miss_id"]]
        assert not any(halueval.carries_answer(x, terms) for x in split_sentences(redacted))
    reworded = [q for q in near if q.question.startswith("Who painted the ")]
    assert reworded  # the museum sentence is left, the painter's name in either form is not
    assert all(corpus[q.meta["near_miss_id"]].startswith("The harbour scenes") for q in reworded)
    # The poets' passages are all answer, string or reworded: never a near miss, and a
    # negative one leaves neither question nor passage behind.
    kinds = _by_line(built)
    poets = [n for n, row in enumerate(fixture.qa) if row["question"].startswith("Who wrote the ")]
    assert all(kinds.get(n) != "near_miss" for n in poets)
    dropped = built.manifest["dropped_negatives_possibly_answerable"]
    missing = [n for n in poets if n not in kinds]
    assert missing and dropped["near_miss_answer_reworded"] == len(missing)
    for n in missing:
        assert _norm(fixture.qa[n]["right_answer"].split()[0]) not in _norm(
            " ".join(corpus.values())
        )


def test_unlocatable_answers_are_never_near_misses(built: BuiltDataset, fixture: Fixture) -> None:
    forms = built.manifest["counts"]["by_kind_and_answer_form"]
    assert forms["near_miss"] == {
        "open": len([q for q in built.questions if q.kind == "near_miss"])
    }
    for q in built.questions:
        answer = fixture.qa[q.meta["source_line"]]["right_answer"]
        if answer == "yes":
            assert q.meta["answer_form"] == "yes_no"
        elif re.search(rf"\b{re.escape(answer)}\b", q.question):
            assert q.meta["answer_form"] == "choice"
        else:
            assert q.meta["answer_form"] == "open"
        if q.meta["answer_form"] != "open":
            assert q.kind != "near_miss"


def test_groups_stay_together(built: BuiltDataset, fixture: Fixture) -> None:
    # Questions sharing a passage, or a sentence of six or more words, share kind and split.
    by_key: dict[str, set[tuple[str, str | None]]] = defaultdict(set)
    for q in built.questions:
        knowledge = fixture.qa[q.meta["source_line"]]["knowledge"]
        keys = {"p:" + _norm(_clean(knowledge))} | {
            "s:" + _norm(s) for s in split_sentences(knowledge) if len(s.split()) >= 6
        }
        for key in keys:
            by_key[key].add((q.kind, q.split))
    shared = [k for k, v in by_key.items() if len(v) > 1]
    assert shared == []
    sizes = built.manifest["counts"]["groups_by_size"]
    assert sizes.get("2", 0) >= 6  # 3 shared passages + 3 shared sentences


def test_kept_negatives_are_not_answered_by_any_indexed_passage(built: BuiltDataset) -> None:
    for q in built.questions:
        if q.answerable:
            continue
        pattern = answer_pattern(q.meta["source_answer"])
        if pattern is None:
            continue
        answer_terms = set(content_terms(q.meta["source_answer"]))
        others = set(content_terms(q.question)) - answer_terms
        for p in built.corpus:
            terms = set(content_terms(p.text))
            if pattern.search(p.text) and others:
                assert len(others & terms) / len(others) < 0.5, (q.question, p.text)


def test_leaking_negatives_and_distractors_are_dropped(fixture: Fixture) -> None:
    source = read_source(fixture.directory)
    manifests = [build(source, BuildOptions(seed=s)).manifest for s in range(5)]
    assert any(m["dropped_negatives_possibly_answerable"] for m in manifests)
    skipped = [m["distractors_skipped"] for m in manifests]
    assert all(s.get("dialogue_duplicate") == 1 for s in skipped)
    assert any(s.get("dialogue_would_answer_negative") for s in skipped)


def test_distractors_are_cut_and_labelled(built: BuiltDataset) -> None:
    news = [p for p in built.corpus if p.id.startswith("hs-")]
    dialogue = [p for p in built.corpus if p.id.startswith("hd-")]
    assert news and dialogue
    assert all(len(p.text.split()) <= 100 for p in news)
    assert all(p.text.endswith(".") for p in news)  # whole sentences
    assert any(". " in p.text for p in dialogue)  # "...Actor.Actor starred" repaired


def test_deterministic_for_a_seed_and_different_for_another(fixture: Fixture) -> None:
    source = read_source(fixture.directory)
    a = build(source, BuildOptions(seed=11))
    b = build(source, BuildOptions(seed=11))
    c = build(source, BuildOptions(seed=12))
    assert a.corpus == b.corpus and a.questions == b.questions and a.manifest == b.manifest
    assert [q.meta for q in a.questions] == [q.meta for q in b.questions]
    assert [(q.id, q.kind, q.split) for q in a.questions] != [
        (q.id, q.kind, q.split) for q in c.questions
    ]


def test_limit_keeps_whole_groups(fixture: Fixture) -> None:
    source = read_source(fixture.directory)
    small = build(source, BuildOptions(seed=3, limit=20, distractor_ratio=0.5))
    counts = small.manifest["counts"]
    assert counts["selected_questions"] == 20
    assert len(small.questions) <= 20
    origin = counts["corpus_by_origin"]
    assert origin.get("dialogue", 0) + origin.get("summarization", 0) == 10
    full = build(source, BuildOptions(seed=3))
    group_sizes: defaultdict[str, int] = defaultdict(int)
    for q in full.questions:
        group_sizes[q.meta["group"]] += 1
    small_sizes: defaultdict[str, int] = defaultdict(int)
    for q in small.questions:
        small_sizes[q.meta["group"]] += 1
    # A group is never split by the limit (drops aside, which only remove negatives).
    for group, n in small_sizes.items():
        assert n == group_sizes[group] or any(
            not q.answerable for q in small.questions if q.meta["group"] == group
        )


def test_prepare_writes_a_valid_dataset(fixture: Fixture, tmp_path: Path) -> None:
    out = tmp_path / "ds"
    code = halueval.main(
        ["--source", str(fixture.directory), "--out", str(out), "--seed", "5", "--limit", "30"]
    )
    assert code == 0
    ds = load_dataset(out)
    assert ds.manifest is not None
    assert ds.manifest["counts"]["questions"] == len(ds.questions)
    assert ds.manifest["source"]["type"] == "directory"
    files = ds.manifest["source"]["files"]
    assert set(files) == {"qa", "dialogue", "summarization"}
    assert all(len(f["sha256"]) == 64 for f in files.values())
    assert set(ds.manifest["outputs"]) == {"corpus.jsonl", "questions.jsonl"}
    again = tmp_path / "again"
    args = ["--source", str(fixture.directory), "--seed", "5", "--limit", "30"]
    assert halueval.main([*args, "--out", str(again)]) == 0
    for name in ("corpus.jsonl", "questions.jsonl", "manifest.json"):
        assert (out / name).read_bytes() == (again / name).read_bytes(), name
    assert json.loads((out / "manifest.json").read_text())["seed"] == 5


def test_bad_source_is_a_clean_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert halueval.main(["--source", str(tmp_path), "--out", str(tmp_path / "o")]) == 2
    assert "dataset_halueval_qa.jsonl not found" in capsys.readouterr().err
    assert halueval.main(["--source", str(tmp_path), "--limit", "0"]) == 2


def test_prepare_command_dispatches_by_dataset_name(fixture: Fixture, tmp_path: Path) -> None:
    from evals.datasets import prepare

    out = tmp_path / "via-prepare"
    args = ["halueval", "--source", str(fixture.directory), "--out", str(out), "--limit", "10"]
    assert prepare.main(args) == 0
    assert load_dataset(out).manifest is not None
    with pytest.raises(SystemExit):
        prepare.main(["nosuchdataset"])
