"""Citation verification: every quoted span must occur in the chunk it cites."""

from __future__ import annotations

import difflib
import re
import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

_QUOTES = str.maketrans({"‘": "'", "’": "'", "“": '"', "”": '"', "„": '"', "´": "'", "`": "'"})
FUZZY_MIN_RATIO = 0.9


@dataclass(frozen=True)
class CitationClaim:
    chunk_id: str
    quote: str


@dataclass(frozen=True)
class CitationCheck:
    chunk_id: str
    quote: str
    verified: bool
    failure: str = ""


_NEGATIONS = frozenset(
    [
        *("not", "no", "never", "cannot", "can't", "won't", "don't", "doesn't"),
        *("isn't", "aren't", "wasn't", "without", "none", "nor"),
    ]
)


def _critical(text: str) -> set[str]:
    """Tokens whose change flips a claim: numbers and negations."""
    tokens = re.findall(r"[\w']+", text)
    return {t for t in tokens if any(ch.isdigit() for ch in t) or t in _NEGATIONS}


def _widen(source: str, span: str) -> str:
    """Extend an aligned span to whole words, so a cut-off number is compared whole."""
    start = source.find(span)
    end = start + len(span)
    while start > 0 and not source[start - 1].isspace():
        start -= 1
    while end < len(source) and not source[end].isspace():
        end += 1
    return source[start:end]


def normalise(text: str) -> str:
    """Case, quote style, markdown emphasis and whitespace do not count against a quote."""
    text = unicodedata.normalize("NFKC", text).translate(_QUOTES).casefold()
    text = re.sub(r"[*_]{1,3}", "", text)
    return " ".join(text.split())


def quote_holds(quote: str, source: str) -> bool:
    """True if ``quote`` occurs in ``source`` after normalising, allowing small edits."""
    q, s = normalise(quote), normalise(source)
    if not q:
        return False
    if q in s:
        return True
    matcher = difflib.SequenceMatcher(None, s, q, autojunk=False)
    blocks = [b for b in matcher.get_matching_blocks() if b.size]
    matched = sum(b.size for b in blocks)
    if not blocks or matched / len(q) < FUZZY_MIN_RATIO:
        return False
    # Small typos are tolerated; a changed number or a dropped "not" is not a typo.
    span = s[blocks[0].a : blocks[-1].a + blocks[-1].size]
    return _critical(q) == _critical(_widen(s, span))


def verify_citations(
    citations: Sequence[CitationClaim], evidence: Mapping[str, str]
) -> list[CitationCheck]:
    """Check each citation names admitted evidence and quotes it faithfully."""
    out = []
    for c in citations:
        source = evidence.get(c.chunk_id)
        if source is None:
            out.append(
                CitationCheck(c.chunk_id, c.quote, False, "cites evidence the gate did not admit")
            )
        elif not quote_holds(c.quote, source):
            out.append(
                CitationCheck(c.chunk_id, c.quote, False, "quote not found in the cited evidence")
            )
        else:
            out.append(CitationCheck(c.chunk_id, c.quote, True))
    return out
