"""Versioned threshold config and the decision: which policy, which bounds, and why.

Every seed's gate is a policy selectable by config, so the evaluation can run them side by
side on the same data; ``calibrated`` is the logistic model over all signals that
``candor calibrate`` fits. A policy is a pure function of candidates, signals and config.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import yaml

from gate_svc.reader_view import READER_SIGNALS, ReaderView, weighs_reader
from gate_svc.refusal import DEFAULT_MESSAGES
from gate_svc.rerank_view import RerankView
from gate_svc.signals import (
    SIGNAL_DOMAINS,
    CandidateView,
    Signals,
    compute_signals,
    distance_confidence,
    sigmoid,
    unobserved_signals,
)

DEFAULT_POLICY_PATH = Path(__file__).with_name("policy_default.yaml")

PASS, REFUSE, CLARIFY = "pass", "refuse", "clarify"
CONFIDENT, UNCERTAIN, NO_MATCH = "confident", "uncertain", "no_match"


class PolicyError(ValueError):
    """The threshold config is invalid; the running version stays active."""


@dataclass(frozen=True)
class Seed000Config:
    max_distance: float = 0.65
    """Cosine distance at which confidence reaches 0."""
    chunk_floor: float = 25.0
    """A chunk below this 0-100 confidence is not admitted as evidence."""
    answer_gate: float = 40.0
    """The average confidence of admitted chunks must reach this to pass."""


@dataclass(frozen=True)
class Seed001Config:
    """sigmoid(a * top_rrf + b * top_in_both + c); refit a, b, c offline."""

    a: float = 120.0
    b: float = 1.5
    c: float = -3.0
    confident: float = 0.75
    uncertain: float = 0.45


@dataclass(frozen=True)
class Seed003Config:
    """Composite retrieval quality: top score, top1-top5 gap, source concentration."""

    w_top: float = 0.6
    w_gap: float = 0.2
    w_concentration: float = 0.2
    gap_scale: float = 0.3
    """A top1-top5 cosine gap of this size counts as full separation."""
    decline_below: float = 0.3
    confident: float = 0.85
    uncertain: float = 0.6


@dataclass(frozen=True)
class Seed004Config:
    """Reranked >= min_scale with >= min_chunks; without a reranker, RRF floor and ratio."""

    rerank_min_scale: float = 2.0
    rerank_min_chunks: float = 1.0
    rrf_floor_fraction: float = 0.05
    """The seed's 0.05 floor read as a fraction of the highest fused score possible
    (sum of arm weights / (k + 1)); seed 004's absolute 0.05 can never be met with k=60."""
    rrf_floor: float = -1.0
    """Absolute floor instead of the fraction; -1 means unset. Rejected if unreachable."""
    rrf_k: float = 60.0
    arm_weight_sum: float = 2.0
    ratio_min: float = 1.2

    @property
    def max_fused(self) -> float:
        return self.arm_weight_sum / (self.rrf_k + 1.0)

    @property
    def effective_floor(self) -> float:
        return self.rrf_floor if self.rrf_floor >= 0 else self.rrf_floor_fraction * self.max_fused


@dataclass(frozen=True)
class UnreadModel:
    """The calibrated model refit without the reader's signals, over the same standardised
    signals (``calibrated.unread``): the confidence of a question decided without a reading."""

    bias: float = 0.0
    coefficients: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class CalibratedConfig:
    """Logistic model over named signals: sigmoid(bias + sum coef * (x - mean) / scale)."""

    bias: float = 0.0
    coefficients: Mapping[str, float] = field(default_factory=dict)
    means: Mapping[str, float] = field(default_factory=dict)
    scales: Mapping[str, float] = field(default_factory=dict)
    refuse_on_missing_facets: bool = False
    log_features: tuple[str, ...] = ()
    """Signals that enter the model as log(1 + x) (heavy-tailed scores such as BM25)."""
    fitted_on: str = ""
    """Provenance written by ``candor calibrate`` (dataset, split, date)."""
    reader_model: str = ""
    """:func:`gate_svc.reader.model_digest` of the reader whose scores the coefficients were
    fitted on; a gate running another reader rejects the config. Empty: not checked."""
    read_floor: float = 0.0
    """Refuse without reading when even a certain reading would leave confidence below this
    (a bound above ``tiers.uncertain`` trades a few passes for skipped reads; ``candor
    calibrate --read-floor-cost`` picks it). 0: skip only reads that could not pass."""
    unread: UnreadModel | None = None
    """Confidence for questions decided without reading, capped at a certain reading's. Absent:
    the model's own with the reader signals at 0, a lower bound (older configs)."""


@dataclass(frozen=True)
class TierBounds:
    confident: float = 0.75
    uncertain: float = 0.45


@dataclass(frozen=True)
class PolicyConfig:
    version: str
    policy: str = "seed000"
    seed000: Seed000Config = Seed000Config()
    seed001: Seed001Config = Seed001Config()
    seed003: Seed003Config = Seed003Config()
    seed004: Seed004Config = Seed004Config()
    calibrated: CalibratedConfig = CalibratedConfig()
    tiers: TierBounds = TierBounds()
    max_evidence: int = 5
    clarify_on_no_hits: bool = False
    curated_min_cosine: float = 0.6
    """A curated answer bypasses floor and gate only when the question is its question: the
    query's dense cosine with it at least this. Below (or found by keywords alone) it is
    ordinary evidence."""
    default_language: str = "en"
    refusal_messages: Mapping[str, str] = field(default_factory=dict)
    tenants: Mapping[str, PolicyConfig] = field(default_factory=dict)
    sha256: str = ""

    def for_tenant(self, tenant: str) -> PolicyConfig:
        """The effective config for a tenant (its overrides, else this one)."""
        return self.tenants.get(tenant, self)


@dataclass(frozen=True)
class Decision:
    outcome: str
    tier: str
    confidence: float
    """Calibrated (or rule-derived) confidence in [0, 1]."""
    display_confidence: int
    reason: str
    detail: str
    evidence: tuple[CandidateView, ...]
    signals: Mapping[str, float]
    thresholds: Mapping[str, float]
    policy_version: str
    policy_name: str
    missing_facets: tuple[str, ...] = ()


PolicyFn = Callable[[Sequence[CandidateView], Signals, PolicyConfig, RerankView | None], Decision]


def display_confidence(confidence: float, tier: str, bounds: TierBounds) -> int:
    """Map confidence into the band shown to people: 70-100, 20-50 or 5-10 by tier."""
    if tier == CONFIDENT:
        lo, hi, band = bounds.confident, 1.0, (70, 100)
    elif tier == UNCERTAIN:
        lo, hi, band = 0.0, bounds.confident, (20, 50)
    else:
        lo, hi, band = 0.0, bounds.uncertain, (5, 10)
    frac = 0.0 if hi <= lo else max(0.0, min(1.0, (confidence - lo) / (hi - lo)))
    return round(band[0] + frac * (band[1] - band[0]))


class _Builder:
    """Shared shape of every policy's decision."""

    def __init__(
        self,
        s: Signals,
        config: PolicyConfig,
        thresholds: Mapping[str, float],
        bounds: TierBounds | None = None,
    ) -> None:
        self.s, self.config, self.thresholds = s, config, dict(thresholds)
        self.bounds = bounds or config.tiers

    def refuse(
        self, reason: str, detail: str, confidence: float, outcome: str = REFUSE
    ) -> Decision:
        return Decision(
            outcome,
            NO_MATCH,
            confidence,
            display_confidence(confidence, NO_MATCH, self.bounds),
            reason,
            detail,
            (),
            self.s.values,
            self.thresholds,
            self.config.version,
            self.config.policy,
            self.s.missing_facets,
        )

    def passes(
        self,
        confidence: float,
        evidence: Sequence[CandidateView],
        detail: str,
        reason: str = "passed",
        tier: str | None = None,
    ) -> Decision:
        tier = tier or (CONFIDENT if confidence >= self.bounds.confident else UNCERTAIN)
        return Decision(
            PASS,
            tier,
            confidence,
            display_confidence(confidence, tier, self.bounds),
            reason,
            detail,
            tuple(evidence)[: self.config.max_evidence],
            self.s.values,
            self.thresholds,
            self.config.version,
            self.config.policy,
            self.s.missing_facets,
        )

    def no_hits(self) -> Decision:
        outcome = CLARIFY if self.config.clarify_on_no_hits else REFUSE
        return self.refuse("no_hits", "retrieval returned no candidates", 0.0, outcome)


def _curated_first(
    candidates: Sequence[CandidateView], b: _Builder, rest: Sequence[CandidateView]
) -> Decision | None:
    """Seed 000: a curated answer to the question asked bypasses floor and gate, ranked first.

    "To the question asked": its own question asks what the query asks, word for word but for
    scaffolding (``Signals.curated_covering``), and its dense cosine with the query reaches
    ``curated_min_cosine``. Being among the candidates, close in cosine or naming every rare
    word is not enough: "How do I bake bread?" found "How do I reset my password?" by its
    shared "How do I", and "How do I turn off two-factor authentication?" reached cosine 0.72
    with "How do I enable two-factor authentication?"; both were answered at confidence 1.0.
    Any other curated answer is weighed like any other evidence."""
    bound = b.config.curated_min_cosine
    curated = [
        c
        for c in candidates
        if c.curated
        and c.cosine is not None
        and c.cosine >= bound
        and c.chunk_id in b.s.curated_covering
    ]
    if not curated:
        return None
    best = curated[0]
    return b.passes(
        1.0,
        [*curated, *[c for c in rest if c not in curated]],
        f"curated answer {best.document_id} matched (cosine {best.cosine:.3f} >= {bound:g})",
        "curated_answer",
        CONFIDENT,
    )


def seed000(
    candidates: Sequence[CandidateView],
    s: Signals,
    config: PolicyConfig,
    rerank: RerankView | None = None,
) -> Decision:
    """Per-chunk distance confidence, chunk floor, average answer gate."""
    c = config.seed000
    b = _Builder(
        s,
        config,
        {
            "chunk_floor": c.chunk_floor,
            "answer_gate": c.answer_gate,
            "max_distance": c.max_distance,
            # A pass's tier comes from here: without it a 0.908 pass read UNCERTAIN unexplained.
            "confident": config.tiers.confident,
        },
    )
    scored = [(cand, distance_confidence(cand.cosine, c.max_distance)) for cand in candidates]
    admitted = [(cand, conf) for cand, conf in scored if not cand.curated and conf >= c.chunk_floor]
    average = sum(conf for _, conf in admitted) / len(admitted) if admitted else 0.0
    s.values["admitted_chunks"] = float(len(admitted))
    s.values["average_admitted_confidence"] = average
    if (curated := _curated_first(candidates, b, [cand for cand, _ in admitted])) is not None:
        return curated
    if not candidates:
        return b.no_hits()
    if not admitted:
        best = max(conf for _, conf in scored)
        return b.refuse(
            "below_floor",
            f"no chunk reached the floor: best {best:.1f} < {c.chunk_floor:g}",
            best / 100.0,
        )
    if average < c.answer_gate:
        return b.refuse(
            "low_confidence",
            f"average admitted confidence {average:.1f} < gate {c.answer_gate:g}",
            average / 100.0,
        )
    return b.passes(
        average / 100.0,
        [cand for cand, _ in admitted],
        f"{len(admitted)} chunk(s) admitted, average confidence {average:.1f} >= {c.answer_gate:g}",
    )


def seed001(
    candidates: Sequence[CandidateView],
    s: Signals,
    config: PolicyConfig,
    rerank: RerankView | None = None,
) -> Decision:
    """Logistic calibration of top RRF score and top-hit consensus; tiers .75 / .45."""
    c = config.seed001
    bounds = TierBounds(c.confident, c.uncertain)
    b = _Builder(
        s,
        config,
        {"a": c.a, "b": c.b, "c": c.c, "confident": c.confident, "uncertain": c.uncertain},
        bounds,
    )
    if (curated := _curated_first(candidates, b, candidates)) is not None:
        return curated
    if not candidates:
        return b.no_hits()
    conf = sigmoid(c.a * s.values["top_rrf"] + c.b * s.values["top_in_both"] + c.c)
    if conf < c.uncertain:
        return b.refuse("low_confidence", f"confidence {conf:.3f} < {c.uncertain:g}", conf)
    return b.passes(conf, candidates, f"confidence {conf:.3f} >= {c.uncertain:g}")


def seed003(
    candidates: Sequence[CandidateView],
    s: Signals,
    config: PolicyConfig,
    rerank: RerankView | None = None,
) -> Decision:
    """Composite retrieval quality; decline early below .3; tiers .85 / .6."""
    c = config.seed003
    bounds = TierBounds(c.confident, c.uncertain)
    b = _Builder(
        s,
        config,
        {"decline_below": c.decline_below, "confident": c.confident, "uncertain": c.uncertain},
        bounds,
    )
    if (curated := _curated_first(candidates, b, candidates)) is not None:
        return curated
    if not candidates:
        return b.no_hits()
    v = s.values
    gap = max(0.0, min(1.0, v["quality_gap"] / c.gap_scale)) if c.gap_scale > 0 else 0.0
    composite = max(
        0.0,
        min(
            1.0,
            c.w_top * v["quality_top"]
            + c.w_gap * gap
            + c.w_concentration * v["source_concentration"],
        ),
    )
    v["quality_composite"] = composite
    if composite < c.decline_below:
        return b.refuse(
            "low_confidence",
            f"declined early: quality {composite:.3f} < {c.decline_below:g}",
            composite,
        )
    if composite < c.uncertain:
        return b.refuse("low_confidence", f"quality {composite:.3f} < {c.uncertain:g}", composite)
    return b.passes(composite, candidates, f"quality {composite:.3f} >= {c.uncertain:g}")


def seed004(
    candidates: Sequence[CandidateView],
    s: Signals,
    config: PolicyConfig,
    rerank: RerankView | None = None,
) -> Decision:
    """Reranker relevance (0-3) when available, else the RRF floor and top1/top2 ratio."""
    c = config.seed004
    b = _Builder(
        s,
        config,
        {
            "rerank_min_scale": c.rerank_min_scale,
            "rerank_min_chunks": c.rerank_min_chunks,
            "rrf_floor": c.effective_floor,
            "ratio_min": c.ratio_min,
            "confident": config.tiers.confident,
        },
    )
    if (curated := _curated_first(candidates, b, candidates)) is not None:
        return curated
    if not candidates:
        return b.no_hits()
    if rerank is not None and not rerank.fallback:
        relevant = [
            cand for cand in candidates if rerank.scale.get(cand.chunk_id, 0) >= c.rerank_min_scale
        ]
        s.values["rerank_relevant_chunks"] = float(len(relevant))
        if len(relevant) < c.rerank_min_chunks:
            return b.refuse(
                "rerank_not_relevant",
                f"{len(relevant)} chunk(s) reranked >= {c.rerank_min_scale:g}",
                0.2,
            )
        best = max(rerank.scale.get(cand.chunk_id, 0) for cand in relevant)
        conf = 0.9 if best >= 3 else 0.6
        return b.passes(conf, relevant, f"{len(relevant)} chunk(s) reranked relevant")
    note = f" (reranker fell back: {rerank.error})" if rerank is not None else ""
    v = s.values
    if v["top_rrf"] < c.effective_floor:
        return b.refuse(
            "below_floor",
            f"top fused score {v['top_rrf']:.4f} < floor {c.effective_floor:.4f}" + note,
            0.1,
        )
    if v["rrf_ratio"] < c.ratio_min:
        return b.refuse(
            "no_clear_winner", f"top1/top2 {v['rrf_ratio']:.3f} < {c.ratio_min:g}" + note, 0.3
        )
    return b.passes(
        0.6, candidates, f"RRF floor and ratio {v['rrf_ratio']:.2f} cleared" + note, tier=UNCERTAIN
    )


def _logit(
    c: CalibratedConfig, values: Mapping[str, float], model: UnreadModel | None = None
) -> float:
    """The logit of ``c``'s model, or of ``model`` over ``c``'s standardisation."""
    z = c.bias if model is None else model.bias
    for name, coef in (c.coefficients if model is None else model.coefficients).items():
        x = values.get(name, 0.0)
        if name in c.log_features:
            x = math.log1p(max(0.0, x))
        z += coef * (x - c.means.get(name, 0.0)) / (c.scales.get(name, 1.0) or 1.0)
    return z


def _monotone_in_reader(c: CalibratedConfig) -> bool:
    """Weighs a reader signal, and none negatively: then a certain reading is the best one."""
    weights = [c.coefficients.get(name, 0.0) for name in READER_SIGNALS]
    return any(weights) and min(weights) >= 0


def _certain_logit(c: CalibratedConfig, values: Mapping[str, float]) -> float:
    return _logit(c, {**values, **dict.fromkeys(READER_SIGNALS, 1.0)})


def reading_bound(c: CalibratedConfig, values: Mapping[str, float]) -> float | None:
    """Confidence with a certain reading (every reader signal 1.0), the most any reading can
    give; ``None`` unless the model is monotone in the reader (then nothing bounds it)."""
    if not _monotone_in_reader(c):
        return None
    return sigmoid(_certain_logit(c, values))


def unread_logit(c: CalibratedConfig, values: Mapping[str, float]) -> float:
    """The logit of a question decided without reading: ``c.unread``'s, capped at a certain
    reading's (no reading could give more), else the model's with the reader signals at 0."""
    unread = {k: v for k, v in values.items() if k not in READER_SIGNALS}
    if c.unread is None:
        return _logit(c, unread)
    return min(_logit(c, unread, c.unread), _certain_logit(c, values))


#: Why a read was skipped (``candor_gate_reader_skips_total``'s ``bound`` label).
SKIP_BOUNDS = ("pass_bound", "read_floor")


def unread_bound(config: PolicyConfig, values: Mapping[str, float]) -> tuple[str, float]:
    """The bound (one of :data:`SKIP_BOUNDS`) that even a certain reading misses, and the
    confidence it would give; ``""`` when a reading could still decide."""
    certain = reading_bound(config.calibrated, values)
    if certain is None:
        return "", 1.0
    if certain < config.tiers.uncertain:
        return "pass_bound", certain
    return ("read_floor" if certain < config.calibrated.read_floor else ""), certain


def calibrated(
    candidates: Sequence[CandidateView],
    s: Signals,
    config: PolicyConfig,
    rerank: RerankView | None = None,
) -> Decision:
    """Logistic model over all signals, coefficients and bounds from the config."""
    c = config.calibrated
    b = _Builder(
        s,
        config,
        {"confident": config.tiers.confident, "uncertain": config.tiers.uncertain, "bias": c.bias}
        | ({"read_floor": c.read_floor} if c.read_floor else {}),
    )
    if (curated := _curated_first(candidates, b, candidates)) is not None:
        return curated
    if not candidates:
        return b.no_hits()
    missed, certain = unread_bound(config, s.values)
    if missed:
        # Decided without the reading even when there is one, so that a gate that skipped
        # the read and an evaluation that read agree on the outcome *and* the confidence.
        z = unread_logit(c, s.values)
        s.values["calibrated_logit"] = z
        limit = config.tiers.uncertain if missed == "pass_bound" else c.read_floor
        return b.refuse(
            "low_confidence",
            f"not read: even a certain reading reaches confidence {certain:.3f} < {limit:g} "
            f"(the {missed.replace('_', ' ')})",
            sigmoid(z),
        )
    z = _logit(c, s.values)
    conf = sigmoid(z)
    s.values["calibrated_logit"] = z
    if c.refuse_on_missing_facets and s.missing_facets:
        return b.refuse(
            "missing_facets", "evidence does not mention: " + ", ".join(s.missing_facets), conf
        )
    if conf < config.tiers.uncertain:
        return b.refuse(
            "low_confidence", f"confidence {conf:.3f} < {config.tiers.uncertain:g}", conf
        )
    return b.passes(conf, candidates, f"confidence {conf:.3f} >= {config.tiers.uncertain:g}")


POLICIES: Mapping[str, PolicyFn] = {
    "seed000": seed000,
    "seed001": seed001,
    "seed003": seed003,
    "seed004": seed004,
    "calibrated": calibrated,
}


#: How far from its fitted mean, in fitted standard deviations, an unobserved signal is put
#: against the decision (clipped to the values it can take). On the train splits of HaluEval
#: and Disfl-QA, searched with one arm: at 0 (the mean) false acceptance rose above the
#: two-arm gate's in keyword-only search; at 1 it fell to 2-9% (two arms: 17% and 30%) while
#: 34-62% of answerable questions still passed; at 2 nearly nothing passed (docs/evaluation.md).
UNOBSERVED_SPREAD = 1.0


def least_favourable(c: CalibratedConfig, name: str, spread: float = UNOBSERVED_SPREAD) -> float:
    """The value of a signal nobody observed that counts most against passing in ``c``'s
    model: ``spread`` standard deviations from its fitted mean, within its domain.

    The sign is the main model's, which decides passing (``calibrated.unread`` only sets the
    confidence reported on a refusal decided without reading)."""
    coef = c.coefficients.get(name, 0.0)
    logged = name in c.log_features

    def scaled(x: float) -> float:
        return math.log1p(max(0.0, x)) if logged else x

    mean, scale = c.means.get(name, 0.0), c.scales.get(name, 1.0) or 1.0
    t = mean - math.copysign(spread * scale, coef)
    lo, hi = SIGNAL_DOMAINS.get(name, (-math.inf, None))
    t = max(t, scaled(lo))
    if hi is not None:
        t = min(t, scaled(hi))
    return math.expm1(t) if logged else t


def decide(
    candidates: Sequence[CandidateView],
    config: PolicyConfig,
    query: str = "",
    degraded_arms: int = 0,
    rerank: RerankView | None = None,
    reader: ReaderView | None = None,
    missing_arms: Iterable[str] = (),
) -> Decision:
    """Compute every signal and apply the configured policy.

    ``missing_arms``: retrieval arms that returned nothing (failed, timed out, or not asked
    for). A calibrated model was fitted on searches where both answered; the signals such a
    search could not observe read as 0, which its model can weigh *for* passing (agreement
    between arms weighs negatively), so they are set to their least favourable plausible
    value instead: losing an arm never makes the gate more willing to answer.
    """
    s = compute_signals(candidates, query, config.seed000.max_distance, degraded_arms=degraded_arms)
    missing = sorted(set(missing_arms))
    imputed = []
    if missing and config.policy == "calibrated" and candidates:
        c = config.calibrated
        imputed = sorted(unobserved_signals(missing) & set(c.coefficients))
        for name in imputed:
            s.values[name] = least_favourable(c, name)
        s.values["unobserved_arms"] = float(len(missing))
    if reader is not None:
        s.values.update(reader.signal_values())
    if rerank is not None:
        s.values["rerank_fallback"] = 1.0 if rerank.fallback else 0.0
        if rerank.scale:
            s.values["rerank_top_scale"] = float(max(rerank.scale.values()))
    decision = POLICIES[config.policy](candidates, s, config, rerank)
    unreadable = sorted(k for k, v in s.values.items() if not math.isfinite(v))
    if decision.outcome != REFUSE and (unreadable or not math.isfinite(decision.confidence)):
        # Every bound is a `<` test that NaN fails, so a NaN score (a broken backend or
        # embedder) fell through to PASS; nothing unreadable may pass.
        return _Builder(s, config, decision.thresholds).refuse(
            "low_confidence",
            "signals are not finite numbers: " + (", ".join(unreadable) or "confidence"),
            0.0,
        )
    if not imputed:
        return decision
    note = (
        f"; without {' or '.join(missing)} results, {', '.join(imputed)} "
        "read at their least favourable"
    )
    return replace(decision, detail=decision.detail + note)


RERANK_SIGNALS = ("rerank_top_scale", "rerank_fallback")


def uses_reranker(config: PolicyConfig) -> bool:
    """Whether ``config`` reads the LLM reranker's verdict (seed 004, or a calibrated model that
    weighs a rerank signal); else the gate never calls it."""
    if config.policy == "seed004":
        return True
    coefficients = config.calibrated.coefficients
    return config.policy == "calibrated" and any(
        coefficients.get(name, 0.0) != 0.0 for name in RERANK_SIGNALS
    )


def uses_reader(config: PolicyConfig) -> bool:
    """Whether ``config`` weighs a reader signal (else the gate never reads)."""
    return config.policy == "calibrated" and weighs_reader(config.calibrated.coefficients)


def reader_mismatch(
    config: PolicyConfig, digest: str | None, where: str = "this gate runs"
) -> str | None:
    """Why ``config`` cannot run beside the loaded reader (``digest``; ``None`` when the reader
    is disabled), or ``None``. A policy fitted on one reader's scores, weighed against another's,
    is miscalibrated without any error to show for it. ``where`` names who holds ``digest``."""
    from gate_svc.reader_files import bundled_name

    def named(d: str) -> str:
        return f" (bundled {n})" if (n := bundled_name(d)) else ""

    for name, c in (("", config), *((f"tenants.{t}.", o) for t, o in config.tenants.items())):
        want = c.calibrated.reader_model
        if digest is None or not want or not uses_reader(c) or want == digest:
            continue
        return (
            f"{name}calibrated.reader_model is {want}{named(want)} but {where} evidence reader "
            f"{digest}{named(digest)}: refit the policy with `candor calibrate` on rows this "
            "reader scored, or run the reader it names (gate.reader.model)"
        )
    return None


def skip_reading(
    candidates: Sequence[CandidateView],
    config: PolicyConfig,
    query: str = "",
    degraded_arms: int = 0,
    rerank: RerankView | None = None,
    missing_arms: Iterable[str] = (),
) -> str:
    """Why reading the evidence cannot let this decision pass (one of :data:`SKIP_BOUNDS`),
    or ``""`` when it could.

    A calibrated policy is monotone in a reader signal it weighs positively, so if even a
    certain "it answers" (1.0) leaves the decision refused (below the pass bound, or below
    ``calibrated.read_floor``), the read of 6-10 ms can be skipped: the outcome is already
    known, and :func:`calibrated` decides such a question without the reading either way.
    """
    if not uses_reader(config):
        return "pass_bound"  # no reading could change the decision
    if not _monotone_in_reader(config.calibrated):
        return ""
    best = decide(
        candidates, config, query, degraded_arms, rerank, ReaderView((1.0,)), missing_arms
    )
    if best.outcome == PASS:
        return ""
    # Refused for another reason (no hits, missing facets) counts as missing the pass bound.
    return unread_bound(config, best.signals)[0] or "pass_bound"


def policy_thresholds(config: PolicyConfig) -> dict[str, float]:
    """The active policy's bounds by dotted name, for GetPolicy and dashboards."""
    out: dict[str, float] = {}
    section = getattr(config, config.policy)
    if config.policy == "calibrated":
        out["calibrated.bias"] = config.calibrated.bias
        out.update(
            {f"calibrated.coefficients.{k}": v for k, v in config.calibrated.coefficients.items()}
        )
        if config.calibrated.read_floor:
            out["calibrated.read_floor"] = config.calibrated.read_floor
        if (unread := config.calibrated.unread) is not None:
            out["calibrated.unread.bias"] = unread.bias
            out.update(
                {f"calibrated.unread.coefficients.{k}": v for k, v in unread.coefficients.items()}
            )
    else:
        out.update(
            {f"{config.policy}.{f.name}": float(getattr(section, f.name)) for f in fields(section)}
        )
    if config.policy in ("seed000", "seed004", "calibrated"):
        out["tiers.confident"], out["tiers.uncertain"] = (
            config.tiers.confident,
            config.tiers.uncertain,
        )
    out["curated_min_cosine"] = config.curated_min_cosine
    return out


def arms_unavailable(config: PolicyConfig, detail: str) -> Decision:
    """The decision when retrieval could not be reached at all: refuse, never guess."""
    return Decision(
        REFUSE,
        NO_MATCH,
        0.0,
        display_confidence(0.0, NO_MATCH, config.tiers),
        "arms_unavailable",
        detail,
        (),
        {},
        {},
        config.version,
        config.policy,
    )


# --- parsing -------------------------------------------------------------------------------

_NUMERIC_SECTIONS: Mapping[str, type[Any]] = {
    "seed000": Seed000Config,
    "seed001": Seed001Config,
    "seed003": Seed003Config,
    "seed004": Seed004Config,
    "tiers": TierBounds,
}
_TOP_KEYS = {
    "version",
    "policy",
    *(_NUMERIC_SECTIONS),
    "calibrated",
    "max_evidence",
    "clarify_on_no_hits",
    "curated_min_cosine",
    "default_language",
    "refusal_messages",
    "tenants",
}


def _numbers(cls: type[Any], data: Any, where: str) -> Any:
    if data is None:
        return cls()
    if not isinstance(data, dict):
        raise PolicyError(f"{where} must be a mapping")
    known = {f.name for f in fields(cls)}
    unknown = set(data) - known
    if unknown:
        raise PolicyError(f"{where}: unknown keys {sorted(unknown)}")
    out = {}
    for k, v in data.items():
        if isinstance(v, bool) or not isinstance(v, int | float):
            raise PolicyError(f"{where}.{k} must be a number, got {v!r}")
        out[k] = float(v)
    return cls(**out)


#: log1p of any signal's largest plausible value (BM25 scores in the thousands are ~8).
MAX_LOG_SCALE = 50.0


def _calibrated(data: Any) -> CalibratedConfig:
    from gate_svc.signals import SIGNAL_NAMES

    if data is None:
        return CalibratedConfig()
    if not isinstance(data, dict):
        raise PolicyError("calibrated must be a mapping")
    unknown = set(data) - {f.name for f in fields(CalibratedConfig)}
    if unknown:
        raise PolicyError(f"calibrated: unknown keys {sorted(unknown)}")
    maps = {
        key: _signal_map(data.get(key), f"calibrated.{key}", SIGNAL_NAMES)
        for key in ("coefficients", "means", "scales")
    }
    # A negative scale turns a signal around while everything that reasons about the model
    # (a certain reading is the best one, an absent arm's least favourable value) assumes it
    # is not: a scale is a standard deviation.
    if any(v <= 0 for v in maps["scales"].values()):
        raise PolicyError("calibrated.scales must be > 0 (a standard deviation)")
    bias = _number(data.get("bias", 0.0), "calibrated.bias")
    logs = data.get("log_features") or []
    if not isinstance(logs, list) or not all(
        isinstance(x, str) and x in SIGNAL_NAMES for x in logs
    ):
        raise PolicyError("calibrated.log_features must list signal names")
    for name in logs:
        # A log feature's mean and scale are on log1p's scale: one in the hundreds made
        # expm1 overflow when an arm was missing (every such decision failed).
        for key in ("means", "scales"):
            if abs(maps[key].get(name, 0.0)) > MAX_LOG_SCALE:
                raise PolicyError(
                    f"calibrated.{key}.{name} is a log1p-scale value and must be within "
                    f"±{MAX_LOG_SCALE:g}"
                )
    return CalibratedConfig(
        bias,
        maps["coefficients"],
        maps["means"],
        maps["scales"],
        _flag(data.get("refuse_on_missing_facets", False), "calibrated.refuse_on_missing_facets"),
        tuple(str(x) for x in logs),
        str(data.get("fitted_on", "")),
        str(data.get("reader_model", "")),
        _read_floor(data.get("read_floor", 0.0)),
        _unread(data.get("unread"), SIGNAL_NAMES),
    )


def _flag(value: Any, where: str) -> bool:
    """A YAML boolean: the string "false" is truthy, and turned on what it meant to turn off."""
    if not isinstance(value, bool):
        raise PolicyError(f"{where} must be true or false (unquoted), not {value!r}")
    return value


def _number(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise PolicyError(f"{where} must be a number")
    return float(value)


def _signal_map(value: Any, where: str, signal_names: frozenset[str]) -> dict[str, float]:
    m = value or {}
    if not isinstance(m, dict) or not all(
        isinstance(v, int | float) and not isinstance(v, bool) for v in m.values()
    ):
        raise PolicyError(f"{where} must map signal names to numbers")
    bad = sorted(set(m) - signal_names)
    if bad:
        raise PolicyError(f"{where}: unknown signals {bad}")
    return {k: float(v) for k, v in m.items()}


def _unread(data: Any, signal_names: frozenset[str]) -> UnreadModel | None:
    if data is None:
        return None
    if not isinstance(data, dict) or set(data) - {"bias", "coefficients"}:
        raise PolicyError("calibrated.unread must be a mapping of bias and coefficients")
    bias = _number(data.get("bias", 0.0), "calibrated.unread.bias")
    where = "calibrated.unread.coefficients"
    coefficients = _signal_map(data.get("coefficients"), where, signal_names)
    # It stands in for a reading that did not happen, so it cannot weigh one.
    if weighs_reader(coefficients):
        raise PolicyError(f"{where} cannot weigh reader signals")
    return UnreadModel(bias, coefficients)


def _read_floor(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
        raise PolicyError(f"calibrated.read_floor must be a number in [0, 1], got {value!r}")
    return float(value)


def _validate(p: PolicyConfig) -> None:
    s0, s1, s3, s4, t = p.seed000, p.seed001, p.seed003, p.seed004, p.tiers
    checks = [
        (0 < s0.max_distance <= 2, "seed000.max_distance must be in (0, 2]"),
        (
            0 <= s0.chunk_floor <= 100 and 0 <= s0.answer_gate <= 100,
            "seed000.chunk_floor and answer_gate must be in [0, 100]",
        ),
        (
            0 <= t.uncertain <= t.confident <= 1,
            "tiers must satisfy 0 <= uncertain <= confident <= 1",
        ),
        (
            0 <= s1.uncertain <= s1.confident <= 1,
            "seed001 bounds must satisfy 0 <= uncertain <= confident <= 1",
        ),
        (
            0 <= s3.decline_below <= s3.uncertain <= s3.confident <= 1,
            "seed003 bounds must satisfy 0 <= decline_below <= uncertain <= confident <= 1",
        ),
        (0 <= s4.rrf_floor_fraction <= 1, "seed004.rrf_floor_fraction must be in [0, 1]"),
        (s4.rrf_k > 0 and s4.arm_weight_sum > 0, "seed004.rrf_k and arm_weight_sum must be > 0"),
        (
            s4.rrf_floor <= s4.max_fused,
            f"seed004.rrf_floor {s4.rrf_floor:g} can never be met: the highest fused score with "
            f"k={s4.rrf_k:g} and arm weights summing to {s4.arm_weight_sum:g} is "
            f"{s4.arm_weight_sum:g}/{s4.rrf_k + 1:g} = {s4.max_fused:.4f}, so every query would "
            "be refused",
        ),
        (0 <= s4.rerank_min_scale <= 3, "seed004.rerank_min_scale must be on the 0-3 scale"),
        # No chunk judged relevant then "passed" on zero of them, and max() of none crashed.
        (s4.rerank_min_chunks >= 1, "seed004.rerank_min_chunks must be >= 1"),
        (s4.ratio_min >= 1, "seed004.ratio_min must be >= 1 (a top-1 / top-2 score ratio)"),
        (
            s4.rrf_floor == -1 or s4.rrf_floor >= 0,
            "seed004.rrf_floor must be >= 0, or -1 for unset (use rrf_floor_fraction)",
        ),
        (1 <= p.max_evidence <= 50, "max_evidence must be in [1, 50]"),
        (0 <= p.curated_min_cosine <= 1, "curated_min_cosine must be in [0, 1]"),
        (
            p.policy != "calibrated" or bool(p.calibrated.coefficients),
            "policy calibrated needs calibrated.coefficients (run candor calibrate)",
        ),
        (
            s0.answer_gate <= 100 * (1 - 0) and s0.chunk_floor <= 100,
            "seed000 thresholds above 100 can never be met",
        ),
    ]
    for ok, message in checks:
        if not ok:
            raise PolicyError(message)


def _parse_mapping(data: dict[str, Any], version: str, sha: str) -> PolicyConfig:
    unknown = set(data) - _TOP_KEYS
    if unknown:
        raise PolicyError(f"unknown keys {sorted(unknown)}")
    policy = str(data.get("policy", "seed000"))
    if policy not in POLICIES:
        raise PolicyError(f"policy {policy!r} is not one of {sorted(POLICIES)}")
    sections = {k: _numbers(cls, data.get(k), k) for k, cls in _NUMERIC_SECTIONS.items()}
    messages = data.get("refusal_messages") or {}
    if not isinstance(messages, dict) or not all(
        isinstance(k, str) and isinstance(v, str) and v for k, v in messages.items()
    ):
        raise PolicyError("refusal_messages must map language codes to non-empty strings")
    max_evidence = data.get("max_evidence", 5)
    if isinstance(max_evidence, bool) or not isinstance(max_evidence, int):
        raise PolicyError("max_evidence must be an integer")
    curated_min_cosine = data.get("curated_min_cosine", 0.6)
    if isinstance(curated_min_cosine, bool) or not isinstance(curated_min_cosine, int | float):
        raise PolicyError("curated_min_cosine must be a number")
    default_language = str(data.get("default_language", "en"))
    if default_language not in {**DEFAULT_MESSAGES, **messages}:
        raise PolicyError(
            f"default_language {default_language!r} has no refusal message; add one under "
            "refusal_messages"
        )
    config = PolicyConfig(
        version=version,
        policy=policy,
        calibrated=_calibrated(data.get("calibrated")),
        max_evidence=max_evidence,
        clarify_on_no_hits=_flag(data.get("clarify_on_no_hits", False), "clarify_on_no_hits"),
        curated_min_cosine=float(curated_min_cosine),
        default_language=default_language,
        refusal_messages=dict(messages),
        sha256=sha,
        **sections,
    )
    _validate(config)
    return config


#: Sections a tenant override replaces whole: a fitted model is one piece, and a tenant's own
#: coefficients merged over the file's kept the file's weights for signals the tenant's fit
#: left out.
WHOLE_SECTIONS = frozenset({"calibrated"})


def _merge(base: dict[str, Any], over: Mapping[str, Any], top: bool = True) -> dict[str, Any]:
    out = dict(base)
    for k, v in over.items():
        nested = isinstance(v, Mapping) and isinstance(out.get(k), dict)
        if nested and not (top and k in WHOLE_SECTIONS):
            out[k] = _merge(out[k], v, top=False)
        else:
            out[k] = v
    return out


#: Nesting a threshold config never needs; far deeper, PyYAML and the checks recurse out of stack.
MAX_DEPTH = 32
#: Values a threshold config never needs; aliases can make a 400-byte file expand to billions.
MAX_NODES = 100_000


class _ConfigLoader(yaml.SafeLoader):
    """YAML with every mapping key kept as written and no key twice: YAML 1.1 read a tenant
    named ``yes``, ``null`` or ``0123`` as True, None or 83, whose override then never
    applied, and a second ``version:`` silently replaced the first."""


def _string_keys(loader: yaml.SafeLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    own: set[str] = set()
    for key_node, _ in node.value:
        if not isinstance(key_node, yaml.ScalarNode):
            raise PolicyError(f"line {key_node.start_mark.line + 1}: keys must be plain names")
        if key_node.tag == "tag:yaml.org,2002:merge":
            continue  # "<<: *base": its keys may be overridden below
        if key_node.value in own:
            raise PolicyError(
                f"{key_node.value!r} is given twice (line {key_node.start_mark.line + 1})"
            )
        own.add(key_node.value)
    loader.flatten_mapping(node)  # merged keys first, so the mapping's own ones win
    out: dict[Any, Any] = {}
    for key_node, value_node in node.value:
        out[key_node.value] = loader.construct_object(value_node, deep=True)  # type: ignore[no-untyped-call]
    return out


_ConfigLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _string_keys)


def _check_values(
    node: object, where: str = "", depth: int = 0, seen: set[int] | None = None
) -> None:
    """Every number finite, however deep: a NaN weight made seed003 pass any question at
    confidence 1.0 (min(1, nan) is 1) and a 400-digit integer overflowed float(). A node
    reached again through an alias is checked once. (Keys are strings: ``_ConfigLoader``.)"""
    seen = set() if seen is None else seen
    if depth > MAX_DEPTH:
        raise PolicyError(f"{where or 'the file'} nests deeper than {MAX_DEPTH} levels")
    if isinstance(node, bool):
        return
    if isinstance(node, int) and abs(node) > 10**15:
        raise PolicyError(f"{where} is too large a number")
    if isinstance(node, float) and not math.isfinite(node):
        raise PolicyError(f"{where} must be a finite number (got {node})")
    if isinstance(node, dict | list):
        if id(node) in seen:
            return
        seen.add(id(node))
        if len(seen) > MAX_NODES:
            raise PolicyError(f"the file holds more than {MAX_NODES} values")
    if isinstance(node, dict):
        for key, value in node.items():
            _check_values(value, f"{where}.{key}" if where else key, depth + 1, seen)
    elif isinstance(node, list):
        for i, value in enumerate(node):
            _check_values(value, f"{where}[{i}]", depth + 1, seen)


def parse_policy(text: str) -> PolicyConfig:
    """Parse and validate a threshold config; raises PolicyError naming the problem."""
    try:
        data = yaml.load(text, Loader=_ConfigLoader)  # a SafeLoader: no arbitrary objects
    except yaml.YAMLError as exc:
        raise PolicyError(f"not valid YAML: {exc}") from exc
    except RecursionError as exc:
        raise PolicyError(f"nests deeper than {MAX_DEPTH} levels") from exc
    if not isinstance(data, dict):
        raise PolicyError("top level must be a mapping")
    try:
        _check_values(data)
    except RecursionError as exc:
        raise PolicyError(f"nests deeper than {MAX_DEPTH} levels") from exc
    raw_version = data.get("version")
    if not isinstance(raw_version, str) or not raw_version.strip():
        # YAML reads 1.10 as the float 1.1: only a string keeps the version exact.
        raise PolicyError("version is required and must be a quoted string")
    version = raw_version.strip()
    sha = hashlib.sha256(text.encode()).hexdigest()
    tenants_raw = data.get("tenants") or {}
    if not isinstance(tenants_raw, dict):
        raise PolicyError("tenants must map tenant ids to overrides")
    base = {k: v for k, v in data.items() if k not in ("version", "tenants")}
    config = _parse_mapping(base, version, sha)
    tenants = {}
    for tenant, over in tenants_raw.items():
        if not isinstance(over, dict):
            raise PolicyError(f"tenants.{tenant} must be a mapping")
        if "version" in over or "tenants" in over:
            raise PolicyError(f"tenants.{tenant}: version and tenants cannot be overridden")
        try:
            tenants[str(tenant)] = _parse_mapping(_merge(base, over), version, sha)
        except PolicyError as exc:
            raise PolicyError(f"tenants.{tenant}: {exc}") from exc
    return replace(config, tenants=tenants)


def load_policy(path: str | Path | None) -> PolicyConfig:
    p = Path(path) if path else DEFAULT_POLICY_PATH
    try:
        text = p.read_text()
    except OSError as exc:
        raise PolicyError(f"cannot read {p}: {exc}") from exc
    return parse_policy(text)
