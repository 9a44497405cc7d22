"""The offline extractive answerer: quotes the evidence sentences that best answer the query.

Deterministic and model-free: sentences are scored by IDF-weighted overlap with the query's
content terms, with a small preference for higher-ranked evidence.
"""

from __future__ import annotations

import math
import re
from collections.abc import AsyncGenerator

from candor.text import content_terms, expected_answer_type, has_answer_type, sentences
from generator_svc.citations import CitationClaim
from generator_svc.llm.base import Draft, GenerationInput

CAVEAT = "This may be incomplete. "
CLARIFY = "Could you say a little more about what you are looking for?"


def _is_label(sentence: str) -> bool:
    """Headings and short list labels name a topic; they do not answer anything."""
    n = len(sentence.split())
    return n < 4 or (n <= 8 and not sentence.rstrip("*_)").endswith((".", "!", "?", ":")))


def _plain(sentence: str) -> str:
    """Drop markdown emphasis; citation checks ignore it too."""
    return sentence.replace("**", "").replace("__", "")


_TERMINAL = (".", "!", "?", ":", ";", ")", '"', "'", "\u201d", "\u2019")
_LIST_OR_HEADING = re.compile(r"^\s*(?:[-*+#]|\d+[.)])\s")


def _whole_sentences(text: str) -> list[tuple[int, str]]:
    """(position, sentence) for the chunk's sentences, without the ones its window cut.

    Chunks are token windows cut at word boundaries (retrieval_svc.ingest), so a chunk may
    start or end mid-sentence. Quoted alone, "…refunds can take up" or "to 21 days because…"
    reads as a whole claim that the source never made; the overlapping chunk holds the whole
    sentence, and that is the one worth quoting.
    """
    found = sentences(text)
    if not found:
        return []
    cut: set[int] = set()
    last_line = text.rstrip().rsplit("\n", 1)[-1]
    if not _plain(found[-1]).rstrip("*_ ").endswith(_TERMINAL) and not _LIST_OR_HEADING.match(
        last_line
    ):
        cut.add(len(found) - 1)
    # The body's first sentence follows the chunk's heading line, if it has one.
    first = 1 if len(found) > 1 and _is_label(found[0]) else 0
    if found[first][:1].islower():
        cut.add(first)
    return [(i, s) for i, s in enumerate(found) if i not in cut]


class ExtractiveBackend:
    name = "extractive"

    def __init__(self, max_sentences: int = 3) -> None:
        self._max = max_sentences

    async def aclose(self) -> None:
        """Nothing to release: the extractive answerer holds no connections."""

    def select(self, inp: GenerationInput) -> list[tuple[int, str]]:
        """(evidence index, sentence) pairs, best first, at most ``max_sentences``."""
        query = set(content_terms(inp.query))
        pool: list[tuple[int, int, str, set[str]]] = []
        for ei, ev in enumerate(inp.evidence):
            for si, sentence in _whole_sentences(ev.text):
                pool.append((ei, si, sentence, set(content_terms(sentence))))
        if not pool or not query:
            return []
        df = {t: sum(1 for *_, terms in pool if t in terms) for t in query}
        idf = {t: math.log(1 + len(pool) / (1 + df[t])) for t in query}
        wanted = expected_answer_type(inp.query)
        scored = []
        for ei, si, sentence, terms in pool:
            overlap = sum(idf[t] for t in query & terms)
            if overlap <= 0 or _is_label(sentence):
                continue
            # A sentence holding the kind of fact asked for (a duration for "how long") wins ties
            # against sentences that merely share the question's words.
            bonus = 1.5 if wanted and has_answer_type(sentence, wanted) else 1.0
            scored.append((bonus * overlap / (1 + 0.1 * ei), ei, si, sentence))
        scored.sort(key=lambda s: (-s[0], s[1], s[2]))
        chosen = scored[: self._max]
        return [(ei, sentence) for _, ei, _, sentence in chosen]

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
        for ei, sentence in picked:
            piece = f"{_plain(sentence)} [{ei + 1}]"
            piece = piece if not citations else " " + piece
            parts.append(piece)
            citations.append(CitationClaim(inp.evidence[ei].chunk_id, sentence))
            yield piece
        text = "".join(parts)
        yield Draft(text, tuple(citations), input_tokens, len(text.split()))
