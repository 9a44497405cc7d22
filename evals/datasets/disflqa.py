"""Build a candor evaluation dataset from Disfl-QA (``candor eval prepare disflqa``).

Source: the ``bigbench==1.0.0`` sdist from PyPI (fetched from its files.pythonhosted.org URL:
the package publishes no wheel, and pip will not prepare the sdist's metadata), member
``bigbench/benchmark_tasks/disfl_qa/task.json``. Disfl-QA
(Gupta et al., 2021) rewrote the 8,000 questions of the SQuAD 2.0 dev set as spoken, disfluent
questions ("What do petrologists use rock samples or rather electron microprobes in the laboratory
for?"); each example is ``{"input": "<question> \\ncontext: <paragraph>", "target": "<answer
span>" | "unknown"}`` over 1,204 Wikipedia paragraphs. Its 2,107 ``unknown`` questions are SQuAD
2.0's *human-written* unanswerable questions: crowd workers wrote them against the paragraph to
look answerable by it. That makes them the human-written near misses DESIGN.md asks about, which
HaluEval's synthetic ones (an answer sentence deleted) only imitate.

What the builder does:

1. Undoes the source's tokenisation (``Earth ' s`` -> ``Earth's``, ``large - scale``) in
   questions, paragraphs and answers; groups questions by paragraph.
2. Shuffles the paragraphs with ``seed``; with ``limit`` keeps the first that fit in ``limit``
   questions. Walking them in that order, ``absent_fraction`` of the questions (by whole
   paragraphs) go to a withheld half whose paragraphs are never indexed.
3. Indexed paragraphs: their answerable questions are **answerable** (gold = the paragraph) and
   their ``unknown`` ones are **near_miss**. Withheld paragraphs: every question is
   **topic_absent**, less any with an answer that an indexed paragraph (of the same article,
   say) holds together with half of the question's other terms (counted in the manifest).
4. Train/test by whole paragraphs, to whichever split is further below its share.

The questions stay disfluent: that is the dataset. It is an out-of-domain check (other source,
other question style, human-written near misses); fitting on it would make it one more
in-domain set.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import re
import sys
import tarfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from candor.file_digest import sha256_file
from candor.text import content_terms
from evals.datasets import builder
from evals.datasets.builder import write_built
from evals.datasets.format import (
    MANIFEST_FILE,
    Kind,
    Passage,
    Question,
    Split,
)
from evals.datasets.halueval import TermIndex, leak_probe
from evals.datasets.pinned import SourceError, url_fetch

PACKAGE = "bigbench"
VERSION = "1.0.0"
SDIST_NAME = "bigbench-1.0.0.tar.gz"
SDIST_SHA256 = "1bb398a5512c6d798cdebe0dfa0ac03f67f6033fa6b39c6ef71df978c7cbc5c2"
SDIST_URL = (
    "https://files.pythonhosted.org/packages/95/f8/"
    f"c019b3579df548a04cac12342cfcb878e50ddf6cfcd7fddba8cfc721c157/{SDIST_NAME}"
)
MEMBER = "bigbench/benchmark_tasks/disfl_qa/task.json"
UNKNOWN = "unknown"
BUILDER_VERSION = 1

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_CACHE_DIR = ROOT / ".cache" / "bigbench"
_CONTEXT = "\ncontext: "


@dataclass(frozen=True)
class BuildOptions:
    """How to build the dataset. Every field is recorded in the manifest."""

    seed: int = 0
    limit: int | None = None
    """Use at most this many source questions (whole paragraphs); ``None`` = all 8,000."""
    test_fraction: float = 0.5
    absent_fraction: float = 0.25
    """Share of the questions whose paragraph is withheld from the index (topic absent)."""
    leak_term_share: float = 0.5
    split_within_halves: bool = False
    """Balance train/test within the indexed and the withheld questions separately. Off, the
    split is balanced over all questions (Disfl-QA's published builds); at ``absent_fraction``
    0.5 that sends every withheld paragraph to one split, so SQuADShifts turns it on."""

    def __post_init__(self) -> None:
        if self.limit is not None and self.limit < 1:
            raise ValueError("limit must be at least 1")
        for name in ("test_fraction", "absent_fraction", "leak_term_share"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"{name} must be within [0, 1]")


@dataclass(frozen=True)
class Example:
    """One source example, detokenised."""

    index: int
    question: str
    paragraph: str
    answer: str | None
    """``None`` for SQuAD 2.0's unanswerable questions."""


@dataclass(frozen=True)
class BuiltDataset:
    corpus: tuple[Passage, ...]
    questions: tuple[Question, ...]
    manifest: dict[str, Any] = field(compare=False)


def fetch_sdist(cache_dir: Path | str = DEFAULT_CACHE_DIR) -> Path:
    """The pinned ``bigbench`` sdist (358 MB) in ``cache_dir``, downloaded from PyPI if absent."""
    return url_fetch(SDIST_URL, SDIST_SHA256, cache_dir)


def read_task(path: Path | str, member: str = MEMBER) -> tuple[dict[str, Any], bytes]:
    """``(origin, member bytes)`` from the sdist, or from the member's file given directly."""
    p = Path(path)
    if not p.is_file():
        raise SourceError(f"{p}: no such file")
    if p.name.endswith((".tar.gz", ".tgz")):
        try:
            with tarfile.open(p, "r:gz") as tar:
                for entry in tar:
                    if entry.isfile() and entry.name.endswith("/" + member):
                        handle = tar.extractfile(entry)
                        if handle is not None:
                            data = handle.read()
                            break
                else:
                    raise SourceError(f"{p}: {member} not found")
        except (tarfile.TarError, OSError) as exc:
            raise SourceError(f"{p}: not a readable sdist ({exc})") from exc
        origin = {
            "type": "sdist",
            "package": f"{PACKAGE}=={VERSION}",
            "file": p.name,
            "sha256": sha256_file(p),
            "member": member,
        }
    else:
        data = p.read_bytes()
        origin = {"type": "file", "path": p.name}
    origin["member_sha256"] = hashlib.sha256(data).hexdigest()
    return origin, data


_SPACE_BEFORE = re.compile(r" ([,.;:?!%)\]}])")
_SPACE_AFTER = re.compile(r"([(\[{$]) ")
_CLITIC = re.compile(r" ' (s|re|ve|ll|d|m|t)\b", re.IGNORECASE)
_JOINED = re.compile(r"(\w) ([-–/]) (\w)")
_QUOTED = re.compile(r'" ([^"]*?) "')


def detokenize(text: str) -> str:
    """Undo the source's space-separated punctuation (``Earth ' s`` -> ``Earth's``)."""
    out = " ".join(text.split())
    out = _QUOTED.sub(r'"\1"', out)
    out = _CLITIC.sub(r"'\1", out).replace(" n't", "n't")
    out = _JOINED.sub(r"\1\2\3", out)
    out = _SPACE_AFTER.sub(r"\1", out)
    return _SPACE_BEFORE.sub(r"\1", out).strip()


def parse_examples(data: bytes) -> tuple[list[Example], int]:
    """The task's examples, detokenised, and how many were skipped for an empty question (the
    source has one); a malformed example is a :class:`SourceError`."""
    try:
        rows = json.loads(data.decode("utf-8"))["examples"]
    except (ValueError, KeyError, TypeError) as exc:
        raise SourceError(f"{MEMBER}: not a BIG-bench task file ({exc})") from exc
    out = []
    skipped = 0
    for i, row in enumerate(rows):
        try:
            question, paragraph = str(row["input"]).split(_CONTEXT, 1)
            target = str(row["target"]).strip()
        except (ValueError, KeyError, TypeError) as exc:
            raise SourceError(f"{MEMBER}: example {i}: no question/context/target ({exc})") from exc
        q, para = detokenize(question), detokenize(paragraph)
        if not q:
            skipped += 1
            continue
        if not para or not target:
            raise SourceError(f"{MEMBER}: example {i}: empty context or target")
        answer = None if target == UNKNOWN else detokenize(target)
        out.append(Example(index=i, question=q, paragraph=para, answer=answer))
    return out, skipped


def passage_id(paragraph: str) -> str:
    return "sq-" + hashlib.sha256(" ".join(paragraph.casefold().split()).encode()).hexdigest()[:12]


def build(
    examples: list[Example],
    options: BuildOptions = BuildOptions(),
    skipped: int = 0,
    name: str = "disflqa",
) -> BuiltDataset:
    """Build the dataset in memory (deterministic for ``examples`` and ``options``); ``name``
    prefixes the question ids and names the manifest (SQuADShifts builds the same way)."""
    by_paragraph: dict[str, list[Example]] = {}
    for ex in examples:
        by_paragraph.setdefault(ex.paragraph, []).append(ex)
    paragraphs = sorted(by_paragraph)
    random.Random(options.seed).shuffle(paragraphs)
    sizes = [len(by_paragraph[p]) for p in paragraphs]
    chosen = [paragraphs[i] for i in builder.within_limit(sizes, options.limit)]

    counts: Counter[str] = Counter()
    withheld: set[str] = set()
    split_of: dict[str, Split] = {}
    for para in chosen:
        size = len(by_paragraph[para])
        if builder.first_further_below(
            counts["absent"], counts["indexed"], size, options.absent_fraction
        ):
            withheld.add(para)
        half = "absent" if para in withheld else "indexed"
        counts[half] += size
        prefix = f"{half}:" if options.split_within_halves else ""
        split: Split = (
            "test"
            if builder.first_further_below(
                counts[prefix + "test"], counts[prefix + "train"], size, options.test_fraction
            )
            else "train"
        )
        counts[prefix + split] += size
        split_of[para] = split

    corpus = [Passage(id=passage_id(p), title="", text=p) for p in chosen if p not in withheld]
    index = TermIndex()
    for passage in corpus:
        index.add(passage.text)
    questions: list[Question] = []
    leaked = 0
    for para in chosen:
        for ex in by_paragraph[para]:
            kind: Kind
            if para in withheld:
                kind = "topic_absent"
                probe = leak_probe(frozenset(content_terms(ex.question)), ex.answer or "")
                if probe is not None and index.answers(probe, options.leak_term_share):
                    leaked += 1
                    continue
            else:
                kind = "answerable" if ex.answer is not None else "near_miss"
            answerable = kind == "answerable"
            meta: dict[str, Any] = {"source_index": ex.index, "paragraph": passage_id(para)}
            if not answerable and ex.answer is not None:
                meta["source_answer"] = ex.answer
            questions.append(
                Question(
                    id=f"{name}-{ex.index:05d}",
                    question=ex.question,
                    answerable=answerable,
                    gold_ids=(passage_id(para),) if answerable else (),
                    kind=kind,
                    answer=ex.answer if answerable else None,
                    split=split_of[para],
                    meta=meta,
                )
            )
    questions.sort(key=lambda q: q.id)
    by_split: dict[str, dict[str, int]] = {}
    for q in questions:
        bucket = by_split.setdefault(q.split or "none", {})
        bucket[q.kind] = bucket.get(q.kind, 0) + 1
    manifest: dict[str, Any] = {
        "name": name,
        "builder_version": BUILDER_VERSION,
        "options": {
            "seed": options.seed,
            "limit": options.limit,
            "test_fraction": options.test_fraction,
            "absent_fraction": options.absent_fraction,
            "leak_term_share": options.leak_term_share,
            **({"split_within_halves": True} if options.split_within_halves else {}),
        },
        "counts": {
            "source_questions": len(examples) + skipped,
            "skipped_empty_question": skipped,
            "source_paragraphs": len(by_paragraph),
            "questions": len(questions),
            "by_kind": dict(Counter(q.kind for q in questions)),
            "by_split": by_split,
            "corpus": len(corpus),
            "withheld_paragraphs": len(withheld),
            "dropped_topic_absent_answered_elsewhere": leaked,
        },
    }
    return BuiltDataset(tuple(corpus), tuple(questions), manifest)


def prepare(
    out_dir: Path | str | None = None,
    options: BuildOptions = BuildOptions(),
    *,
    source: Path | str | None = None,
    cache_dir: Path | str = DEFAULT_CACHE_DIR,
) -> Path:
    """Fetch (if needed), build and write the dataset; returns the output directory."""
    origin, data = read_task(source if source is not None else fetch_sdist(cache_dir))
    examples, skipped = parse_examples(data)
    built = build(examples, options, skipped)
    out = Path(out_dir) if out_dir is not None else default_out_dir(options)
    return write_built(out, built.corpus, built.questions, {**built.manifest, "source": origin})


def default_out_dir(options: BuildOptions) -> Path:
    """``.cache/datasets/disflqa[-n<limit>][-s<seed>]`` under the repository."""
    return builder.default_out_dir("disflqa", options.limit, options.seed, BuildOptions.seed)


def add_arguments(
    ap: argparse.ArgumentParser,
    defaults: BuildOptions = BuildOptions(),
    source_count: str = "8,000",
    source_help: str = "the bigbench sdist or the disfl_qa task.json",
) -> None:
    """The ``candor eval prepare disflqa`` options (SQuADShifts passes its own defaults)."""
    builder.add_common_arguments(
        ap,
        seed=defaults.seed,
        test_fraction=defaults.test_fraction,
        source_count=source_count,
        source_help=f"{source_help} (default: the pinned sdist in --cache-dir, downloaded from "
        "PyPI if missing)",
        cache_dir=DEFAULT_CACHE_DIR,
    )
    ap.add_argument(
        "--absent-fraction",
        type=float,
        default=defaults.absent_fraction,
        help="share of questions whose paragraph is not indexed "
        f"(default {defaults.absent_fraction})",
    )


def options_from(args: argparse.Namespace, **overrides: Any) -> BuildOptions:
    """The build options the parsed ``prepare`` arguments ask for (SQuADShifts adds its own)."""
    return BuildOptions(
        seed=args.seed,
        limit=args.limit,
        test_fraction=args.test_fraction,
        absent_fraction=args.absent_fraction,
        **overrides,
    )


def print_written(out: Path) -> None:
    """What a built dataset in ``out`` holds, from its manifest."""
    counts = json.loads((out / MANIFEST_FILE).read_text(encoding="utf-8"))["counts"]
    print(f"wrote {out}")
    print(f"  questions {counts['questions']}: {counts['by_kind']}")
    print(f"  corpus {counts['corpus']}; by split {counts['by_split']}")


def run(args: argparse.Namespace) -> int:
    try:
        out = prepare(args.out, options_from(args), source=args.source, cache_dir=args.cache_dir)
    except (SourceError, ValueError) as exc:
        print(f"candor eval prepare disflqa: {exc}", file=sys.stderr)
        return 2
    print_written(out)
    return 0
