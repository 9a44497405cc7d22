"""Citation verification: every quoted span must occur in the chunk it cites."""

from __future__ import annotations

import difflib
import re
import unicodedata
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

_QUOTES = str.maketrans({"‘": "'", "’": "'", "“": '"', "”": '"', "„": '"', "´": "'", "`": "'"})
FUZZY_MIN_RATIO = 0.9
MIN_QUOTE_WORDS = 3
"""A quote shorter than this does not stand for the sentence around it."""


@dataclass(frozen=True)
class CitationClaim:
    chunk_id: str
    quote: str
    sentence: str = ""
    """The whole sentence the citation closes, when the quote is only part of it."""


@dataclass(frozen=True)
class CitationCheck:
    chunk_id: str
    quote: str
    verified: bool
    failure: str = ""


_NEGATIONS = frozenset(
    [
        *("not", "no", "never", "cannot", "without", "none", "nor", "neither", "nothing"),
        *("nobody", "nowhere", "unable", "except", "only"),
    ]
)
_NUMBER_WORDS = frozenset(
    [
        *("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"),
        *("eleven", "twelve", "fifteen", "twenty", "thirty", "forty", "fifty", "sixty"),
        *("hundred", "thousand", "million", "billion", "half", "twice", "double", "triple"),
        *("first", "second", "third", "once", "dozen", "quarter"),
    ]
)
# A number with its decimal or thousands separators and unit sign is one token: "2.5%" must not
# compare equal to "5.2%" by its digits.
_TOKEN = re.compile(r"\d+(?:[.,:/]\d+)*%?|\w+(?:'\w+)*")


def _tokens(text: str) -> list[str]:
    return _TOKEN.findall(text)


def _is_critical(token: str) -> bool:
    return (
        any(ch.isdigit() for ch in token)
        or token in _NEGATIONS
        or token in _NUMBER_WORDS
        or token.endswith("n't")
    )


def critical_tokens(text: str) -> list[str]:
    """Tokens whose change flips a claim, in order: numbers (digits or words) and negations.
    In order, so "a 6-digit code every 30 seconds" is not "a 30-digit code every 6 seconds"."""
    return [t for t in _tokens(text) if _is_critical(t)]


def _one_edit(a: str, b: str) -> bool:
    """At most one inserted, deleted or replaced character."""
    if abs(len(a) - len(b)) > 1:
        return False
    if len(a) > len(b):
        a, b = b, a
    i = 0
    while i < len(a) and a[i] == b[i]:
        i += 1
    return a[i:] == b[i + 1 :] or (len(a) == len(b) and a[i + 1 :] == b[i + 1 :])


def _typo(source_word: str, quote_word: str) -> bool:
    """A misspelling, not another word: one edit in a word of four letters or more that is
    neither a number nor a negation ("older" is not a typo of "younger")."""
    return (
        min(len(source_word), len(quote_word)) >= 4
        and not _is_critical(source_word)
        and not _is_critical(quote_word)
        and _one_edit(source_word, quote_word)
    )


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
    # Small typos are tolerated; a changed number, a dropped "not" or another word is not a
    # typo: word by word, the quote must be the source's span with misspellings at most.
    span = _tokens(_widen(s, s[blocks[0].a : blocks[-1].a + blocks[-1].size]))
    words = _tokens(q)
    if critical_tokens(" ".join(words)) != critical_tokens(" ".join(span)):
        return False
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(
        None, span, words, autojunk=False
    ).get_opcodes():
        typos = tag == "replace" and i2 - i1 == j2 - j1
        if tag == "equal" or (
            typos and all(_typo(a, b) for a, b in zip(span[i1:i2], words[j1:j2], strict=True))
        ):
            continue
        return False
    return True


def claim_holds(claim: str, quote: str, source: str) -> str:
    """Why a cited sentence does not hold against ``source`` ("" when it does).

    The sentence holds by its quote only when the quote carries it: several words, and every
    number and negation the sentence states also stated by the source. Otherwise the whole
    sentence must hold as a quote, so "codes never expire, as 'codes expire'" fails.
    """
    if not quote_holds(quote, source):
        return "quote not found in the cited evidence"
    if normalise(claim) == normalise(quote):
        return ""
    if len(_tokens(normalise(quote))) < MIN_QUOTE_WORDS:
        return "" if quote_holds(claim, source) else "the quote is too short to carry the sentence"
    stated = set(critical_tokens(normalise(source)))
    if missing := [t for t in critical_tokens(normalise(claim)) if t not in stated]:
        return f"the sentence states {', '.join(missing)} beyond its quote"
    return ""


def verify_citations(
    citations: Sequence[CitationClaim],
    evidence: Mapping[str, str],
    withheld: Collection[str] = (),
) -> list[CitationCheck]:
    """Check each citation names evidence the model was shown and quotes it faithfully.

    ``evidence`` is what the model saw (after the context budget); ``withheld`` names admitted
    chunks the budget kept from it, so citing one is reported as such.
    """
    out = []
    for c in citations:
        source = evidence.get(c.chunk_id)
        if source is None:
            why = (
                "cites evidence trimmed from the model's context"
                if c.chunk_id in withheld
                else "cites evidence the gate did not admit"
            )
            out.append(CitationCheck(c.chunk_id, c.quote, False, why))
        elif why := claim_holds(c.sentence or c.quote, c.quote, source):
            out.append(CitationCheck(c.chunk_id, c.quote, False, why))
        else:
            out.append(CitationCheck(c.chunk_id, c.quote, True))
    return out
