"""How answer verification judges answers written about the sample help centre.

A corpus is JSONL, one answer a line: ``id``, ``question``, ``answer`` (with ``[n]`` markers),
``sources`` (``[file, section heading]`` pairs, numbered from 1 as the prompt numbers them) and
``label`` (``faithful`` or ``wrong``). Each answer is checked as the generator checks an
OpenAI-compatible model's reply: its marked citations against the sections, its uncited
sentences, and, for English answers, its framing words and the names its quotes belong to
(``--no-framing`` leaves those out, to compare). Prints verified and failed counts by label;
``--show`` lists the answers judged against their label.

    python -m evals.citation_corpus samples/citation-corpora/blind-1.jsonl
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from generator_svc.citations import verify_citations
from generator_svc.llm.base import EvidenceItem, GenerationInput
from generator_svc.prompts import framing_of, lead_in_of, parse_marked_citations, uncited_sentences
from retrieval_svc.ingest import sections

HELP_CENTRE = Path(__file__).resolve().parents[1] / "samples" / "helpcentre"


@cache
def _document(name: str) -> tuple[str, dict[str, str]]:
    text = (HELP_CENTRE / name).read_text()
    return text.splitlines()[0].lstrip("# "), dict(sections(text))


def section(name: str, heading: str) -> EvidenceItem:
    """A help-centre section as ingest stores it (heading, blank line, text), with its
    document's title; the text before the first heading is found by the title."""
    title, found = _document(name)
    if heading in found:
        body = found[heading]
        return EvidenceItem(heading, title, f"{heading}\n\n{body}" if heading else body)
    if heading == title and "" in found:
        return EvidenceItem(heading, title, found[""])
    raise KeyError(f"{name} has no section {heading!r}")


@dataclass(frozen=True)
class Judged:
    verified: bool
    reasons: tuple[str, ...]


def judge(
    answer: str, evidence: tuple[EvidenceItem, ...], question: str = "", framing: bool = True
) -> Judged:
    """Whether ``answer`` verifies against ``evidence`` and, if not, why."""
    numbered = tuple(EvidenceItem(f"c{n}", e.title, e.text) for n, e in enumerate(evidence, 1))
    inp = GenerationInput(question, numbered, language="", tier="confident")
    checks = verify_citations(
        parse_marked_citations(answer, numbered),
        {e.chunk_id: e.text for e in numbered},
        asked=framing_of(inp, answer) if framing else None,
    )
    uncited = [f"cites nothing: {s!r}" for s in uncited_sentences(answer, None, lead_in_of(inp))]
    reasons = tuple(c.failure for c in checks if not c.verified) + tuple(uncited)
    return Judged(bool(checks) and not reasons, reasons)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m evals.citation_corpus", description=__doc__)
    parser.add_argument("corpus", type=Path)
    parser.add_argument(
        "--no-framing",
        action="store_true",
        help="leave the English-only rules (framing words, names) unchecked",
    )
    parser.add_argument("--show", action="store_true", help="list answers judged against label")
    args = parser.parse_args(argv)
    counts: Counter[tuple[str, bool]] = Counter()
    for n, line in enumerate(args.corpus.read_text().splitlines(), 1):
        if not line.strip():
            continue
        row = json.loads(line)
        try:
            evidence = tuple(section(name, heading) for name, heading in row["sources"])
        except KeyError as exc:
            print(f"{args.corpus}:{n}: {exc}", file=sys.stderr)
            return 2
        got = judge(row["answer"], evidence, row.get("question", ""), not args.no_framing)
        counts[row["label"], got.verified] += 1
        if args.show and got.verified != (row["label"] == "faithful"):
            print(f"{row['id']} ({row['label']}): {'; '.join(got.reasons) or 'verified'}")
    for label in sorted({label for label, _ in counts}):
        ok, failed = counts[label, True], counts[label, False]
        print(f"{label}: {ok} of {ok + failed} verified, {failed} failed")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
