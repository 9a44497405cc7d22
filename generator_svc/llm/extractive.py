"""The offline extractive answerer: quotes the evidence sentences that best answer the query.

Deterministic and model-free: sentences are scored by IDF-weighted overlap with the query's
content terms, weighted by their evidence's rank.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import AsyncGenerator, Iterable, Mapping
from typing import NamedTuple

from candor.text import content_terms, expected_answer_type, has_answer_type, sentences
from generator_svc.citations import CitationClaim, normalise
from generator_svc.llm.base import Draft, GenerationInput
from generator_svc.prompts import DEFAULT_CAVEAT

CAVEAT = DEFAULT_CAVEAT + " "
CLARIFY = "Could you say a little more about what you are looking for?"

# Retrieval's order is the best clue to where the answer is: a sentence of the k-th evidence
# chunk weighs 1 / (1 + RANK_DECAY * k). At 0.1 the top chunk's answer was often outscored by
# word overlap further down; at 1.0 HaluEval's train answers held the reference in 72.8% of
# cases instead of 66.7% (SQuADShifts new-wiki train 76.0 against 74.9%; 2026-11-25).
RANK_DECAY = 1.0
# A sentence holding the kind of fact asked for (a duration for "how long") outweighs one that
# merely shares the question's words one rank higher: ANSWER_TYPE_BONUS > 1 + RANK_DECAY.
ANSWER_TYPE_BONUS = 2.5


def _is_label(sentence: str) -> bool:
    """Headings and short list labels name a topic; they do not answer anything."""
    n = len(sentence.split())
    return n < 4 or (n <= 8 and not sentence.rstrip("*_)").endswith((".", "!", "?", ":")))


def _is_question(sentence: str) -> bool:
    return _plain(sentence).rstrip().rstrip("\"'”’)*_ ").endswith(("?", "？", "؟"))


def _plain(sentence: str) -> str:
    """Drop markdown emphasis; citation checks ignore it too."""
    return sentence.replace("**", "").replace("__", "")


_TERMINAL = (".", "!", "?", ":", ";", ")", '"', "'", "\u201d", "\u2019")
_LIST_OR_HEADING = re.compile(r"^\s*(?:[-*+#]|\d+[.)])\s")


class Quote(NamedTuple):
    """One evidence sentence the answer quotes."""

    evidence: int
    """Index into the request's evidence."""
    sentence: str
    cut_head: bool = False
    """The chunk's window starts inside this sentence: its beginning is not in the chunk."""
    cut_tail: bool = False
    """The window ends inside it: its end is not in the chunk."""

    def text(self) -> str:
        """The sentence as the answer shows it, an ellipsis where the window cut it."""
        return (
            f"{'…' if self.cut_head else ''}{_plain(self.sentence)}{'…' if self.cut_tail else ''}"
        )


def _quotes(ei: int, text: str) -> list[Quote]:
    """The chunk's sentences, each marked where the chunk's window cut it.

    Chunks are token windows cut at word boundaries (retrieval_svc.ingest), so a chunk may start
    or end mid-sentence. Shown bare, "Fees for optional extras … are refunded" (the rest of the
    sentence is in the next window) would read as a whole claim the source never made.
    """
    found = sentences(text)
    if not found:
        return []
    last_line = text.rstrip().rsplit("\n", 1)[-1]
    tail = not _plain(found[-1]).rstrip("*_ ").endswith(_TERMINAL) and not (
        _LIST_OR_HEADING.match(last_line)
    )
    # The body's first sentence follows the chunk's heading line, if it has one.
    first = 1 if len(found) > 1 and _is_label(found[0]) else 0
    head = found[first][:1].islower()
    return [
        Quote(ei, sentence, head and i == first, tail and i == len(found) - 1)
        for i, sentence in enumerate(found)
    ]


def _completes(whole: str, part: str, cut: Quote) -> bool:
    """Whether sentence key ``whole`` is the uncut sentence that ``cut`` (key ``part``) is from."""
    if cut.cut_head and cut.cut_tail:
        return part in whole
    return whole.endswith(part) if cut.cut_head else whole.startswith(part)


#: A sentence opening with one of these refers back to the one before it and may narrow it:
#: "The returns portal lets your customers start a return. It is available on the Growth and
#: Scale plans." Quoted alone, the first told a Starter customer the opposite (an outside probe).
_OPENS_REFERRING_BACK = ("It ", "It's ", "This ", "That ", "These ", "Those ", "They ", "Such ")


def _with_follow_ons(chosen: list[Quote], pool: list[Quote]) -> list[Quote]:
    """``chosen``, each followed by the next sentence of its chunk when that one refers back
    to it (not counted against ``max_sentences``: it belongs to the quote before it)."""
    following = {
        (a.evidence, a.sentence): b for a, b in itertools.pairwise(pool) if a.evidence == b.evidence
    }
    quoted = {normalise(q.sentence) for q in chosen}
    out: list[Quote] = []
    for q in chosen:
        out.append(q)
        after = following.get((q.evidence, q.sentence))
        if (
            after is not None
            and _plain(after.sentence).startswith(_OPENS_REFERRING_BACK)
            and not _is_question(after.sentence)
            and normalise(after.sentence) not in quoted
        ):
            quoted.add(normalise(after.sentence))
            out.append(after)
    return out


def matched_weight(idf: Mapping[str, float], matched: Iterable[str]) -> float:
    """The summed weight of ``matched``, the same in any order. A set's order follows the
    process's hash seed, and a plain float sum's last bits follow its order: two sentences
    matching the same terms scored an ulp apart, so which came first (and the answer's text)
    changed from one process to the next."""
    return math.fsum(idf[t] for t in matched)


class ExtractiveBackend:
    name = "extractive"

    def __init__(self, max_sentences: int = 3) -> None:
        self._max = max_sentences

    async def aclose(self) -> None:
        """Nothing to release: the extractive answerer holds no connections."""

    def select(self, inp: GenerationInput) -> list[Quote]:
        """The evidence sentences to quote, best first, at most ``max_sentences``.

        A sentence is quoted once however many chunks hold it, and a cut one is quoted whole
        when another chunk holds all of it.
        """
        query = set(content_terms(inp.query))
        pool = [q for ei, ev in enumerate(inp.evidence) for q in _quotes(ei, ev.text)]
        if not pool or not query:
            return []
        whole: dict[str, Quote] = {}
        for q in pool:
            if not (q.cut_head or q.cut_tail):
                whole.setdefault(normalise(q.sentence), q)
        terms = [set(content_terms(q.sentence)) for q in pool]
        df = {t: sum(1 for ts in terms if t in ts) for t in query}
        idf = {t: math.log(1 + len(pool) / (1 + df[t])) for t in query}
        wanted = expected_answer_type(inp.query)
        scored = []
        for position, (q, ts) in enumerate(zip(pool, terms, strict=True)):
            overlap = matched_weight(idf, query & ts)
            # A question states nothing: a curated answer's own question, quoted, read as if
            # the source said so ("How do I reset my password? [1]" for another question).
            if overlap <= 0 or _is_label(q.sentence) or _is_question(q.sentence):
                continue
            bonus = ANSWER_TYPE_BONUS if wanted and has_answer_type(q.sentence, wanted) else 1.0
            scored.append((bonus * overlap / (1 + RANK_DECAY * q.evidence), position, q))
        scored.sort(key=lambda s: (-s[0], s[1]))
        chosen: list[Quote] = []
        seen: set[str] = set()
        for _, _, q in scored:
            if q.cut_head or q.cut_tail:
                # Quote the whole sentence where another chunk holds it, in this one's place: the
                # one that ends (cut head) or starts (cut tail) with what this chunk holds.
                part = normalise(q.sentence)
                q = next((w for k, w in whole.items() if _completes(k, part, q)), q)
            key = normalise(q.sentence)
            if key not in seen:
                seen.add(key)
                chosen.append(q)
                if len(chosen) == self._max:
                    break
        return _with_follow_ons(chosen, pool)

    async def stream(self, inp: GenerationInput) -> AsyncGenerator[str | Draft, None]:
        input_tokens = len(inp.query.split()) + sum(len(e.text.split()) for e in inp.evidence)
        picked = [] if inp.clarify_only else self.select(inp)
        if not picked:
            yield CLARIFY
            yield Draft(CLARIFY, (), input_tokens, len(CLARIFY.split()), is_clarification=True)
            return
        parts: list[str] = []
        citations: list[CitationClaim] = []
        if inp.tier == "uncertain":
            parts.append(CAVEAT)
            yield CAVEAT
        for q in picked:
            piece = f"{q.text()} [{q.evidence + 1}]"
            piece = piece if not citations else " " + piece
            parts.append(piece)
            citations.append(CitationClaim(inp.evidence[q.evidence].chunk_id, q.sentence))
            yield piece
        text = "".join(parts)
        yield Draft(text, tuple(citations), input_tokens, len(text.split()))
