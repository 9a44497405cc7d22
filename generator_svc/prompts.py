"""Prompt templates (versioned YAML), the evidence context budget, and the ``[n]`` citation form.

The rules the templates carry: answer only from the numbered evidence and cite it; when no
evidence applies, cite nothing and ask one clarifying question (seed 001); the UNCERTAIN tier
adds the caveat "This may be incomplete."; the gate's CLARIFY outcome gets a clarify-only prompt
with no evidence; the reply is in the query's language.

Token counts are estimates: words x 1.3, rounded up (``estimate_tokens``; a character of a script
written without spaces counts as a word).
BPE tokenizers average about 1.3 tokens per English word, more for numbers, code and many other
languages, so set the budget with some headroom below the model's real context window.
"""

from __future__ import annotations

import math
import re
import string
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

from candor.text import UNIT, content_terms, units, words, zipf
from generator_svc.citations import (
    COMMON_WORD_ZIPF,
    COMMON_ZIPF,
    QUOTED,
    CitationClaim,
    bare_yes_no,
    critical_tokens,
    framing,
    normalise,
)
from generator_svc.llm.base import EvidenceItem, GenerationInput

DEFAULT_TEMPLATES_PATH = Path(__file__).with_name("prompts_default.yaml")
DEFAULT_CAVEAT = "This may be incomplete."
"""The shipped templates' caveat, and the extractive answerer's."""
TOKENS_PER_WORD = 1.3


class PromptError(ValueError):
    """The template file is missing, unreadable or invalid."""


# Each template and the placeholders it may use.
_PLACEHOLDERS: dict[str, frozenset[str]] = {
    "system": frozenset(),
    "cite_markers": frozenset(),
    "cite_native": frozenset(),
    "uncertain": frozenset({"caveat"}),
    "caveat": frozenset(),
    "clarify_only": frozenset(),
    "language_known": frozenset({"language"}),
    "language_detect": frozenset(),
    "evidence_item": frozenset({"n", "title", "text", "chunk_id"}),
    "no_evidence": frozenset(),
    "user": frozenset({"evidence", "query"}),
    "user_native": frozenset({"query"}),
}


@dataclass(frozen=True)
class PromptTemplates:
    version: str
    system: str
    cite_markers: str
    cite_native: str
    uncertain: str
    caveat: str
    clarify_only: str
    language_known: str
    language_detect: str
    evidence_item: str
    no_evidence: str
    user: str
    user_native: str


@dataclass(frozen=True)
class RenderedPrompt:
    version: str
    system: str
    user: str


def _check_placeholders(name: str, text: str) -> None:
    try:
        used = {f for _, f, _, _ in string.Formatter().parse(text) if f is not None}
    except ValueError as exc:
        raise PromptError(f"prompt template {name!r}: {exc}") from exc
    unknown = sorted(used - _PLACEHOLDERS[name])
    if unknown:
        allowed = sorted(_PLACEHOLDERS[name]) or "none"
        raise PromptError(
            f"prompt template {name!r}: unknown placeholders {unknown}; allowed: {allowed}"
        )


def templates_from_mapping(data: Any, where: str = "prompt templates") -> PromptTemplates:
    """Validate a parsed template file: every key present, strings only, known placeholders."""
    if not isinstance(data, dict):
        raise PromptError(f"{where}: top level must be a mapping")
    names = {f.name for f in fields(PromptTemplates)}
    missing = sorted(names - data.keys())
    unknown = sorted(data.keys() - names)
    if missing:
        raise PromptError(f"{where}: missing {missing}")
    if unknown:
        raise PromptError(f"{where}: unknown keys {unknown}")
    for key in names:
        if not isinstance(data[key], str) or not data[key].strip():
            raise PromptError(f"{where}: {key} must be a non-empty string")
    for key in _PLACEHOLDERS:
        _check_placeholders(key, data[key])
    return PromptTemplates(**{k: data[k] for k in names})


def load_templates(path: str | Path | None = None) -> PromptTemplates:
    """Load and validate a template file; None or '' loads the packaged default."""
    file = Path(path) if path else DEFAULT_TEMPLATES_PATH
    try:
        data = yaml.safe_load(file.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise PromptError(f"cannot read prompt templates {file}: {exc}") from exc
    return templates_from_mapping(data, str(file))


def _language_rule(t: PromptTemplates, language: str) -> str:
    return t.language_known.format(language=language) if language else t.language_detect


def render(t: PromptTemplates, inp: GenerationInput, *, native_citations: bool) -> RenderedPrompt:
    """System and user messages for ``inp``.

    With ``native_citations`` (Cohere), the evidence travels as documents, so the user message
    is just the query; otherwise the evidence is numbered into the user message and the model
    is told to cite with ``[n]`` markers (parsed by ``parse_marked_citations``).
    """
    language = _language_rule(t, inp.language)
    if inp.clarify_only:
        system = "\n\n".join([t.clarify_only, language])
        return RenderedPrompt(t.version, system, t.user_native.format(query=inp.query))
    parts = [t.system, t.cite_native if native_citations else t.cite_markers]
    if inp.tier == "uncertain":
        parts.append(t.uncertain.format(caveat=t.caveat))
    parts.append(language)
    system = "\n\n".join(parts)
    if native_citations:
        return RenderedPrompt(t.version, system, t.user_native.format(query=inp.query))
    evidence = "\n\n".join(
        t.evidence_item.format(n=i, title=e.title, text=e.text, chunk_id=e.chunk_id)
        for i, e in enumerate(inp.evidence, 1)
    )
    user = t.user.format(evidence=evidence or t.no_evidence, query=inp.query)
    return RenderedPrompt(t.version, system, user)


# --- context budget ---------------------------------------------------------------------------


def estimate_tokens(text: str) -> int:
    """Approximate LLM tokens: words (:data:`candor.text.UNIT`: each character of a script
    written without spaces counts as one) x 1.3, rounded up."""
    return math.ceil(len(units(text)) * TOKENS_PER_WORD)


def evidence_tokens(item: EvidenceItem) -> int:
    """What one evidence item costs in the budget: its title and text."""
    return estimate_tokens(item.title) + estimate_tokens(item.text)


@dataclass(frozen=True)
class BudgetedEvidence:
    kept: tuple[EvidenceItem, ...]
    """Highest-ranked first; numbered [1]..[n] in the prompt."""
    trimmed_chunk_ids: tuple[str, ...]
    """Dropped to fit, in rank order (reported in AnswerFinal.trimmed_chunk_ids)."""
    tokens: int
    """Estimated tokens of the kept evidence."""
    truncated_chunk_id: str = ""
    """The top-ranked chunk, when it alone exceeded the budget and was cut to fit."""


def _cut_words(text: str, n_words: int) -> str:
    """The first ``n_words`` words (:data:`candor.text.UNIT`) of ``text``, formatting kept."""
    if n_words <= 0:
        return ""
    for i, match in enumerate(UNIT.finditer(text), 1):
        if i == n_words:
            return text[: match.end()].rstrip()
    return text


def fit_to_budget(evidence: Sequence[EvidenceItem], budget_tokens: int) -> BudgetedEvidence:
    """Keep evidence in rank order while it fits ``budget_tokens``; drop the rest.

    The kept set is always a prefix of the ranking: a lower-ranked chunk is never kept while a
    higher-ranked one is dropped, so ``[n]`` numbers mean the same as in the gate's evidence
    list. The top-ranked chunk is always sent; if it alone exceeds the budget its text is cut
    to fit. A budget <= 0 means unlimited.
    """
    if budget_tokens <= 0:
        items = tuple(evidence)
        return BudgetedEvidence(items, (), sum(evidence_tokens(e) for e in items))
    kept: list[EvidenceItem] = []
    used = 0
    truncated = ""
    for i, item in enumerate(evidence):
        cost = evidence_tokens(item)
        if used + cost <= budget_tokens:
            kept.append(item)
            used += cost
            continue
        if i == 0:
            room = budget_tokens - estimate_tokens(item.title)
            words = max(1, math.floor(room / TOKENS_PER_WORD))
            cut = EvidenceItem(item.chunk_id, item.title, _cut_words(item.text, words))
            kept.append(cut)
            used = evidence_tokens(cut)
            truncated = item.chunk_id
            continue
        break
    trimmed = tuple(e.chunk_id for e in evidence[len(kept) :])
    return BudgetedEvidence(tuple(kept), trimmed, used, truncated)


# --- the [n] citation form --------------------------------------------------------------------

_MARKER = re.compile(r"\[(\d+(?:\s*[,;]\s*\d+)*)\]")
# CJK sentences end at their own full stops, with no space after: a Chinese statement then a
# question was one sentence, a question, and passed as a clarification.
_SENTENCE_BREAK = re.compile(r"(?<=[.!?])\s+|(?<=[。！？；])\s*|\n+")
_LIST_NUMBER = re.compile(r"^\s*(\d{1,3})\.(?=\s)")
_BULLET = re.compile(r"^\s*(?:[-*•+]|\d{1,3}[.)])\s+")
_EDGE_JUNK = " \t\n.,;:!?)]}*_"


# Markdown hides these when the answer is rendered: what they hold is neither shown nor cited.
_HIDDEN = re.compile(r"<!--.*?(?:-->|$)|~~.*?~~", re.DOTALL)


def _list_numbers(text: str) -> str:
    """``text`` with each numbered list item's "1." written "1)", the same length: split at its
    period, "1. Go to Shipments. [1]" left a sentence "1." stating an uncited number, so every
    numbered answer failed. Only a line that opens or continues a list is an item (the first
    line, after a blank line or another item, or numbered 1): in "You get\n50. Each code ..."
    the 50 ends the sentence before it, as markdown renders it."""
    lines = text.split("\n")
    for i, line in enumerate(lines):
        m = _LIST_NUMBER.match(line)
        before = lines[i - 1] if i else ""
        if m and (not before.strip() or _BULLET.match(before) or m.group(1) == "1"):
            lines[i] = f"{line[: m.end() - 1]}){line[m.end() :]}"
    return "\n".join(lines)


def visible_text(text: str) -> str:
    """The answer as a reader sees it rendered, for splitting into sentences: HTML comments and
    struck-through text removed, list numbers kept with their items (:func:`_list_numbers`)."""
    return _list_numbers(_HIDDEN.sub(" ", text))


def _masked(text: str) -> str:
    """:func:`visible_text` with the same offsets as ``text``: hidden markup blanked in place."""
    return _list_numbers(_HIDDEN.sub(lambda m: " " * len(m.group()), text))


def _states_nothing(sentence: str, lead_in: Callable[[str], bool] | None = None) -> bool:
    """A question, a list's lead-in or a word or two of filler: nothing to cite.

    ``lead_in`` is given when a list follows the sentence: a colon line then is its lead-in
    ("To void a label, follow these steps:") if ``lead_in`` says it borrows all its rarer words
    from the evidence. Without a list a colon ends a claim ("All refunds are free:"), and so
    does a lead-in with words of its own ("Refunds are instant and free for everyone:", whose
    "instant" and "free" the items' checks never read).
    """
    bare = sentence.strip().strip("*_ ")
    if bare.endswith(("?", "？", "؟")):
        return True
    if bare_yes_no(bare):
        return False  # the answer to the question, as much as "No." is
    stated = critical_tokens(normalise(bare))
    if bare.endswith((":", "：")) and lead_in is not None:
        return not stated and lead_in(bare)
    return not stated and len(units(bare)) < 3


def lead_in_rule(evidence: Sequence[str], language: str = "") -> Callable[[str], bool]:
    """Whether a colon line before a list says nothing the evidence does not: each of its
    words rarer than the language's function words is one the evidence uses."""
    known = {t for text in evidence for t in content_terms(text)}

    def holds(sentence: str) -> bool:
        return all(known.intersection(content_terms(w)) for w in _rare(sentence, language))

    return holds


def _rare(sentence: str, language: str) -> list[str]:
    """The sentence's words rarer than its language's function words (and English's)."""
    lang = language_of(language, sentence)
    return [w for w in words(sentence) if max(zipf(w, lang), zipf(w)) < COMMON_ZIPF]


MAX_CAVEAT_WORDS = 12
"""The caveat in any language is a short sentence; a longer first sentence is checked."""
MAX_CLARIFY_WORDS = 30


def language_of(tag: str, text: str) -> str:
    """The two-letter language of a tag ("pt_BR.UTF-8" -> "pt"), else the one ``text`` reads as."""
    base = re.split(r"[-_.@]", tag, maxsplit=1)[0].casefold()
    if base:
        return base
    import py3langid.langid as langid

    return str(langid.classify(text)[0])


_HEDGES = frozenset(
    {"incomplete", "partial", "partially", "inaccurate", "uncertain", "outdated", "limited"}
)
"""Rare English words a reworded caveat may hold ("This may be partial.")."""


@lru_cache(maxsize=16)
def _english(text: str) -> bool:
    """Whether the configured ``text`` reads as English: asked once, not at every answer."""
    return language_of("", text) == "en"


def caveat_rule(caveat: str, evidence: Sequence[str], language: str = "") -> Callable[[str], bool]:
    """Whether an UNCERTAIN answer's first sentence may be its caveat, which cites nothing.

    The model writes the caveat first, translated into the answer's language, so it cannot be
    matched word for word: any first sentence used to be spared, and "2FA can be bypassed with
    the code 0000." passed as verified. Now only the configured caveat itself, or a short
    sentence that states no number or negation and shares with the evidence no word rarer than
    the language's function words ("Esto puede estar incompleto." beside Spanish evidence that
    says "puede" is a caveat; "Every refund is instant." beside "refunds" is a claim), is.
    """
    own = normalise(caveat)
    # The caveat's words, and other hedges a model rewords it with, in English; a caveat
    # configured in another language leaves English answers to the evidence rule alone.
    hedges = set(words(own)) | _HEDGES if _english(caveat) else None
    known = {t for text in evidence for t in content_terms(text)}

    def spared(sentence: str) -> bool:
        if normalise(sentence) == own:
            return True
        bare = normalise(sentence)
        if len(units(bare)) > MAX_CAVEAT_WORDS or critical_tokens(bare):
            return False
        rare = _rare(sentence, language)
        if hedges is not None and language_of(language, sentence) == "en" and set(rare) - hedges:
            # In the caveat's own language a rare word it lacks is a claim: "Passkeys work
            # too." passed as the caveat (an answer-path probe). Other languages' caveats are
            # translations, so there only rare words the evidence holds are claims.
            return False
        return not any(known.intersection(content_terms(w)) for w in rare)

    return spared


def _says_something(sentence: str) -> bool:
    """The lead-in rule without evidence to read: every colon line is checked."""
    return False


def lead_in_of(inp: GenerationInput) -> Callable[[str], bool]:
    """The lead-in rule for ``inp``'s answer: its words may also be a title's. Not the
    question's: "You can still void a label after the carrier scanned it:" restated a false
    premise the question asked, over steps that hold."""
    said = [*(e.title for e in inp.evidence), *(e.text for e in inp.evidence)]
    return lead_in_rule(said, inp.language)


ENGLISH_SHARE = 0.6
"""Untagged, an answer is read as English when this share of its words outside its quotes are
English words, whatever the language identifier says: it calls short answers Latin."""


def _reads_as_english(tag: str, answer: str) -> bool:
    # A tag is what the model was told to write in: a German answer quoting English evidence
    # is German.
    said = language_of(tag, answer)
    if tag or said == "en":
        return said == "en"
    found = [w for w in words(QUOTED.sub(" ", answer)) if w.isalpha() and len(w) >= 3]
    known = sum(zipf(w) >= COMMON_WORD_ZIPF for w in found)
    return bool(found) and known >= ENGLISH_SHARE * len(found)


def framing_of(inp: GenerationInput, answer: str) -> frozenset[str] | None:
    """What ``answer``'s framing may say besides its evidence (:func:`framing`), or None when it
    is not English: the rarity of a word is only known for English."""
    if not _reads_as_english(inp.language, answer):
        return None
    return framing(inp.query, [e.title for e in inp.evidence], [e.text for e in inp.evidence])


def spare_first(inp: GenerationInput) -> Callable[[str], bool] | None:
    """The caveat rule for ``inp``'s answer: None (nothing spared) outside the UNCERTAIN tier."""
    if inp.tier != "uncertain":
        return None
    evidence = [e.text for e in inp.evidence]
    return caveat_rule(inp.caveat or DEFAULT_CAVEAT, evidence, inp.language)


def uncited_sentences(
    text: str,
    spare_first: Callable[[str], bool] | None = None,
    lead_in: Callable[[str], bool] | None = None,
) -> list[str]:
    """Sentences of a ``cite_markers`` answer that state something but close no ``[n]``.

    The prompt asks for a marker after every sentence that states a fact; one without is
    checked by nothing, so it must not pass as verified. ``spare_first`` (``caveat_rule``)
    says whether the first sentence is the UNCERTAIN tier's caveat; ``lead_in``
    (``lead_in_rule``) whether a colon line before a list says nothing of its own (without
    it, none does).
    """
    visible = visible_text(text)
    segments: list[tuple[str, bool]] = []
    last_end = 0
    for m in _MARKER.finditer(visible):
        segments.append((visible[last_end : m.start()], True))
        last_end = m.end()
    segments.append((visible[last_end:], False))
    flat: list[tuple[str, bool]] = []  # (piece, closes a marker)
    for segment, closed in segments:
        pieces = [p.strip() for p in _SENTENCE_BREAK.split(segment) if p.strip(_EDGE_JUNK)]
        flat += [(piece, closed and i == len(pieces) - 1) for i, piece in enumerate(pieces)]
    out: list[str] = []
    for i, (piece, cited) in enumerate(flat):
        spared = cited or (i == 0 and spare_first is not None and spare_first(piece))
        spared = spared or (bare_yes_no(piece) and i + 1 < len(flat) and flat[i + 1][1])
        before_list = i + 1 < len(flat) and bool(_BULLET.match(flat[i + 1][0]))
        rule = (lead_in or _says_something) if before_list else None
        if not spared and not _states_nothing(_BULLET.sub("", piece), rule):
            out.append(piece)
    return out


def unspanned_sentences(
    text: str,
    spans: Sequence[tuple[int, int]],
    spare_first: Callable[[str], bool] | None = None,
    lead_in: Callable[[str], bool] | None = None,
) -> list[str]:
    """Sentences of a natively cited answer (Cohere) that no citation span touches.

    The ``uncited_sentences`` rule for answers whose citations are character spans of the
    answer rather than ``[n]`` markers: a sentence stating something with no span over any of
    its visible characters is checked by nothing. Hidden markup is blanked in place so offsets
    hold.
    """
    masked = _masked(text)
    bounds: list[tuple[int, int]] = []
    start = 0
    for m in _SENTENCE_BREAK.finditer(masked):
        bounds.append((start, m.start()))
        start = m.end()
    bounds.append((start, len(masked)))
    kept = [(lo, hi) for lo, hi in bounds if masked[lo:hi].strip().strip(_EDGE_JUNK)]
    out: list[str] = []
    for i, (lo, hi) in enumerate(kept):
        piece = masked[lo:hi].strip()
        spared = i == 0 and spare_first is not None and spare_first(piece)
        # A span over hidden markup alone is no citation of what the reader sees.
        covered = any(masked[max(a, lo) : min(b, hi)].strip() for a, b in spans)
        if bare_yes_no(piece) and i + 1 < len(kept):
            nlo, nhi = kept[i + 1]
            spared = spared or any(masked[max(a, nlo) : min(b, nhi)].strip() for a, b in spans)
        before_list = i + 1 < len(kept) and bool(_BULLET.match(masked[slice(*kept[i + 1])].strip()))
        rule = (lead_in or _says_something) if before_list else None
        if not spared and not covered and not _states_nothing(_BULLET.sub("", piece), rule):
            out.append(piece)
    return out


def sentence_around(text: str, start: int, end: int) -> str:
    """The answer's sentence(s) a natively cited span ``text[start:end]`` stands in: a span
    checked alone let its sentence say anything around it ("Kestrel Express refunds complete
    within 5 business days." held by the span "within 5 business days")."""
    masked = _masked(text)
    lo = max((m.end() for m in _SENTENCE_BREAK.finditer(masked, 0, start)), default=0)
    after = _SENTENCE_BREAK.search(masked, max(start, end - 1))
    hi = after.start() if after else len(masked)
    piece = _BULLET.sub("", masked[lo : max(hi, end)].strip())
    return " ".join(piece.split()).rstrip(_EDGE_JUNK)


def _claim_text(segment: str) -> str:
    """The sentence a marker closes: the last sentence before it since the previous marker."""
    segment = segment.strip().lstrip(_EDGE_JUNK)
    pieces = [p for p in _SENTENCE_BREAK.split(segment) if p.strip()]
    return _BULLET.sub("", pieces[-1]).strip() if pieces else ""


def _lead_in(before: str) -> str:
    """The line a list item completes: for an answer ending in a bullet line, the last line
    before its list when that line ends with ":" ("" otherwise)."""
    lines = [line for line in before.splitlines() if line.strip()]
    if not lines or not _BULLET.match(lines[-1]):
        return ""
    for line in reversed(lines[:-1]):
        if not _BULLET.match(line):
            text = line.strip().strip("*_ ")
            return _claim_text(text).rstrip(":") if text.endswith(":") else ""
    return ""


def _quote_of(claim: str) -> str:
    """A double-quoted span inside the claim if there is one (the longest), else the claim."""
    quoted = [m.group(1).strip() for m in QUOTED.finditer(claim)]
    chosen = max(quoted, key=len) if quoted else claim
    return chosen.strip().rstrip(_EDGE_JUNK).lstrip("*_ ").strip()


def marker_chunk_id(n: int, evidence: Sequence[EvidenceItem]) -> str:
    """The chunk id behind ``[n]``; an out-of-range number stays visible as ``[n]``."""
    return evidence[n - 1].chunk_id if 1 <= n <= len(evidence) else f"[{n}]"


def parse_marked_citations(
    text: str, evidence: Sequence[EvidenceItem]
) -> tuple[CitationClaim, ...]:
    """Citations from an answer written in the ``cite_markers`` form.

    Each ``[n]`` (or ``[n, m]``, or adjacent ``[n][m]``) cites evidence n for the sentence it
    closes: the text since the previous marker, last sentence only. The quote is the longest
    double-quoted span inside that sentence if any, else the sentence itself; either must occur
    in the cited evidence for the citation to verify. A number outside the evidence list
    becomes a citation of ``[n]``, which verification reports as not admitted.
    """
    text = visible_text(text)
    out: dict[tuple[str, str, str, str], None] = {}
    last_end = 0
    claim = lead_in = ""
    for m in _MARKER.finditer(text):
        between = text[last_end : m.start()]
        if between.strip(_EDGE_JUNK) or not claim:
            claim = _claim_text(between)
            lead_in = _lead_in(text[: m.start()])
        last_end = m.end()
        quote = _quote_of(claim)
        # Only a quote inside the sentence leaves the rest of it to check (claim_holds).
        sentence = claim.strip().rstrip(_EDGE_JUNK) if QUOTED.search(claim) else ""
        for number in re.findall(r"\d+", m.group(1)):
            key = (marker_chunk_id(int(number), evidence), quote, sentence, lead_in)
            out.setdefault(key, None)
    return tuple(CitationClaim(*key) for key in out)


def looks_like_clarification(
    text: str, citations: Sequence[CitationClaim], query: str = ""
) -> bool:
    """An answer that cites nothing and is one question is the seed-001 clarifying question.

    One sentence: "Codes last 90 days. Want to know more?" states an uncited fact first. It
    passes unchecked, so it stays short, joins no statement to it with ";", and holds no
    number the question did not ("Did you know unused labels can be voided within 90 days?"
    is a claim dressed as a question; "Do you mean error 404?" asked about 404 is not).
    Negations and number words are fine: "orders that haven't shipped", "the first one".
    """
    pieces = [p for p in _SENTENCE_BREAK.split(visible_text(text).strip()) if p.strip()]
    if citations or len(pieces) != 1:
        return False
    question = pieces[0].strip()
    asked = set(critical_tokens(normalise(query)))
    numbers = [
        t
        for t in critical_tokens(normalise(question))
        if any(c.isdigit() for c in t) and t not in asked
    ]
    return (
        question.rstrip("\"'”»)").endswith(("?", "？", "؟"))
        and ";" not in question
        and len(units(question)) <= MAX_CLARIFY_WORDS
        and not numbers
    )
