"""Citation verification: every quoted span must occur in the chunk it cites."""

from __future__ import annotations

import difflib
import re
import unicodedata
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache

from candor.text import SCAFFOLD, sentences, stem, zipf

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
    lead_in: str = ""
    """The line a cited list item completes ("Phone support is included in:"), which the
    item's source sentence must say too: "- Basic [1]" alone holds wherever "Basic" stands."""


@dataclass(frozen=True)
class CitationCheck:
    chunk_id: str
    quote: str
    verified: bool
    failure: str = ""


#: Denials in the languages the refusal table speaks, so a German "nicht" is no framing word.
_FOREIGN_DENIALS = frozenset(
    [
        *("nicht", "kein", "keine", "keinen", "keinem", "keiner", "nie", "niemals", "ohne"),
        *("pas", "jamais", "aucun", "aucune", "sans", "nunca", "ningún", "ninguna", "nada"),
        *("non", "mai", "senza", "não", "nenhum", "nenhuma", "niet", "geen", "nooit", "zonder"),
    ]
)
#: Negations that say one thing: "can't", "cannot", "no" and "never" all deny.
_DENIALS = frozenset(
    [
        *("not", "no", "never", "cannot", "none", "nothing", "nobody", "nowhere", "neither"),
        *("nor", "unable", "without"),
        *_FOREIGN_DENIALS,
    ]
)
#: Denials and the conditions that narrow a claim: each flips it when dropped.
_NEGATIONS = _DENIALS | {"except", "only", "unless"}
_NUMBER_WORDS = frozenset(
    [
        *("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"),
        *("eleven", "twelve", "fifteen", "twenty", "thirty", "forty", "fifty", "sixty"),
        *("hundred", "thousand", "million", "billion", "half", "twice", "double", "triple"),
        *("first", "second", "third", "once", "dozen", "quarter"),
    ]
)
_SYMBOLS = "$€£¥<>≤≥"
# A number with its sign, currency, decimal or thousands separators and unit is one token:
# "2.5%" is not "5.2%", "$50" not "€50", "-20°c" not "20°c". Comparison signs and a currency
# standing alone are tokens too ("< 5 ms" is not "> 5 ms").
_TOKEN = re.compile(
    r"(?<!\w)[-+]?[$€£¥]?\d+(?:[.,:/]\d+)*(?:%|°[cf]?)?"
    rf"|[{_SYMBOLS}]"
    r"|\w+(?:'\w+)*"
)
#: Words around a quote that carry nothing to check: "the guide says" frames a claim. Particles
#: and quantifiers ("on", "off", "all", "most") are not among them.
_CONNECTIVES = frozenset(
    [
        "in",
        "of",
        "for",
        "with",
        "at",
        "by",
        "from",
        "as",
        "and",
        "or",
        "that",
        "this",
        "these",
        "those",
        "which",
        "there",
        "here",
        "so",
        "also",
        "too",
        "then",
        "according",
        "say",
        "says",
        "said",
        "state",
        "states",
        "stated",
        "note",
        "notes",
        "mention",
        "mentions",
        "explain",
        "explains",
        "documentation",
        "docs",
        "guide",
        "article",
        "source",
        "evidence",
    ]
)
#: A one-letter change in a word at least this common in English makes another word ("hire"
#: for "fire", "charge" for "change"), not a misspelling.
COMMON_WORD_ZIPF = 3.0


_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")
#: Words whose swap for their opposite flips a claim and that a quote's sentence may hold.
_PAIRS = [
    *[("on", "off"), ("in", "out"), ("up", "down"), ("before", "after"), ("more", "less")],
    *[("most", "least"), ("above", "below"), ("over", "under"), ("always", "never")],
    *[("all", "some"), ("enable", "disable"), ("include", "exclude"), ("minimum", "maximum")],
    *[("increase", "decrease"), ("allow", "block"), ("add", "remove"), ("open", "close")],
]
_ANTONYMS = {**dict(_PAIRS), **{b: a for a, b in _PAIRS}}
#: A word this common (wordfreq Zipf) says little on its own: it may stand elsewhere in the
#: chunk without having been borrowed from another fact.
FUNCTION_WORD_ZIPF = 5.85
QUOTED = re.compile(r"[\"“”„]([^\"“”„]{3,})[\"“”]")
"""A double-quoted span of 3+ characters, in straight or typographic quotes."""
#: A sentence opening with one of these leans on the one before it for its subject ("Each code
#: is valid for 10 minutes" after "SMS codes ..."); any other stands alone.
_ANAPHORS = frozenset(
    [
        *("it", "its", "they", "them", "their", "this", "these", "that", "those", "each"),
        *("both", "he", "she", "his", "her", "such", "there"),
    ]
)
_NEGATING_PREFIXES = ("un", "in", "im", "ir", "il", "dis", "non", "non-")
#: A leading "Yes," or "No," answers the question and is not checked: whether a "No," agrees
#: with its quote depends on the question, which this check does not read ('No, "SMS codes
#: expire after 10 minutes"' verifies; README: a known gap).
_YES_NO = re.compile(r"^(?:yes|no)\b[\s,.!:;-]*")


def bare_yes_no(text: str) -> bool:
    """``text`` is a "Yes." or "No." and nothing else (markup and punctuation aside)."""
    bare = normalise(text)
    return bool(bare) and not _YES_NO.sub("", bare).strip("*_ ")


_WORD = re.compile(r"\w+")
_ITEM_MARK = re.compile(r"^[\s#*+\-\d.)]+")
"""A heading's or list item's marker ("## ", "- ", "1. "): the word after it opens a sentence."""
COMMON_ZIPF = 4.5
"""A word this common (wordfreq Zipf: "usually", "according", "centre") carries no claim of
its own; a rarer one ("premium", "bypass", "rarely") does."""


def _tokens(text: str) -> list[str]:
    # "1,200" is "1200": a thousands separator is not part of the number.
    return _TOKEN.findall(_THOUSANDS.sub("", text))


def _is_critical(token: str) -> bool:
    return (
        any(ch.isdigit() for ch in token)
        or token in _NEGATIONS
        or token in _NUMBER_WORDS
        or token in _SYMBOLS
        or token.endswith("n't")
    )


def critical_tokens(text: str) -> list[str]:
    """Tokens whose change flips a claim, in order: numbers (digits or words, with their sign,
    currency and unit), comparison signs and negations. In order, so "a 6-digit code every 30
    seconds" is not "a 30-digit code every 6 seconds"."""
    return [t for t in _tokens(text) if _is_critical(t)]


def _kind(token: str) -> str:
    """A critical token as compared between a claim and its source: every denial is "not"."""
    if token in _DENIALS or token.endswith("n't"):
        return "not"
    return token


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
    neither a number nor a negation ("older" is not a typo of "younger"), and not one letter
    swapped between two common words ("fire" is not a typo of "hire")."""
    return (
        min(len(source_word), len(quote_word)) >= 4
        and not _is_critical(source_word)
        and not _is_critical(quote_word)
        and _one_edit(source_word, quote_word)
        # A letter swapped between two real words is another word; one letter more or less
        # is a spelling ("canceled", "color", "plans" for "plan's").
        and (
            len(source_word) != len(quote_word)
            or min(zipf(source_word), zipf(quote_word)) < COMMON_WORD_ZIPF
        )
    )


def _widen(source: str, start: int, end: int) -> tuple[int, int]:
    """Extend an aligned span to whole words, so a cut-off number is compared whole."""
    while start > 0 and not source[start - 1].isspace():
        start -= 1
    while end < len(source) and not source[end].isspace():
        end += 1
    return start, end


def normalise(text: str) -> str:
    """Case, quote style, markdown emphasis and whitespace do not count against a quote."""
    text = unicodedata.normalize("NFKC", text).translate(_QUOTES).casefold()
    text = re.sub(r"[*_]{1,3}", "", text)
    return " ".join(text.split())


def _whole_words(s: str, start: int, end: int) -> bool:
    """``s[start:end]`` neither starts nor ends inside a word or number: "used" is not found in
    "unused", "$50" not in "$500", "2" not in "21", "EU" not in "Non-EU"."""
    if s[start].isalnum() and start > 0 and (s[start - 1].isalnum() or s[start - 1] in "-'$€£¥+"):
        return False
    last = end  # just past the quote's last letter or digit: "$5." must not end in "$5.50"
    while last > start and not s[last - 1].isalnum():
        last -= 1
    if last == start or last == len(s):
        return True
    after = s[last]
    if last == end and (after.isalnum() or after in "-'%°"):
        return False
    return not (
        s[last - 1].isdigit() and after in ".,:/" and last + 1 < len(s) and s[last + 1].isdigit()
    )


def _occurrences(q: str, s: str) -> list[tuple[int, int]]:
    """Where normalised quote ``q`` stands in normalised source ``s``: each exact occurrence
    on word edges, else the one place it matches with misspellings at most; [] if nowhere."""
    found = []
    at = s.find(q)
    while at >= 0:
        if _whole_words(s, at, at + len(q)):
            found.append((at, at + len(q)))
        at = s.find(q, at + 1)
    if found:
        return found
    matcher = difflib.SequenceMatcher(None, s, q, autojunk=False)
    blocks = [b for b in matcher.get_matching_blocks() if b.size]
    matched = sum(b.size for b in blocks)
    if not blocks or matched / len(q) < FUZZY_MIN_RATIO:
        return []
    # Small typos are tolerated; a changed number, a dropped "not" or another word is not a
    # typo: word by word, the quote must be the source's span with misspellings at most.
    start, end = _widen(s, blocks[0].a, blocks[-1].a + blocks[-1].size)
    span, words = _tokens(s[start:end]), _tokens(q)
    if critical_tokens(" ".join(words)) != critical_tokens(" ".join(span)):
        return []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(
        None, span, words, autojunk=False
    ).get_opcodes():
        typos = tag == "replace" and i2 - i1 == j2 - j1
        if tag == "equal" or (
            typos and all(_typo(a, b) for a, b in zip(span[i1:i2], words[j1:j2], strict=True))
        ):
            continue
        return []
    return [(start, end)]


def quote_holds(quote: str, source: str) -> bool:
    """True if ``quote`` occurs in ``source`` after normalising, allowing small edits."""
    q = normalise(quote)
    return bool(q) and bool(_occurrences(q, normalise(source)))


def _sentence_spans(source: str, s: str) -> list[tuple[int, int]]:
    """Where each sentence of ``source`` (list items and headings apart) stands in ``s``, its
    normalised text."""
    spans, cursor = [], 0
    for sentence in sentences(source):
        piece = normalise(sentence)
        at = s.find(piece, cursor) if piece else -1
        if at >= 0:
            spans.append((at, at + len(piece)))
            cursor = at + len(piece)
    return spans


def _window(spans: Sequence[tuple[int, int]], s: str, start: int, end: int) -> tuple[int, int]:
    """Where the source sentences a match at ``s[start:end]`` touches begin and end."""
    touched = [(a, b) for a, b in spans if a < end and start < b]
    if not touched:
        return 0, len(s)
    return touched[0][0], touched[-1][1]


def _heading(source: str) -> str:
    """The chunk's heading: ingest puts a section's heading before its text as its own
    paragraph ("Backup codes\n\nEach code ...")."""
    head, sep, _ = source.strip().partition("\n\n")
    head = head.strip().lstrip("#").strip()
    return head if sep and len(head.split()) <= 12 and not head.endswith((".", "!", "?")) else ""


def _context(spans: Sequence[tuple[int, int]], s: str, lo: int, heading: str) -> str:
    """What a claim may lean on besides its quote's sentence: the chunk's heading, and the
    sentence before when the quote's sentence opens by pointing back to it."""
    before = [(a, b) for a, b in spans if b <= lo]
    first = _tokens(s[lo : lo + 40])[:1]
    leans = before and first and first[0] in _ANAPHORS
    return " ".join([heading, s[before[-1][0] : before[-1][1]] if leans else ""])


def _negated(word: str, said: Collection[str]) -> bool:
    """``word`` against its own negation in ``said``: "used" where it says "unused", or back."""
    return any(
        p + word in said or (word.startswith(p) and word[len(p) :] in said)
        for p in _NEGATING_PREFIXES
        if len(word) >= 3
    )


def _stems(tokens: Iterable[str]) -> list[str]:
    return [
        stem(t)
        for t in tokens
        if t not in SCAFFOLD and t not in _CONNECTIVES and not _is_critical(t)
    ]


def _has_word(word: str, stems: Collection[str]) -> bool:
    # The light stemmer leaves "included" and "includes" apart: a shared start of 4+ letters
    # is the same word; "used" is still not "unused".
    if word in stems:
        return True
    return (
        word.isalpha()
        and len(word) >= 4
        and any(
            len(x) >= 4 and x.isalpha() and (x.startswith(word) or word.startswith(x))
            for x in stems
        )
    )


def _beside(s: str, lo: int, hi: int, start: int, end: int) -> set[str]:
    """The negations and conditions right beside a match (three words before, two after, in
    its sentence): "cannot be voided, [even if ...]" and "[can be voided] unless ..."."""
    before = _tokens(s[lo:start])[-3:]
    after = _tokens(s[end:hi])[:2]
    return {_kind(t) for t in [*before, *after] if t in _NEGATIONS or t.endswith("n't")}


#: Words that point back to a name already given: "… Parcelio; it [checks with the carriers]".
_REFERS_BACK = frozenset(
    ["it", "its", "they", "them", "their", "this", "that", "which", "who", "he", "she", "you"]
)
_BOLD = re.compile(r"\*\*([^*]+)\*\*")


@lru_cache(maxsize=256)
def _proper_words(text: str) -> frozenset[str]:
    """The words ``text`` always capitalises and uses as names, folded: rare ones wherever they
    stand ("SwiftPost holds …"), common ones ("Scale", "Finance") where it also capitalises
    them inside a sentence or in bold; not "Each" or "Customers" opening a sentence, nor
    "Refunds" where it also says "refunds"."""
    capitalised: dict[str, bool] = {}
    for w in _WORD.findall(text):
        key = w.casefold()
        capitalised[key] = capitalised.get(key, True) and w[0].isupper()
    marked = {w.casefold() for w in _names(text)}
    marked |= {w.casefold() for bold in _BOLD.findall(text) for w in _WORD.findall(bold)}
    return frozenset(
        w
        for w, always in capitalised.items()
        if always
        and len(w) > 1
        and not w.isdigit()
        and w not in SCAFFOLD
        and zipf(w) < FUNCTION_WORD_ZIPF
        and (zipf(w) < COMMON_ZIPF or w in marked)
    )


def _names_before(before: str, names: Collection[str]) -> set[str]:
    """The names nearest before a quote in its sentence (``before``, normalised), as a run of
    names ("NorthLine Freight"); none past a word that points back ("it", "they") to one."""
    run: list[str] = []
    for t in reversed(_tokens(before)):
        if t in _REFERS_BACK:
            break
        if t in names:
            run.append(t)
        elif run:
            break
    return set(run)


def _row_names(source: str, quote: str, names: Collection[str]) -> list[set[str]]:
    """For each table row of ``source`` holding ``quote``: the names in its first cell and in
    the cell before the quote's ("| Growth | 5 | $8 per user per month |")."""
    rows = []
    for line in source.splitlines():
        cells = [normalise(c) for c in line.strip().strip("|").split("|")]
        at = next((i for i, c in enumerate(cells) if quote in c), None)
        if line.lstrip().startswith("|") and at is not None:
            near = [*_tokens(cells[0]), *(_tokens(cells[at - 1]) if at > 1 else [])]
            rows.append({t for t in near if t in names})
    return rows


def _claim_names(claim: str, names: Collection[str]) -> set[str]:
    """The names a claim gives outside its double quotes, in the claim's own case: a word the
    evidence uses as a name, or one capitalised after the claim's first word or inside itself
    ("SwiftPost")."""
    found = set()
    for i, w in enumerate(_WORD.findall(QUOTED.sub(" ", claim))):
        folded = w.casefold()
        if folded in names or (
            len(w) > 1 and ((i > 0 and w[0].isupper()) or any(ch.isupper() for ch in w[1:]))
        ):
            found.add(folded)
    return found


def _owner_missing(claim: str, c: str, q: str, before: str, source: str) -> str:
    """The names the source gives a quote's fact to when ``claim`` names someone else ("" when
    it names one of them, or nobody): "Kestrel Express labels 'must be voided within' 7 days"
    where the source gives that window to NorthLine Freight; "On Starter, extra users cost
    '$8 per user per month'" where that is Growth's row."""
    names = _proper_words(source)
    if not names or not _claim_names(claim, names):
        return ""
    said = {stem(w) for w in _bare_words(_tokens(c))}
    head = _tokens(c.split(q, 1)[0])[-2:] if q in c else []
    if any(t in _REFERS_BACK for t in head):  # "… the app: it 'checks with the carriers'"
        return ""
    rows = _row_names(source, q, names)
    owners = rows if rows else [_names_before(before, names)]
    missing = [o for o in owners if o and not said & {stem(n) for n in o}]
    return ", ".join(sorted(missing[0])) if missing and len(missing) == len(owners) else ""


def _borrowed(words: Iterable[str], allowed: Collection[str], chunk: Collection[str]) -> list[str]:
    """The words a claim says that its source says only about something else: in the chunk,
    but not in the quote's sentence, the one before it or the heading. A word the chunk does
    not hold at all is the answer's own framing ("usually", "the help centre says")."""
    return [
        w
        for w in dict.fromkeys(words)
        if not _has_word(w, allowed) and zipf(w) < FUNCTION_WORD_ZIPF and _has_word(w, chunk)
    ]


def _invented(
    tokens: Iterable[str], chunk: Collection[str], allowed: Collection[str], asked: Collection[str]
) -> list[str]:
    """The rare English words of a claim's framing that nothing the model was given holds:
    neither the chunk, the other evidence the sentence cites, the question nor a title.
    "Premium customers can skip it, but ..." around a real quote is an invented claim."""
    words = dict.fromkeys(_bare_words(tokens))
    return [
        w
        for w in words
        if w not in SCAFFOLD
        and w not in _CONNECTIVES
        and not _is_critical(w)
        and zipf(w) < COMMON_ZIPF
        and not any(_has_word(stem(w), known) for known in (chunk, allowed, asked))
    ]


def _beyond(
    claim: str,
    quotes: Sequence[str],
    window: str,
    context: str,
    source: str,
    others: str,
    asked: Collection[str] | None,
) -> str:
    """What ``claim`` says beyond its quotes that their source sentences do not ("" when
    nothing): a number or negation they lack, a word the chunk says about something else,
    the opposite of one of their words ("turn on" where they say "turn off"), or, when
    ``asked`` is given (stems of the question and titles; English answers only), a rare word
    nothing the model was given holds."""
    said = _tokens(f"{window} {others}")
    kinds = {_kind(t) for t in said}
    if missing := [t for t in critical_tokens(claim) if _kind(t) not in kinds]:
        return f"the sentence states {', '.join(missing)} beyond its quote"
    rest = claim
    for quote in quotes:
        rest = rest.replace(quote, " ")
    rest_tokens = _tokens(rest)
    allowed = set(_stems([*said, *_tokens(context)]))
    chunk = set(_stems(_tokens(source)))
    if borrowed := _borrowed(_stems(rest_tokens), allowed, chunk):
        return f"the sentence says {', '.join(borrowed)} where its quote's sentence does not"
    if asked is not None and (invented := _invented(rest_tokens, chunk, allowed, asked)):
        return f"the sentence says {', '.join(invented)}, which its evidence does not"
    said_set = set(said)
    if flipped := [
        t
        for t in rest_tokens
        if t not in said_set and (_ANTONYMS.get(t) in said_set or _negated(t, said_set))
    ]:
        return f"the sentence says {', '.join(flipped)} where its quote's sentence says otherwise"
    return ""


def claim_holds(
    claim: str,
    quote: str,
    source: str,
    others: Sequence[str] = (),
    lead_in: str = "",
    asked: Collection[str] | None = None,
) -> str:
    """Why a cited sentence does not hold against ``source`` ("" when it does).

    The quote must stand in the source, and no negation or condition right beside it there
    ("cannot be voided, even if", "voided unless") may be left out. A sentence that quotes
    only part of itself holds by its quote only when the quote carries it: several words,
    every number and negation the sentence states stated by the quote's source sentence, no
    word the chunk says only about something else ("Kestrel refunds complete 'within 5
    business days'" does not hold by "Most refunds complete within 5 business days", where
    Kestrel's are 21) and no opposite of its words ("turn on" for "turn off"). Words the chunk
    does not hold at all are the answer's framing. ``others``: other evidence the same
    sentence cites, which may hold the rest of it. A leading "Yes," or "No," answers the
    question and is not checked. Otherwise the whole sentence must hold as a quote, so "codes
    never expire, as 'codes expire'" fails. ``lead_in``: the line a list item completes; its
    words are checked as the rest of the item's sentence. ``asked``: see :func:`framing`;
    None leaves words the chunk does not hold unchecked (the answer's framing), and the
    English rule that a sentence naming someone may not quote what the source says right
    after another name ("Kestrel Express labels 'must be voided within 7 days'" where the
    source gives it to NorthLine Freight) unapplied.
    """
    q, s = normalise(quote), normalise(source)
    c = _YES_NO.sub("", normalise(claim)) or normalise(claim)
    places = _occurrences(q, s) if q else []
    if not places:
        return "quote not found in the cited evidence"
    quoted = c != q
    if quoted and len(_tokens(q)) < MIN_QUOTE_WORDS:
        if not quote_holds(c, source):
            return "the quote is too short to carry the sentence"
        q, places, quoted = c, _occurrences(c, s), False
    spans = _sentence_spans(source, s)
    heading = normalise(_heading(source))
    # The heading names what the section is about ("Requiring 2FA for your team").
    other = " ".join([*(normalise(o) for o in others), heading])
    # Every quote of the sentence that stands in the source lends its own sentence.
    quotes = [q]
    for x in QUOTED.findall(c):
        if x != q and (at := _occurrences(x, s)):
            quotes.append(x)
            lo, hi = _window(spans, s, *at[0])
            other = f"{other} {s[lo:hi]}"
    if lead_in:
        c = f"{normalise(lead_in)} {c}"
        quoted = True
    why = ""
    # Whose fact the quote is: English only, as framing is (``asked``); German capitalises
    # every noun.
    read_names = quoted and asked is not None
    for start, end in places:
        lo, hi = _window(spans, s, start, end)
        if dropped := sorted(_beside(s, lo, hi, start, end) - {_kind(t) for t in _tokens(c)}):
            why = f"the evidence says {', '.join(dropped)} beside the quoted words"
        elif read_names and (unnamed := _owner_missing(claim, c, q, s[lo:start], source)):
            why = f"the evidence gives the quoted words to {unnamed}"
        elif quoted:
            why = _beyond(c, quotes, s[lo:hi], _context(spans, s, lo, heading), s, other, asked)
        else:
            why = ""
        if not why:
            return ""
    return why


def framing(query: str, titles: Iterable[str], evidence: Iterable[str] = ()) -> frozenset[str]:
    """What an English answer's framing may say besides the chunk it cites, as stems for
    :func:`verify_citations`: the question's words, the evidence titles' (the prompt shows
    both) and the names the evidence capitalises inside a sentence ("Parcelio", which a
    section need not repeat)."""
    names = [name for text in evidence for name in _names(text)]
    said = _tokens(normalise(" ".join([query, *titles, *names])))
    return frozenset(_stems(_bare_words(said)))


def _names(text: str) -> list[str]:
    """The words ``text`` capitalises inside its sentences ("… protects your Parcelio account"):
    a sentence's first word ("Withdrawals …") is capitalised whatever it is."""
    found = []
    for sentence in sentences(text):
        found += [w for w in _WORD.findall(_ITEM_MARK.sub("", sentence))[1:] if w[0].isupper()]
    return found


def _bare_words(tokens: Iterable[str]) -> list[str]:
    """Tokens without a possessive "'s": "Parcelio's" is Parcelio, in a question or a claim."""
    return [t.removesuffix("'s") for t in tokens]


def verify_citations(
    citations: Sequence[CitationClaim],
    evidence: Mapping[str, str],
    withheld: Collection[str] = (),
    asked: Collection[str] | None = None,
) -> list[CitationCheck]:
    """Check each citation names evidence the model was shown and quotes it faithfully.

    ``evidence`` is what the model saw (after the context budget); ``withheld`` names admitted
    chunks the budget kept from it, so citing one is reported as such. ``asked``
    (:func:`framing`) also checks the words around a quote that the chunk does not hold: an
    English answer's rarer words must come from its evidence, the question or a title.
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
        elif why := claim_holds(
            c.sentence or c.quote,
            c.quote,
            source,
            # One sentence citing two chunks may hold part of itself in each.
            [
                evidence[o.chunk_id]
                for o in citations
                if c.sentence
                and o.sentence == c.sentence
                and o.chunk_id != c.chunk_id
                and o.chunk_id in evidence
            ],
            c.lead_in,
            asked,
        ):
            out.append(CitationCheck(c.chunk_id, c.quote, False, why))
        else:
            out.append(CitationCheck(c.chunk_id, c.quote, True))
    return out


#: Why a check failed, for ``candor_generator_verification_failures_total{reason}``: each
#: failure text above (and the generator's own) by the words that mark it.
FAILURE_REASONS: tuple[tuple[str, str], ...] = (
    ("quote not found", "quote_not_found"),
    ("the quote is too short", "quote_too_short"),
    ("cites evidence the gate did not admit", "not_admitted"),
    ("cites evidence trimmed", "trimmed_evidence"),
    ("beside the quoted words", "dropped_condition"),
    ("the evidence gives the quoted words to", "another_name"),
    ("beyond its quote", "beyond_quote"),
    ("where its quote's sentence does not", "borrowed_word"),
    ("which its evidence does not", "invented_word"),
    ("where its quote's sentence says otherwise", "opposite_word"),
    ("cites nothing", "uncited_sentence"),
    ("cut at the model's output limit", "truncated"),
    ("clarify-only answer", "clarify_only_claim"),
    ("cites no evidence", "no_citation"),
    ("not supported by the evidence", "unsupported_sentence"),
)


def failure_reason(failure: str) -> str:
    """The reason label of a verification failure's text ("other" for none of ours)."""
    return next((reason for marker, reason in FAILURE_REASONS if marker in failure), "other")
