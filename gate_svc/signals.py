"""Gate signals: pure functions over a retrieval result. Every decision reports all of them.

Names are stable: they appear in decisions, logs, the calibration config and the evaluation.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from candor.text import (
    SCAFFOLD,
    content_terms,
    expected_answer_type,
    has_answer_type,
    sentences,
    stem,
    words,
    zipf,
)

SOURCE_CURATED = 2
#: Query terms at least this rare in English (wordfreq Zipf scale) are facets the evidence must
#: cover; ~4 is "appears a few times per million words".
RARE_ZIPF = 4.0
_CODE = re.compile(r"^(?=.*\d)[\w.\-/]+$|^[a-z]+-\d")


@dataclass(frozen=True)
class CandidateView:
    """The parts of a retrieval candidate the gate reasons about (plain data, no protobuf)."""

    chunk_id: str
    parent_id: str
    document_id: str
    title: str
    text: str
    source_kind: int
    cosine: float | None
    """Raw dense score (cosine similarity); None when the dense arm did not return it."""
    bm25: float | None
    fused_score: float
    fused_rank: int
    in_both: bool

    @property
    def curated(self) -> bool:
        return self.source_kind == SOURCE_CURATED


@dataclass(frozen=True)
class Signals:
    values: dict[str, float]
    missing_facets: tuple[str, ...]
    answer_type: str
    curated_covering: frozenset[str] = frozenset()
    """Chunk ids of curated answers whose own question asks what the query asks
    (:func:`asks_the_same`): any other answers another question."""


def distance_confidence(cosine: float | None, max_distance: float) -> float:
    """Seed 000: cosine distance mapped to a 0-100 confidence; distance >= max_distance is 0."""
    if cosine is None:
        return 0.0
    distance = 1.0 - cosine
    return max(0.0, min(1.0, 1.0 - distance / max_distance)) * 100.0


def _ratio(first: float, second: float) -> float:
    # A lone candidate is an unambiguous winner; the cap keeps the number printable.
    if second <= 0:
        return 10.0 if first > 0 else 0.0
    return min(first / second, 10.0)


def facets(query: str) -> list[str]:
    """The query's must-cover terms: rare words, numbers, codes and names (stemmed)."""
    raw = query.split()
    capitalised = {
        w.strip("?!.,;:'\"()").casefold() for i, w in enumerate(raw) if i > 0 and w[:1].isupper()
    }
    out: dict[str, None] = {}
    for w in words(query):
        stemmed = content_terms(w)
        if not stemmed:
            continue
        if (
            any(ch.isdigit() for ch in w)
            or _CODE.match(w)
            or w in capitalised
            or zipf(w) < RARE_ZIPF
        ):
            out.setdefault(stemmed[0], None)
    return list(out)


#: Who does what: "How do I pay you?" is not "How do you pay me?", though pronouns are
#: scaffolding elsewhere.
_PERSON = {
    **dict.fromkeys(("i", "me", "my", "mine", "myself"), "<1>"),
    **dict.fromkeys(("we", "us", "our", "ours", "ourselves"), "<1>"),
    **dict.fromkeys(("you", "your", "yours", "yourself", "yourselves"), "<2>"),
}
_GREETINGS = frozenset(("hi", "hello", "hey", "thanks", "thx", "cheers"))


def question_key(text: str) -> tuple[str, ...]:
    """A question's words in order, stemmed, without :data:`~candor.text.SCAFFOLD` or
    greetings, negations as ``not``, pronouns by person only (none right after "how"),
    hyphenated words apart ("two factor" is "two-factor"): two questions with one key ask the
    same thing."""
    key: list[str] = []
    for w in words(text):
        if w.endswith(("n't", "n’t")) or w == "cannot":
            key.append("not")
        elif w in _PERSON:
            # "How to ..." asks what "How do I ..." asks; the same person twice in a row
            # ("I ... my") is said once.
            if key[-1:] != [_PERSON[w]] and key[-1:] != ["how"]:
                key.append(_PERSON[w])
        elif w not in SCAFFOLD and w not in _GREETINGS:
            key.extend(stem(part) for part in w.removesuffix("'s").split("-") if part)
    return tuple(key)


def asks_the_same(query: str, curated_text: str) -> bool:
    """Whether a curated answer (its question on the first line, as ingest stores it) answers
    ``query``: the same words in the same order but for scaffolding.

    Cosine and rare-word cover were not enough: "How do I turn off two-factor
    authentication?" reached cosine 0.72 with a curated "How do I enable two-factor
    authentication?" and "How do I cancel my order?" 0.66 with "How do I cancel my
    subscription?", and both were answered from them at confidence 1.0. A paraphrase that is
    not the same question is still answered, from the curated answer as ordinary evidence."""
    key = question_key(query)
    return bool(key) and key == question_key(curated_text.split("\n", 1)[0])


def facet_coverage(query: str, evidence: Sequence[str]) -> tuple[float, list[str]]:
    """Share of facets found in the evidence (1.0 when the query has none) and the missing ones."""
    wanted = facets(query)
    if not wanted:
        return 1.0, []
    have = set(content_terms(" ".join(evidence)))
    missing = [f for f in wanted if f not in have]
    return 1.0 - len(missing) / len(wanted), missing


def _question_weights(query: str) -> dict[str, float]:
    """IDF-like weight per query term: rare words count more than common ones."""
    return {t: max(0.5, 8.0 - zipf(t)) for t in content_terms(query)}


SentenceTerms = list[tuple[int, str, set[str]]]
"""(evidence index, sentence, the query terms it holds) for every evidence sentence."""


def _sentence_terms(weight: dict[str, float], evidence: Sequence[str]) -> SentenceTerms:
    # Split and stem each sentence once; every sentence signal reads this one list.
    return [
        (i, s, set(content_terms(s)) & weight.keys())
        for i, text in enumerate(evidence)
        for s in sentences(text)
    ]


def _held_weight(weight: dict[str, float], terms: set[str]) -> float:
    # Summed in the query's term order: a set's order follows the process's hash seed, and a
    # float sum's last bits follow its order, so the same question's signals differed by run.
    return sum(w for t, w in weight.items() if t in terms)


def _best_sentence(weight: dict[str, float], matched: SentenceTerms) -> tuple[float, str]:
    total = sum(weight.values())
    best, best_sentence = 0.0, ""
    for _, s, terms in matched:
        score = _held_weight(weight, terms) / total
        if score > best:
            best, best_sentence = score, s
    return best, best_sentence


def _best_pair(weight: dict[str, float], matched: SentenceTerms) -> float:
    scored = sorted(
        ((_held_weight(weight, terms), terms) for _, _, terms in matched),
        key=lambda st: st[0],
        reverse=True,
    )
    held: set[str] = set()
    for _, terms in scored[:2]:
        held |= terms
    return _held_weight(weight, held) / sum(weight.values())


def best_sentence_alignment(query: str, evidence: Sequence[str]) -> tuple[float, str]:
    """IDF-weighted share of the query's terms found in the single best evidence sentence.

    High when one sentence *answers* (holds most of the question); low when the terms are
    scattered across a passage that merely matches the topic.
    """
    weight = _question_weights(query)
    if not weight:
        return 0.0, ""
    return _best_sentence(weight, _sentence_terms(weight, evidence))


def pair_coverage(query: str, evidence: Sequence[str]) -> float:
    """IDF-weighted share of the query's terms held by its two best-aligned sentences together.

    Multi-hop questions ("the actor who played X was born where?") are answered by two
    sentences, one per hop; a passage whose answering sentence is missing leaves part of the
    question uncovered even when the rest of the passage is on topic.
    """
    weight = _question_weights(query)
    if not weight:
        return 0.0
    return _best_pair(weight, _sentence_terms(weight, evidence))


def _without_copies(scored: Iterable[tuple[float | None, str]]) -> list[float]:
    """The scores of (score, normalised text) pairs, best first, leaving out any whose text a
    better-scored one already has."""
    seen: set[str] = set()
    out = []
    for s, text in sorted(((s, t) for s, t in scored if s is not None), key=lambda st: -st[0]):
        if text not in seen:
            seen.add(text)
            out.append(s)
    return out


def compute_signals(
    candidates: Sequence[CandidateView],
    query: str = "",
    max_distance: float = 0.65,
    evidence_k: int = 3,
    degraded_arms: int = 0,
) -> Signals:
    """Every signal the policies use, by name."""
    cosines = sorted((c.cosine for c in candidates if c.cosine is not None), reverse=True)
    bm25s = sorted((c.bm25 for c in candidates if c.bm25 is not None), reverse=True)
    fused = [c.fused_score for c in candidates]
    # The ratios ask how far the best stands from its rivals; a copy of its text (the same
    # article filed twice) is no rival, and read as one made every duplicated KB look contested.
    texts = [" ".join(c.text.split()).casefold() for c in candidates]
    rival_cosines = _without_copies((c.cosine, t) for c, t in zip(candidates, texts, strict=True))
    rival_fused = _without_copies(
        (c.fused_score, t) for c, t in zip(candidates, texts, strict=True)
    )
    top = candidates[0] if candidates else None
    head = list(candidates[:5])
    evidence = [c.text for c in candidates[:evidence_k]]
    q_terms = max(1, len(content_terms(query)))
    coverage, missing = facet_coverage(query, evidence) if candidates else (0.0, facets(query))
    weight = _question_weights(query)
    matched = _sentence_terms(weight, evidence) if weight else []
    alignment = _best_sentence(weight, matched)[0] if weight else 0.0
    pair = _best_pair(weight, matched) if weight else 0.0
    # The same measures on the top candidate alone: other candidates can lend the terms a
    # near miss lacks, but only the top one is usually quoted as the answer.
    top_text = evidence[:1]
    top_coverage = facet_coverage(query, top_text)[0] if top_text else 0.0
    top_pair = _best_pair(weight, [m for m in matched if m[0] == 0]) if weight else 0.0
    answer_type = expected_answer_type(query)
    type_found = any(has_answer_type(t, answer_type) for t in evidence) if evidence else False
    values = {
        "hits": float(len(candidates)),
        "top_cosine": cosines[0] if cosines else 0.0,
        "top_distance_confidence": distance_confidence(
            cosines[0] if cosines else None, max_distance
        ),
        "top_bm25": bm25s[0] if bm25s else 0.0,
        "bm25_per_query_term": (bm25s[0] if bm25s else 0.0) / q_terms,
        "top_rrf": fused[0] if fused else 0.0,
        "rrf_ratio": _ratio(rival_fused[0], rival_fused[1])
        if len(rival_fused) > 1
        else (10.0 if rival_fused else 0.0),
        "cosine_ratio": _ratio(rival_cosines[0], rival_cosines[1])
        if len(rival_cosines) > 1
        else (10.0 if rival_cosines else 0.0),
        "top_in_both": 1.0 if top is not None and top.in_both else 0.0,
        "in_both_top_k": float(sum(1 for c in head if c.in_both)),
        # Seed 003's retrieval quality: top score, top1-top5 gap, source concentration.
        "quality_top": cosines[0] if cosines else 0.0,
        "quality_gap": (cosines[0] - cosines[min(4, len(cosines) - 1)]) if cosines else 0.0,
        "source_concentration": (
            sum(1 for c in head if top is not None and c.document_id == top.document_id) / len(head)
            if head
            else 0.0
        ),
        "facet_coverage": coverage,
        "missing_facets": float(len(missing)),
        "best_sentence_alignment": alignment,
        "pair_coverage": pair,
        "top_facet_coverage": top_coverage,
        "top_pair_coverage": top_pair,
        "answer_type_expected": 1.0 if answer_type else 0.0,
        "answer_type_found": 1.0 if (not answer_type or type_found) else 0.0,
        "curated_hits": float(sum(1 for c in candidates if c.curated)),
        "degraded_arms": float(degraded_arms),
        "query_terms": float(q_terms),
    }
    covering = frozenset(
        c.chunk_id for c in candidates if c.curated and asks_the_same(query, c.text)
    )
    return Signals(values, tuple(missing), answer_type, covering)


#: Every signal name a decision may carry (calibration coefficients must use these).
SIGNAL_NAMES = frozenset(
    {
        "hits",
        "top_cosine",
        "top_distance_confidence",
        "top_bm25",
        "bm25_per_query_term",
        "top_rrf",
        "rrf_ratio",
        "cosine_ratio",
        "top_in_both",
        "in_both_top_k",
        "quality_top",
        "quality_gap",
        "source_concentration",
        "facet_coverage",
        "missing_facets",
        "best_sentence_alignment",
        "pair_coverage",
        "top_facet_coverage",
        "top_pair_coverage",
        "answer_type_expected",
        "answer_type_found",
        "curated_hits",
        "degraded_arms",
        "unobserved_arms",
        "query_terms",
        "rerank_top_scale",
        "rerank_fallback",
        "reader",
        "reader_top1",
        "reader_log_odds",
        "reader_fallback",
        "reader_skipped",
    }
)


#: The signals a search without each arm cannot observe: its scores, and agreement between arms.
_BOTH_ARMS = ("top_in_both", "in_both_top_k", "top_rrf", "rrf_ratio")
ARM_SIGNALS: dict[str, frozenset[str]] = {
    "dense": frozenset(
        (
            "top_cosine",
            "top_distance_confidence",
            "cosine_ratio",
            "quality_top",
            "quality_gap",
            *_BOTH_ARMS,
        )
    ),
    "keyword": frozenset(("top_bm25", "bm25_per_query_term", *_BOTH_ARMS)),
}

#: The values each of those signals can take (None: no upper bound).
SIGNAL_DOMAINS: dict[str, tuple[float, float | None]] = {
    "top_cosine": (0.0, 1.0),
    "top_distance_confidence": (0.0, 100.0),
    "cosine_ratio": (0.0, 10.0),
    "quality_top": (0.0, 1.0),
    "quality_gap": (0.0, 2.0),
    "top_in_both": (0.0, 1.0),
    "in_both_top_k": (0.0, 5.0),
    "top_rrf": (0.0, None),
    "rrf_ratio": (0.0, 10.0),
    "top_bm25": (0.0, None),
    "bm25_per_query_term": (0.0, None),
}


def unobserved_signals(missing_arms: Iterable[str]) -> frozenset[str]:
    """Signals a search without ``missing_arms`` (``dense``, ``keyword``) could not observe."""
    out: frozenset[str] = frozenset()
    for arm in missing_arms:
        out |= ARM_SIGNALS.get(arm, frozenset())
    return out


def sigmoid(z: float) -> float:
    if z >= 0:
        return 1.0 / (1.0 + math.exp(-z))
    e = math.exp(z)
    return e / (1.0 + e)
