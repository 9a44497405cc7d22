"""Small text utilities shared by the services: words, content terms, sentences."""

from __future__ import annotations

import re
import unicodedata
from functools import lru_cache

_WORD = re.compile(r"[\w][\w'’\-\.]*[\w]|[\w]", re.UNICODE)
_SENTENCE_GAP = re.compile(r"(?<=[.!?\u061f])\s+(?=[\"'(\[]?(\w))")
"""A gap after terminal punctuation (Arabic's question mark too), before a word; it ends a
sentence when that word starts with a digit or a letter that is not lower case, in any script:
the ASCII-only [A-Z0-9] it was never split Arabic, Hebrew, Cyrillic or Greek text, nor before
"Émile", and the extractive answer quoted a curated question as a statement."""
_BLOCK_START = re.compile(r"^\s*(#{1,6}\s|[-*+]\s|\d{1,3}[.)]\s)")
_NUMBERED = re.compile(r"^\s*(\d{1,3}[.)])\s+")
# Scripts written without spaces between words (Thai, Lao, Myanmar, Khmer, kana, bopomofo, CJK
# ideographs, half-width katakana): split on whitespace, a whole paragraph of them is one
# "word", so a 5,000-character Chinese document was one chunk embedded only up to its first
# 256 tokens, and the generator's budget counted it as two tokens.
_UNSPACED = (
    "\u0e00-\u0eff\u1000-\u109f\u1780-\u17ff\u3040-\u30ff\u3100-\u312f"
    "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uff66-\uff9f"
)
UNIT = re.compile(rf"[{_UNSPACED}]\s*|[^\s{_UNSPACED}]+\s*")
"""A unit of text for chunk windows and token budgets, with its trailing whitespace: a
whitespace-separated word, or one character of a script written without spaces."""

STOPWORDS = frozenset(
    [
        "a",
        "about",
        "above",
        "after",
        "again",
        "against",
        "all",
        "am",
        "an",
        "and",
        "any",
        "are",
        "as",
        "at",
        "be",
        "because",
        "been",
        "before",
        "being",
        "below",
        "between",
        "both",
        "but",
        "by",
        "can",
        "could",
        "did",
        "do",
        "does",
        "doing",
        "down",
        "during",
        "each",
        "few",
        "for",
        "from",
        "further",
        "had",
        "has",
        "have",
        "having",
        "he",
        "her",
        "here",
        "hers",
        "herself",
        "him",
        "himself",
        "his",
        "how",
        "i",
        "if",
        "in",
        "into",
        "is",
        "it",
        "its",
        "itself",
        "just",
        "me",
        "more",
        "most",
        "my",
        "myself",
        "no",
        "nor",
        "not",
        "now",
        "of",
        "off",
        "on",
        "once",
        "only",
        "or",
        "other",
        "our",
        "ours",
        "ourselves",
        "out",
        "over",
        "own",
        "same",
        "she",
        "should",
        "so",
        "some",
        "such",
        "than",
        "that",
        "the",
        "their",
        "theirs",
        "them",
        "themselves",
        "then",
        "there",
        "these",
        "they",
        "this",
        "those",
        "through",
        "to",
        "too",
        "under",
        "until",
        "up",
        "very",
        "was",
        "we",
        "were",
        "what",
        "when",
        "where",
        "which",
        "while",
        "who",
        "whom",
        "why",
        "will",
        "with",
        "would",
        "you",
        "your",
        "yours",
        "yourself",
        "yourselves",
        "get",
        "got",
        "use",
        "used",
        "using",
        "does",
        "do",
        "can",
        "i'm",
        "it's",
        "what's",
        "how's",
        "there's",
        "tell",
        "know",
        "please",
    ]
)


#: Words that shape a sentence without changing what it says ("How can I …" asks what "How do
#: I …" asks; "you can void" claims what "can be voided" claims). Wh-words, negations and
#: particles are not among them: "why" is not "how", and "turn off" is not "turn on".
SCAFFOLD = frozenset(
    [
        "a",
        "an",
        "the",
        "i",
        "me",
        "my",
        "mine",
        "we",
        "us",
        "our",
        "ours",
        "you",
        "your",
        "yours",
        "it",
        "its",
        "to",
        "do",
        "does",
        "did",
        "can",
        "could",
        "would",
        "will",
        "shall",
        "may",
        "might",
        "is",
        "are",
        "am",
        "was",
        "were",
        "be",
        "please",
        "kindly",
    ]
)


@lru_cache(maxsize=65536)
def zipf(word: str, language: str = "en") -> float:
    """How common ``word`` is in ``language`` (wordfreq's Zipf scale: ~3 is once per million
    words); 0 for a language wordfreq does not know."""
    from wordfreq import available_languages, zipf_frequency

    if language not in available_languages():
        return 0.0
    return float(zipf_frequency(word, language))


def units(text: str) -> list[str]:
    """The text's :data:`UNIT` s in order; joined, they give the text back without its leading
    whitespace."""
    return UNIT.findall(text)


def words(text: str) -> list[str]:
    """Lower-cased word tokens, with apostrophes and inner dots/hyphens kept (e.g. PX-412)."""
    folded = unicodedata.normalize("NFKC", text).casefold().replace("’", "'")
    return [w.strip(".'’-") for w in _WORD.findall(folded) if w.strip(".'’-")]


def stem(word: str) -> str:
    """A deliberately light English stemmer: enough to match plural and -ing/-ed forms."""
    if len(word) > 4 and word.endswith("ies"):
        return word[:-3] + "y"
    if len(word) > 4 and word.endswith(("sses", "shes", "ches", "xes", "zes")):
        return word[:-2]
    for suffix in ("ing", "ed", "s"):
        if len(word) > len(suffix) + 2 and word.endswith(suffix) and not word.endswith("ss"):
            return word[: -len(suffix)]
    return word


def content_terms(text: str) -> list[str]:
    """Stemmed non-stopword terms, in order, without duplicates."""
    return list(_content_terms(text))


@lru_cache(maxsize=16384)
def _content_terms(text: str) -> tuple[str, ...]:
    # Evidence chunks recur across decisions; caching keeps the gate well under a millisecond.
    seen: dict[str, None] = {}
    for w in words(text):
        if w not in STOPWORDS and (len(w) > 1 or w.isdigit()):
            seen.setdefault(stem(w), None)
    return tuple(seen)


def _blocks(text: str) -> list[str]:
    """Paragraphs, headings and list items; hard-wrapped lines join their paragraph."""
    blocks: list[list[str]] = []
    after_heading = True
    for line in text.splitlines():
        if not line.strip():
            after_heading = True
            continue
        if after_heading or _BLOCK_START.match(line):
            blocks.append([])
        blocks[-1].append(line.strip())
        after_heading = line.lstrip().startswith("#")
    return [" ".join(b) for b in blocks]


def _split_sentences(body: str) -> list[str]:
    pieces, start = [], 0
    for gap in _SENTENCE_GAP.finditer(body):
        first = gap.group(1)
        if first.isdigit() or (first.isalpha() and not first.islower()):
            pieces.append(body[start : gap.start()])
            start = gap.end()
    pieces.append(body[start:])
    return pieces


def sentences(text: str) -> list[str]:
    """Split text into sentences; markdown headings and list items stand alone."""
    return list(_sentences(text))


@lru_cache(maxsize=4096)
def _sentences(text: str) -> tuple[str, ...]:
    out: list[str] = []
    for block in _blocks(text):
        numbered = _NUMBERED.match(block)
        prefix = numbered.group(1) + " " if numbered else ""
        body = block[numbered.end() :] if numbered else block.lstrip("#*-+ ")
        for i, piece in enumerate(_split_sentences(body)):
            s = " ".join(piece.split())
            if s:
                out.append(prefix + s if i == 0 else s)
    return tuple(out)


# Expected answer type: what kind of token an answer to the question must contain.
_ANSWER_TYPES: tuple[tuple[str, re.Pattern[str]], ...] = (
    (
        "duration",
        re.compile(
            r"^\s*(how long|for how long|how many (days|hours|minutes|weeks|months|years))\b", re.I
        ),
    ),
    (
        "money",
        re.compile(
            r"\b(how much (does|do|is|are|will|would)\b.*\b(cost|charge|fee|price|pay)|what (does|do|is|are) .*\b(cost|price|fee|charge)s?\b|how much is)",
            re.I,
        ),
    ),
    (
        "number",
        re.compile(
            r"\b(how many|how much|how often|what percentage|what number|what is the (maximum|minimum|limit))\b",
            re.I,
        ),
    ),
    (
        "date",
        re.compile(r"^\s*(when|what (date|day|time|year|month)|which (date|day|year))\b", re.I),
    ),
    ("person", re.compile(r"^\s*(who|whom|whose)\b", re.I)),
)
_TYPE_EVIDENCE: dict[str, re.Pattern[str]] = {
    "duration": re.compile(
        r"\b\d[\d,.]*\s*(-|to)?\s*(business\s+|working\s+|calendar\s+)?(second|minute|hour|day|week|month|year)s?\b|\b(one|two|three|four|five|six|seven|ten|twelve|thirty)\s+(hour|day|week|month|year)s?\b",
        re.I,
    ),
    "money": re.compile(r"[$€£¥]\s?\d|\b\d[\d,.]*\s*(usd|eur|gbp|dollars?|euros?|cents?)\b", re.I),
    "number": re.compile(
        r"\d|\b(one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|twenty|thirty|hundred|thousand|million|once|twice|daily|weekly|monthly)\b",
        re.I,
    ),
    "date": re.compile(
        r"\b(1[5-9]\d\d|20\d\d)\b|\b(jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec)[a-z]*\.?\s+\d|\b(monday|tuesday|wednesday|thursday|friday|saturday|sunday|daily|weekday|weekend|morning|evening|midnight|noon)\b|\d{1,2}[:.]\d\d|\b\d{1,2}\s*(am|pm)\b",
        re.I,
    ),
    "person": re.compile(r"\b[A-Z][a-z]+(\s+[A-Z][a-z]+)+\b"),
}


def expected_answer_type(question: str) -> str:
    """The kind of fact the question asks for (duration, money, number, date, person), or ''."""
    # Each clause counts: "I bought a label last week. How long do I have to ...?"
    clauses = [c for c in re.split(r"(?<=[.?!;])\s+|,\s+", question) if c.strip()] or [question]
    for name, pattern in _ANSWER_TYPES:
        if any(pattern.search(clause) for clause in clauses):
            return name
    return ""


def has_answer_type(text: str, answer_type: str) -> bool:
    """Whether ``text`` contains a token of the expected type ('' matches everything)."""
    pattern = _TYPE_EVIDENCE.get(answer_type)
    return True if pattern is None else bool(pattern.search(text))


def is_blank(text: str) -> bool:
    """Nothing but whitespace, control characters (NUL, BEL, ESC, ...) and invisible format
    characters (zero-width space, BOM, ...): nothing anyone could read or search for."""
    return all(c.isspace() or unicodedata.category(c) in ("Cc", "Cf") for c in text)
