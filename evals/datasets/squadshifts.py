"""Build a candor evaluation dataset from SQuADShifts (``candor eval prepare squadshifts``).

Source: the same pinned ``bigbench==1.0.0`` sdist as Disfl-QA, members
``bigbench/benchmark_tasks/squad_shifts/<domain>_v1.0.json``. SQuADShifts (Miller et al., 2020)
collected new SQuAD 1.1-style questions with the original SQuAD pipeline over four other kinds
of text: Amazon product reviews, Reddit comments, New York Times articles and newer Wikipedia
articles, about 10,000 questions each. Review and forum text is much nearer a real tenant's
knowledge base than HaluEval's Wikipedia facts, and nothing here was fitted on it.

Every source question is answerable from its paragraph, so the dataset has no near misses (a
synthetic one would repeat HaluEval's construction; Disfl-QA has the human-written kind). The
build is Disfl-QA's (:func:`evals.datasets.disflqa.build`): paragraphs shuffled with ``seed``,
``absent_fraction`` of the questions (whole paragraphs) withheld from the index as
**topic_absent**, the rest **answerable**; a withheld question whose answer an indexed
paragraph holds with half of its other terms is dropped; train/test by whole paragraphs, balanced
within each half.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from evals.datasets import builder, disflqa
from evals.datasets.builder import write_built
from evals.datasets.disflqa import BuildOptions, Example
from evals.datasets.pinned import SourceError

DOMAINS: tuple[str, ...] = ("amazon_reviews", "reddit", "nyt", "new_wiki")
_MEMBER_DIR = "bigbench/benchmark_tasks/squad_shifts/"
BUILDER_VERSION = 1
#: Half the questions withheld: the source has no unanswerable questions to balance with.
DEFAULT_OPTIONS = BuildOptions(absent_fraction=0.5, split_within_halves=True)


def member(domain: str) -> str:
    """The sdist member holding ``domain``'s questions."""
    if domain not in DOMAINS:
        raise ValueError(f"unknown SQuADShifts domain {domain!r} (one of {', '.join(DOMAINS)})")
    return f"{_MEMBER_DIR}{domain}_v1.0.json"


def parse_squad(data: bytes, where: str) -> list[Example]:
    """The questions of a SQuAD 1.1-format file, numbered in file order, each with its
    paragraph and first reference answer; a malformed file is a :class:`SourceError`."""
    try:
        articles = json.loads(data.decode("utf-8"))["data"]
        out: list[Example] = []
        for article in articles:
            for paragraph in article["paragraphs"]:
                context = " ".join(str(paragraph["context"]).split())
                for qa in paragraph["qas"]:
                    question = " ".join(str(qa["question"]).split())
                    answer = " ".join(str(qa["answers"][0]["text"]).split())
                    if not (question and context and answer):
                        raise SourceError(f"{where}: question {len(out)}: empty field")
                    out.append(Example(len(out), question, context, answer))
    except (ValueError, KeyError, TypeError, IndexError) as exc:
        raise SourceError(f"{where}: not a SQuAD-format file ({exc!r})") from exc
    return out


def prepare(
    domain: str,
    out_dir: Path | str | None = None,
    options: BuildOptions = DEFAULT_OPTIONS,
    *,
    source: Path | str | None = None,
    cache_dir: Path | str = disflqa.DEFAULT_CACHE_DIR,
) -> Path:
    """Fetch the sdist (if needed), build ``domain`` and write it; returns the output directory."""
    name = member(domain)
    origin, data = disflqa.read_task(
        source if source is not None else disflqa.fetch_sdist(cache_dir), name
    )
    built = disflqa.build(parse_squad(data, name), options, name=f"squadshifts-{domain}")
    manifest: dict[str, Any] = {
        **built.manifest,
        "builder_version": BUILDER_VERSION,
        "domain": domain,
        "source": origin,
    }
    out = Path(out_dir) if out_dir is not None else default_out_dir(domain, options)
    return write_built(out, built.corpus, built.questions, manifest)


def default_out_dir(domain: str, options: BuildOptions) -> Path:
    """``.cache/datasets/squadshifts-<domain>[-n<limit>][-s<seed>]`` under the repository."""
    return builder.default_out_dir(
        f"squadshifts-{domain}", options.limit, options.seed, DEFAULT_OPTIONS.seed
    )


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """The ``candor eval prepare squadshifts`` options: a domain, then Disfl-QA's."""
    ap.add_argument("domain", choices=DOMAINS, help="which kind of text")
    disflqa.add_arguments(
        ap,
        DEFAULT_OPTIONS,
        source_count="~10,000 of the domain",
        source_help="the bigbench sdist or the domain's JSON file",
    )


def run(args: argparse.Namespace) -> int:
    try:
        options = disflqa.options_from(args, split_within_halves=True)
        out = prepare(args.domain, args.out, options, source=args.source, cache_dir=args.cache_dir)
    except (SourceError, ValueError) as exc:
        print(f"candor eval prepare squadshifts: {exc}", file=sys.stderr)
        return 2
    disflqa.print_written(out)
    return 0
