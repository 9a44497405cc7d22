"""``candor eval prepare helpcentre``: the bundled sample help centre in the generic format.

34 short product articles (markdown) and 35 hand-labelled questions: 20 answerable (gold =
article id) and 15 unanswerable, several of them near misses ("what is the refund window for
gift cards?" when only label refunds are covered). Unsplit: it is a second, out-of-domain check
of a policy fitted elsewhere, never something to fit on.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from evals.datasets.format import Passage, load_questions, write_dataset

SAMPLES = Path(__file__).resolve().parents[2] / "samples" / "helpcentre"
DEFAULT_OUT = Path(".cache/datasets/helpcentre")


def passages(samples: Path = SAMPLES) -> list[Passage]:
    """One passage per article; the id is the file stem, the title its first heading."""
    out = []
    for path in sorted(samples.glob("[0-9]*.md")):
        text = path.read_text(encoding="utf-8")
        first = text.splitlines()[0] if text else ""
        title = first.lstrip("#").strip() if first.startswith("#") else path.stem
        body = text.split("\n", 1)[1].strip() if first.startswith("#") else text
        out.append(Passage(id=path.stem, title=title, text=body))
    return out


def prepare(out: Path, samples: Path = SAMPLES) -> Path:
    corpus = passages(samples)
    questions = load_questions(samples / "questions.jsonl")
    manifest = {
        "name": "helpcentre",
        "source": "samples/helpcentre (written for this project)",
        "passages": len(corpus),
        "questions": len(questions),
        "answerable": sum(q.answerable for q in questions),
    }
    return write_dataset(out, corpus, questions, manifest)


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"default {DEFAULT_OUT}")


def run(args: argparse.Namespace) -> int:
    out = prepare(args.out)
    manifest = json.loads((out / "manifest.json").read_text(encoding="utf-8"))
    print(f"wrote {out}: {json.dumps(manifest)}", file=sys.stderr)
    return 0
