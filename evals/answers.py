"""Answer accuracy: does the configured generator's answer, from the evidence the gate would
admit, contain the dataset's reference answer?

The match is lenient and deterministic (SQuAD-style normalisation, then the reference's tokens
must appear in the answer: all of them for short references, 80% for long ones), so an
extractive answer that quotes the right sentence counts. Yes/no references are marked
``yes_no`` and left out of the accuracy: a quoting answerer never says "yes"; a reference that
goes on after its "Yes," is judged on the words that follow when there are three or more.
"""

from __future__ import annotations

import re
import string
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass

from generator_svc.llm.base import Draft, EvidenceItem, GenerationInput, LLMBackend

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = str.maketrans("", "", string.punctuation)
LONG_REFERENCE = 4
"""References with more tokens than this need 80% of them, not all."""


def normalise(text: str) -> list[str]:
    """Lower case, no punctuation (ASCII or Unicode: "refunded…" is "refunded") or articles,
    whitespace tokens."""
    bare = "".join(c for c in text.lower().translate(_PUNCT) if unicodedata.category(c)[0] != "P")
    return _ARTICLES.sub(" ", bare).split()


#: "Yes, on the top rack": the words after the yes are what a quoting answer can hold.
_YES_LEAD = re.compile(r"\A\s*yes\b\s*[,.;:!\u2013\u2014]\s*", re.IGNORECASE)
YES_REST_MIN_TOKENS = 3
"""Fewer words after a leading "Yes," ("Yes, it is.") say nothing a quote could be judged on:
such a reference is a yes/no one."""


def _judged_tokens(reference: str) -> list[str] | None:
    """The reference's tokens an answer must hold; ``None`` for a yes/no reference.

    A leading "Yes," is left out: an extractive answer quotes the evidence and never says it,
    so "Yes, on the top rack" was scored wrong against a quote of "safe on the top rack". A
    leading "No," stays: without it the rest can say the opposite of the reference."""
    tokens = normalise(reference)
    if tokens in (["yes"], ["no"]):
        return None
    lead = _YES_LEAD.match(reference)
    if lead is None:
        return tokens
    rest = normalise(reference[lead.end() :])
    return rest if len(rest) >= YES_REST_MIN_TOKENS else None


def is_yes_no(reference: str) -> bool:
    """A reference a quoting answer cannot be judged on: "yes", "no", "Yes, it is."."""
    return _judged_tokens(reference) is None


def contains_reference(answer: str, reference: str) -> bool:
    """True when the answer holds the reference's tokens (see the module docstring and
    :func:`_judged_tokens`)."""
    ref = _judged_tokens(reference) or normalise(reference)
    if not ref:
        return False
    have = set(normalise(answer))
    found = sum(1 for t in ref if t in have)
    return found == len(ref) if len(ref) <= LONG_REFERENCE else found >= 0.8 * len(ref)


@dataclass(frozen=True)
class AnswerCheck:
    text: str
    correct: bool | None
    """None when the reference is yes/no (not judged)."""


async def generate(
    backend: LLMBackend, query: str, evidence: Sequence[EvidenceItem], tier: str = "confident"
) -> str:
    """The backend's final answer text for ``query`` over ``evidence``."""
    final = ""
    async for event in backend.stream(GenerationInput(query, tuple(evidence), "en", tier)):
        if isinstance(event, Draft):
            final = event.text
    return final


async def check(
    backend: LLMBackend, query: str, reference: str, evidence: Sequence[EvidenceItem]
) -> AnswerCheck:
    text = await generate(backend, query, evidence)
    return AnswerCheck(text, None if is_yes_no(reference) else contains_reference(text, reference))
