"""Small text utilities shared by the services: words, content terms, sentences."""

from __future__ import annotations

import re
import unicodedata

_WORD = re.compile(r"[\w][\w'’\-\.]*[\w]|[\w]", re.UNICODE)
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[\"'(\[]?[A-Z0-9])|\n{2,}|\n(?=[-*#\d])")

STOPWORDS = frozenset(
    """a about above after again against all am an and any are as at be because been before
    being below between both but by can could did do does doing down during each few for from
    further had has have having he her here hers herself him himself his how i if in into is it
    its itself just me more most my myself no nor not now of off on once only or other our ours
    ourselves out over own same she should so some such than that the their theirs them
    themselves then there these they this those through to too under until up very was we were
    what when where which while who whom why will with would you your yours yourself yourselves
    get got use used using does do can i'm it's what's how's there's tell know please""".split()
)


def words(text: str) -> list[str]:
    """Lower-cased word tokens, with apostrophes and inner dots/hyphens kept (e.g. PX-412)."""
    folded = unicodedata.normalize("NFKC", text).casefold()
    return [w.strip(".'’-") for w in _WORD.findall(folded) if w.strip(".'’-")]


def stem(word: str) -> str:
    """A deliberately light English stemmer: enough to match plural and -ing/-ed forms."""
    for suffix in ("ing", "ed", "es", "s"):
        if len(word) > len(suffix) + 2 and word.endswith(suffix):
            return word[: -len(suffix)]
    return word


def content_terms(text: str) -> list[str]:
    """Stemmed non-stopword terms, in order, without duplicates."""
    seen: dict[str, None] = {}
    for w in words(text):
        if w not in STOPWORDS and (len(w) > 1 or w.isdigit()):
            seen.setdefault(stem(w), None)
    return list(seen)


def sentences(text: str) -> list[str]:
    """Split text into sentences; markdown headings and list items stand alone."""
    out: list[str] = []
    for block in _SENTENCE_END.split(text):
        s = " ".join(block.split()).lstrip("#*- ").strip()
        if s:
            out.append(s)
    return out
