"""Versioned threshold config and the decision: which policy, which bounds, and why.

A policy is a pure function from candidates + signals + config to a Decision, so the evaluation
can run any seed's gate on the same data. The config's ``version`` travels with every decision.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from gate_svc.refusal import DEFAULT_MESSAGES
from gate_svc.signals import CandidateView, compute_signals, distance_confidence

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
class TierBounds:
    confident: float = 0.75
    uncertain: float = 0.45


@dataclass(frozen=True)
class PolicyConfig:
    version: str
    policy: str = "seed000"
    seed000: Seed000Config = Seed000Config()
    tiers: TierBounds = TierBounds()
    max_evidence: int = 5
    clarify_on_no_hits: bool = False
    default_language: str = "en"
    refusal_messages: Mapping[str, str] = field(default_factory=dict)
    sha256: str = ""


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


PolicyFn = Callable[[Sequence[CandidateView], Mapping[str, float], PolicyConfig], Decision]


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


def _tier(confidence: float, bounds: TierBounds) -> str:
    return CONFIDENT if confidence >= bounds.confident else UNCERTAIN


def _refuse(
    reason: str,
    detail: str,
    confidence: float,
    signals: Mapping[str, float],
    thresholds: Mapping[str, float],
    config: PolicyConfig,
    outcome: str = REFUSE,
) -> Decision:
    return Decision(
        outcome=outcome,
        tier=NO_MATCH,
        confidence=confidence,
        display_confidence=display_confidence(confidence, NO_MATCH, config.tiers),
        reason=reason,
        detail=detail,
        evidence=(),
        signals=signals,
        thresholds=thresholds,
        policy_version=config.version,
        policy_name=config.policy,
    )


def seed000(
    candidates: Sequence[CandidateView], signals: Mapping[str, float], config: PolicyConfig
) -> Decision:
    """Seed 000: per-chunk distance confidence, chunk floor, average answer gate.

    Curated answers are exempt from floor and gate and ranked first.
    """
    c = config.seed000
    thresholds = {
        "chunk_floor": c.chunk_floor,
        "answer_gate": c.answer_gate,
        "max_distance": c.max_distance,
    }
    sig = dict(signals)
    scored = [(cand, distance_confidence(cand.cosine, c.max_distance)) for cand in candidates]
    curated = [(cand, conf) for cand, conf in scored if cand.curated]
    admitted = [(cand, conf) for cand, conf in scored if not cand.curated and conf >= c.chunk_floor]
    average = sum(conf for _, conf in admitted) / len(admitted) if admitted else 0.0
    sig["admitted_chunks"] = float(len(admitted))
    sig["average_admitted_confidence"] = average
    if curated:
        evidence = tuple(cand for cand, _ in [*curated, *admitted])[: config.max_evidence]
        return Decision(
            PASS,
            CONFIDENT,
            1.0,
            100,
            "curated_answer",
            f"curated answer {curated[0][0].document_id} matched",
            evidence,
            sig,
            thresholds,
            config.version,
            config.policy,
        )
    if not candidates:
        outcome = CLARIFY if config.clarify_on_no_hits else REFUSE
        return _refuse(
            "no_hits", "retrieval returned no candidates", 0.0, sig, thresholds, config, outcome
        )
    if not admitted:
        best = max(conf for _, conf in scored)
        return _refuse(
            "below_floor",
            f"no chunk reached the floor: best {best:.1f} < {c.chunk_floor:g}",
            best / 100.0,
            sig,
            thresholds,
            config,
        )
    if average < c.answer_gate:
        return _refuse(
            "low_confidence",
            f"average admitted confidence {average:.1f} < gate {c.answer_gate:g}",
            average / 100.0,
            sig,
            thresholds,
            config,
        )
    confidence = average / 100.0
    tier = _tier(confidence, config.tiers)
    return Decision(
        PASS,
        tier,
        confidence,
        display_confidence(confidence, tier, config.tiers),
        "passed",
        f"{len(admitted)} chunk(s) admitted, average confidence {average:.1f} >= {c.answer_gate:g}",
        tuple(cand for cand, _ in admitted)[: config.max_evidence],
        sig,
        thresholds,
        config.version,
        config.policy,
    )


POLICIES: Mapping[str, PolicyFn] = {"seed000": seed000}


def decide(candidates: Sequence[CandidateView], config: PolicyConfig) -> Decision:
    """Compute every signal and apply the configured policy."""
    signals = compute_signals(candidates, config.seed000.max_distance)
    return POLICIES[config.policy](candidates, signals, config)


def arms_unavailable(config: PolicyConfig, detail: str) -> Decision:
    """The decision when retrieval could not be reached at all: refuse, never guess."""
    return _refuse("arms_unavailable", detail, 0.0, {}, {}, config)


def _section(cls: type[Any], data: Any, where: str) -> Any:
    if data is None:
        return cls()
    if not isinstance(data, dict):
        raise PolicyError(f"{where} must be a mapping")
    known = set(cls.__dataclass_fields__)
    unknown = set(data) - known
    if unknown:
        raise PolicyError(f"{where}: unknown keys {sorted(unknown)}")
    try:
        return cls(**{k: float(v) for k, v in data.items()})
    except (TypeError, ValueError) as exc:
        raise PolicyError(f"{where}: {exc}") from exc


def parse_policy(text: str) -> PolicyConfig:
    """Parse and validate a threshold config; raises PolicyError naming the problem."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise PolicyError(f"not valid YAML: {exc}") from exc
    if not isinstance(data, dict):
        raise PolicyError("top level must be a mapping")
    allowed = {
        "version",
        "policy",
        "seed000",
        "tiers",
        "max_evidence",
        "clarify_on_no_hits",
        "default_language",
        "refusal_messages",
    }
    unknown = set(data) - allowed
    if unknown:
        raise PolicyError(f"unknown keys {sorted(unknown)}")
    raw_version = data.get("version")
    if not isinstance(raw_version, str) or not raw_version.strip():
        # YAML reads 1.10 as the float 1.1: only a string keeps the version exact.
        raise PolicyError("version is required and must be a quoted string")
    version = raw_version.strip()
    policy = str(data.get("policy", "seed000"))
    if policy not in POLICIES:
        raise PolicyError(f"policy {policy!r} is not one of {sorted(POLICIES)}")
    seed = _section(Seed000Config, data.get("seed000"), "seed000")
    tiers = _section(TierBounds, data.get("tiers"), "tiers")
    if not 0 < seed.max_distance <= 2:
        raise PolicyError("seed000.max_distance must be in (0, 2]")
    if not 0 <= seed.chunk_floor <= 100 or not 0 <= seed.answer_gate <= 100:
        raise PolicyError("seed000.chunk_floor and answer_gate must be in [0, 100]")
    if not 0 <= tiers.uncertain <= tiers.confident <= 1:
        raise PolicyError("tiers must satisfy 0 <= uncertain <= confident <= 1")
    messages = data.get("refusal_messages") or {}
    if not isinstance(messages, dict) or not all(
        isinstance(k, str) and isinstance(v, str) and v for k, v in messages.items()
    ):
        raise PolicyError("refusal_messages must map language codes to non-empty strings")
    max_evidence = data.get("max_evidence", 5)
    if isinstance(max_evidence, bool) or not isinstance(max_evidence, int):
        raise PolicyError("max_evidence must be an integer")
    if not 1 <= max_evidence <= 50:
        raise PolicyError("max_evidence must be in [1, 50]")
    default_language = str(data.get("default_language", "en"))
    if default_language not in {**DEFAULT_MESSAGES, **messages}:
        raise PolicyError(
            f"default_language {default_language!r} has no refusal message; add one under "
            "refusal_messages"
        )
    return PolicyConfig(
        version=version,
        policy=policy,
        seed000=seed,
        tiers=tiers,
        max_evidence=max_evidence,
        clarify_on_no_hits=bool(data.get("clarify_on_no_hits", False)),
        default_language=default_language,
        refusal_messages=dict(messages),
        sha256=hashlib.sha256(text.encode()).hexdigest(),
    )


def load_policy(path: str | Path | None) -> PolicyConfig:
    p = Path(path) if path else DEFAULT_POLICY_PATH
    try:
        text = p.read_text()
    except OSError as exc:
        raise PolicyError(f"cannot read {p}: {exc}") from exc
    return parse_policy(text)
