"""Counterfactual negatives for the evidence reader: a positive with its answer taken out.

Reading the 25 HaluEval train negatives the shipped reader scores highest (2026-11-29) found
that 17 keep the answering sentence but not the answer: its name replaced by a pronoun ("*She*
is the godmother of …") or by a wrong entity. Probed on the 2,000 build's train questions,
reader v4 scores its own answering passage above the same passage with the answer swapped for
a pronoun only 66% of the time. These pairs ask for exactly that distinction: each positive
whose answer string can be located gets a twin with the answer replaced, labelled a near miss,
so the within-question ranking loss pits the two against each other.
"""

from __future__ import annotations

import random
import re
from collections.abc import Mapping, Sequence

from candor.text import content_terms
from evals.datasets import halueval
from evals.reader_data import Pair

_WHO = re.compile(r"^\s*(who|whom|whose)\b", re.I)


def answer_kind(answer: str) -> str:
    """``number`` (holds a digit), ``name`` (capitalised) or ``other``: a swapped-in wrong
    answer is drawn from the same kind, so the text still reads like an answer."""
    if any(ch.isdigit() for ch in answer):
        return "number"
    return "name" if answer[:1].isupper() else "other"


def _pronoun(question: str, rng: random.Random) -> str:
    return rng.choice(("he", "she")) if _WHO.search(question) else "it"


def _opens_sentence(text: str, at: int) -> bool:
    return at == 0 or text[:at].rstrip().endswith((".", "!", "?"))


def _replace(pattern: re.Pattern[str], text: str, replacement: str) -> str:
    def sub(m: re.Match[str]) -> str:
        start = _opens_sentence(text, m.start())
        return replacement[:1].upper() + replacement[1:] if start else replacement

    return pattern.sub(sub, text)


def counterfactual_pairs(
    pairs: Sequence[Pair], answers: Mapping[int, str], seed: int = 0, swap_share: float = 0.5
) -> list[Pair]:
    """One near-miss twin per positive whose answer occurs in its evidence and not in its
    question: the answer replaced by a pronoun where it opens every sentence it is in (the
    failure read by hand; a pronoun mid-sentence would teach the reader to spot bad grammar),
    otherwise, and for ``swap_share`` of the rest, by another question's answer of the same
    kind. Twins that keep any word of the answer the question lacks are dropped."""
    rng = random.Random(seed)
    pool: dict[str, list[str]] = {}
    # Wrong answers come from these pairs' own questions: an evaluated question's answer must
    # not reach training, even as a wrong entity.
    own_answers = {answers[p.question_line] for p in pairs if p.question_line in answers}
    for answer in sorted(own_answers):
        if halueval.answer_pattern(answer) is not None:
            pool.setdefault(answer_kind(answer), []).append(answer)
    out: list[Pair] = []
    for p in pairs:
        answer = answers.get(p.question_line, "")
        if p.label != "answers" or not answer:
            continue
        pattern = halueval.locate_answer(answer, p.evidence)
        if pattern is None or pattern.search(p.question):
            continue
        kind = answer_kind(answer)
        subject = kind != "number" and all(
            _opens_sentence(p.evidence, m.start()) for m in pattern.finditer(p.evidence)
        )
        if not subject or rng.random() < swap_share:
            rivals = [
                a
                for a in pool.get(kind, ())
                if not pattern.search(a) and a.casefold() not in p.question.casefold()
            ]
            if not rivals:
                continue
            replacement = rng.choice(rivals)
        else:
            replacement = _pronoun(p.question, rng)
        text = _replace(pattern, p.evidence, replacement)
        # Any of the answer's own words left ("Paxton" once "Tom Paxton" is gone) may still
        # name it, and a twin that still answers would teach the opposite.
        own = set(content_terms(answer)) - set(content_terms(p.question))
        if pattern.search(text) or own & set(content_terms(text)):
            continue
        out.append(Pair(p.question_line, p.question, text, "near_miss"))
    return out
