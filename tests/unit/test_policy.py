"""gate_svc.signals and gate_svc.policy: seed 000 decisions, bands, and config validation."""

from __future__ import annotations

import dataclasses
import hashlib
import math
import re
from pathlib import Path

import pytest
import yaml

from gate_svc.policy import (
    CLARIFY,
    CONFIDENT,
    DEFAULT_POLICY_PATH,
    NO_MATCH,
    PASS,
    REFUSE,
    UNCERTAIN,
    PolicyConfig,
    PolicyError,
    Seed000Config,
    TierBounds,
    decide,
    display_confidence,
    least_favourable,
    load_policy,
    parse_policy,
    policy_thresholds,
)
from gate_svc.reader_view import ReaderView
from gate_svc.signals import (
    ARM_SIGNALS,
    SIGNAL_DOMAINS,
    SIGNAL_NAMES,
    CandidateView,
    compute_signals,
    distance_confidence,
)

CURATED, ARTICLE = 2, 1
CONFIG = PolicyConfig(version="test-1")


def cand(
    n: int,
    cosine: float | None,
    *,
    bm25: float | None = None,
    fused: float = 0.0,
    in_both: bool = False,
    kind: int = ARTICLE,
) -> CandidateView:
    return CandidateView(
        chunk_id=f"d{n}#p0c0",
        parent_id=f"d{n}#p0",
        document_id=f"d{n}",
        title=f"Doc {n}",
        text=f"text {n}",
        source_kind=kind,
        cosine=cosine,
        bm25=bm25,
        fused_score=fused,
        fused_rank=n,
        in_both=in_both,
    )


def ids(decision) -> list[str]:
    return [c.chunk_id for c in decision.evidence]


# --- signals ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cosine", "expected"),
    [
        (1.0, 100.0),
        (0.675, 50.0),  # distance 0.325 is half of 0.65
        (0.35, 0.0),  # distance exactly 0.65
        (0.2, 0.0),  # beyond max distance clamps at 0
        (-1.0, 0.0),
        (None, 0.0),
    ],
)
def test_distance_confidence(cosine: float | None, expected: float) -> None:
    assert distance_confidence(cosine, 0.65) == pytest.approx(expected)


def test_distance_confidence_respects_max_distance() -> None:
    assert distance_confidence(0.5, 1.0) == pytest.approx(50.0)


def test_compute_signals_on_hand_made_candidates() -> None:
    cands = [
        cand(1, 0.9, fused=0.03, in_both=True),
        cand(2, 0.8, bm25=5.0, fused=0.015),
        cand(3, None, bm25=8.0, fused=0.01, kind=CURATED),
        cand(4, 0.4, bm25=1.0, fused=0.005, in_both=True),
    ]
    v = compute_signals(cands, "", 0.65).values
    expected = {
        "hits": 4.0,
        "top_cosine": 0.9,
        "top_distance_confidence": (1 - 0.1 / 0.65) * 100,  # 84.615...
        "top_bm25": 8.0,
        "top_rrf": 0.03,
        "rrf_ratio": 2.0,
        "cosine_ratio": 0.9 / 0.8,
        "top_in_both": 1.0,
        "in_both_top_k": 2.0,  # candidates 1 and 4, both within the top 5
        "curated_hits": 1.0,
        "quality_top": 0.9,
        "quality_gap": 0.9 - 0.4,
    }
    assert {k: v[k] for k in expected} == pytest.approx(expected)


def test_compute_signals_with_no_candidates_is_all_zero() -> None:
    v = compute_signals([], "", 0.65).values
    assert v["hits"] == 0.0
    assert v["top_cosine"] == v["top_rrf"] == v["facet_coverage"] == 0.0


def test_compute_signals_lone_candidate_is_an_unambiguous_winner() -> None:
    v = compute_signals([cand(1, 0.7, fused=0.016)], "", 0.65).values
    assert v["rrf_ratio"] == 10.0
    assert v["cosine_ratio"] == 10.0
    assert v["top_in_both"] == 0.0


def test_compute_signals_ratio_is_capped() -> None:
    v = compute_signals([cand(1, 0.9, fused=1.0), cand(2, 0.01, fused=0.001)], "", 0.65).values
    assert v["rrf_ratio"] == 10.0
    assert v["cosine_ratio"] == 10.0


def test_a_copy_of_the_best_candidate_is_not_its_rival() -> None:
    # The same article filed twice made every question on it look contested (ratios of 1.0),
    # which the shipped model weighs *for* passing.
    article = "Most refunds complete within 5 business days."
    best = dataclasses.replace(cand(1, 0.9, fused=0.03), text=article)
    copy = dataclasses.replace(
        cand(2, 0.9, fused=0.029), text="  most refunds complete within 5 business days. "
    )
    rival = dataclasses.replace(cand(3, 0.6, fused=0.015), text="Labels can be voided.")
    v = compute_signals([best, copy, rival], "", 0.65).values
    assert v["cosine_ratio"] == pytest.approx(0.9 / 0.6)
    assert v["rrf_ratio"] == pytest.approx(0.03 / 0.015)
    assert v["hits"] == 3.0  # the copy is still a candidate, and still evidence
    alone = compute_signals([best, copy], "", 0.65).values
    assert alone["cosine_ratio"] == alone["rrf_ratio"] == 10.0


# --- seed000 decisions -------------------------------------------------------------------------


def test_no_candidates_refuses_no_hits() -> None:
    d = decide([], CONFIG)
    assert (d.outcome, d.reason, d.tier) == (REFUSE, "no_hits", NO_MATCH)
    assert d.evidence == ()
    assert d.confidence == 0.0
    assert d.display_confidence == 5
    assert d.policy_version == "test-1"
    assert d.policy_name == "seed000"


def test_no_candidates_clarifies_when_configured() -> None:
    d = decide([], dataclasses.replace(CONFIG, clarify_on_no_hits=True))
    assert (d.outcome, d.reason, d.tier) == (CLARIFY, "no_hits", NO_MATCH)
    assert d.evidence == ()


def test_all_below_floor_refuses() -> None:
    # cosine 0.5 -> distance 0.5 -> 23.1 < floor 25
    d = decide([cand(1, 0.5), cand(2, 0.45), cand(3, None)], CONFIG)
    assert (d.outcome, d.reason, d.tier) == (REFUSE, "below_floor", NO_MATCH)
    assert d.confidence == pytest.approx(1 - 0.5 / 0.65)
    assert d.evidence == ()
    assert d.signals["admitted_chunks"] == 0.0
    assert d.thresholds == {
        "chunk_floor": 25.0,
        "answer_gate": 40.0,
        "max_distance": 0.65,
        "confident": 0.75,  # the bound that tiers a pass
    }


def test_admitted_but_average_below_gate_refuses_low_confidence() -> None:
    # 0.55 -> 30.77, 0.6 -> 38.46: both admitted, average 34.6 < 40
    d = decide([cand(1, 0.6), cand(2, 0.55)], CONFIG)
    assert (d.outcome, d.reason, d.tier) == (REFUSE, "low_confidence", NO_MATCH)
    expected_avg = (100 * (1 - 0.4 / 0.65) + 100 * (1 - 0.45 / 0.65)) / 2
    assert d.signals["average_admitted_confidence"] == pytest.approx(expected_avg)
    assert d.signals["admitted_chunks"] == 2.0
    assert d.confidence == pytest.approx(expected_avg / 100)
    assert d.evidence == ()
    assert 5 <= d.display_confidence <= 10


def test_clear_pass_is_confident() -> None:
    # 0.95 -> 92.31, 0.9 -> 84.62: average 88.46 -> 0.8846 >= 0.75
    d = decide([cand(1, 0.95), cand(2, 0.9)], CONFIG)
    assert (d.outcome, d.reason, d.tier) == (PASS, "passed", CONFIDENT)
    assert d.confidence == pytest.approx(1 - 0.075 / 0.65)
    # 70 + (0.8846 - 0.75) / 0.25 * 30 = 86.15
    assert d.display_confidence == 86
    assert ids(d) == ["d1#p0c0", "d2#p0c0"]


def test_moderate_pass_is_uncertain() -> None:
    # 0.75 -> 61.54, 0.7 -> 53.85: average 57.69 -> 0.5769 < 0.75
    d = decide([cand(1, 0.75), cand(2, 0.7)], CONFIG)
    assert (d.outcome, d.tier) == (PASS, UNCERTAIN)
    assert d.confidence == pytest.approx(1 - 0.275 / 0.65)
    # 20 + 0.5769 / 0.75 * 30 = 43.08
    assert d.display_confidence == 43


def test_tier_follows_configured_bounds() -> None:
    strict = dataclasses.replace(CONFIG, tiers=TierBounds(confident=0.95, uncertain=0.5))
    d = decide([cand(1, 0.95), cand(2, 0.9)], strict)
    assert (d.outcome, d.tier) == (PASS, UNCERTAIN)


def test_evidence_is_only_admitted_chunks_in_rank_order() -> None:
    d = decide([cand(1, 0.95), cand(2, 0.4), cand(3, 0.9), cand(4, None)], CONFIG)
    assert d.outcome == PASS
    assert ids(d) == ["d1#p0c0", "d3#p0c0"]
    assert d.signals["admitted_chunks"] == 2.0


def test_evidence_is_capped_at_max_evidence() -> None:
    config = dataclasses.replace(CONFIG, max_evidence=3)
    d = decide([cand(i, 0.95) for i in range(1, 8)], config)
    assert ids(d) == ["d1#p0c0", "d2#p0c0", "d3#p0c0"]
    assert d.signals["admitted_chunks"] == 7.0


def faq(n: int, cosine: float | None, question: str, answer: str = "The answer.") -> CandidateView:
    """A curated answer as ingest stores it: its question on the first line."""
    return dataclasses.replace(cand(n, cosine, kind=CURATED), text=f"{question}\n{answer}")


PASSWORD_FAQ = "How do I reset my password?"


def test_a_curated_answer_to_the_question_passes_and_ranks_first_whatever_else_scores() -> None:
    cands = [cand(1, 0.3), cand(2, 0.2), faq(3, 0.65, PASSWORD_FAQ), cand(4, 0.25)]
    d = decide(cands, CONFIG, "How can I reset my password")
    assert (d.outcome, d.reason, d.tier) == (PASS, "curated_answer", CONFIDENT)
    assert d.display_confidence == 100
    assert ids(d)[0] == "d3#p0c0"
    assert "cosine 0.650 >= 0.6" in d.detail
    assert d.signals["curated_hits"] == 1.0


@pytest.mark.parametrize("cosine", [0.3, None], ids=["another question", "keywords alone"])
def test_a_curated_answer_to_another_question_is_ordinary_evidence(cosine: float | None) -> None:
    # "How do I bake bread?" found "How do I reset my password?" by its shared "How do I" and
    # was answered from it at confidence 1.0.
    curated = dataclasses.replace(faq(3, cosine, PASSWORD_FAQ), bm25=12.4)
    d = decide([cand(1, 0.2), cand(2, 0.15), curated], CONFIG, "How do I bake bread?")
    assert d.reason != "curated_answer"
    assert d.outcome == REFUSE
    calibrated = load_policy(DEFAULT_POLICY_PATH)
    assert decide([cand(1, 0.2), curated], calibrated, "How do I bake bread?").reason != (
        "curated_answer"
    )


@pytest.mark.parametrize(
    ("curated_question", "query"),
    [
        (PASSWORD_FAQ, "How do I reset my PIN?"),
        (PASSWORD_FAQ, "How do I reset my email address?"),
        (PASSWORD_FAQ, "How do I reset someone else's password?"),
        (PASSWORD_FAQ, "Why do I reset my password?"),
        (PASSWORD_FAQ, "I forgot my password, how can I reset it?"),
        (
            "How do I enable two-factor authentication?",
            "How do I turn off two-factor authentication?",
        ),
        (
            "How do I turn on two-factor authentication?",
            "How do I turn off two-factor authentication?",
        ),
        ("How do I cancel my subscription?", "How do I cancel my order?"),
        ("How do I cancel my subscription?", "How do I pause my subscription?"),
        ("How do you pay me?", "How do I pay you?"),
        ("Can I refund you?", "Can you refund me?"),
        ("Can I return a gift card?", "Can't I return a gift card?"),
        (
            "How do I move money from savings to checking?",
            "How do I move money from checking to savings?",
        ),
    ],
)
def test_a_curated_answer_close_in_cosine_to_another_question_does_not_bypass_the_gate(
    curated_question: str, query: str
) -> None:
    # Cosine 0.6-0.73 and every rare word named (an outside probe): each was answered from the
    # other question's curated answer at confidence 1.0.
    d = decide([cand(1, 0.2), faq(3, 0.72, curated_question)], CONFIG, query)
    assert d.reason != "curated_answer"


@pytest.mark.parametrize(
    "query",
    [
        "How do I reset my password?",
        "how can i reset my password",
        "How to reset my password?",
        "Please, how could I reset my passwords?",
        "Hi, how do I reset my password? Thanks!",
    ],
)
def test_the_same_question_worded_with_other_scaffolding_takes_the_curated_answer(
    query: str,
) -> None:
    d = decide([cand(1, 0.2), faq(3, 0.9, PASSWORD_FAQ)], CONFIG, query)
    assert d.reason == "curated_answer"


def test_the_curated_bound_is_configurable_and_checked() -> None:
    strict = parse_policy('version: "v"\ncurated_min_cosine: 0.9\n')
    assert decide([faq(1, 0.85, PASSWORD_FAQ)], strict, PASSWORD_FAQ).reason != "curated_answer"
    assert decide([faq(1, 0.95, PASSWORD_FAQ)], strict, PASSWORD_FAQ).reason == "curated_answer"
    assert policy_thresholds(strict)["curated_min_cosine"] == 0.9
    with pytest.raises(PolicyError, match="curated_min_cosine must be in"):
        parse_policy('version: "v"\ncurated_min_cosine: 1.5\n')


def test_custom_floor_and_gate_change_the_decision() -> None:
    lenient = dataclasses.replace(
        CONFIG, seed000=Seed000Config(max_distance=0.65, chunk_floor=10, answer_gate=20)
    )
    cands = [cand(1, 0.5)]  # 23.1: below the default floor, above the lenient one
    assert decide(cands, CONFIG).reason == "below_floor"
    assert decide(cands, lenient).outcome == PASS


def test_floor_and_gate_are_inclusive() -> None:
    # max_distance 0.5, cosine 0.625: distance 0.375 -> exactly 25.0 (binary-exact values)
    exact = dataclasses.replace(
        CONFIG, seed000=Seed000Config(max_distance=0.5, chunk_floor=25, answer_gate=25)
    )
    d = decide([cand(1, 0.625)], exact)
    assert d.signals["average_admitted_confidence"] == 25.0
    assert (d.outcome, d.reason) == (PASS, "passed")
    assert decide([cand(1, 0.62)], exact).reason == "below_floor"


# --- display bands -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("confidence", "tier", "shown"),
    [
        (0.75, CONFIDENT, 70),
        (0.875, CONFIDENT, 85),
        (1.0, CONFIDENT, 100),
        (0.0, UNCERTAIN, 20),
        (0.375, UNCERTAIN, 35),
        (0.75, UNCERTAIN, 50),
        (0.0, NO_MATCH, 5),
        (0.45, NO_MATCH, 10),
        (0.9, NO_MATCH, 10),
        (-0.3, NO_MATCH, 5),
    ],
)
def test_display_confidence_bands(confidence: float, tier: str, shown: int) -> None:
    assert display_confidence(confidence, tier, TierBounds()) == shown


# --- parse_policy / load_policy ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("policy: seed000\n", "version is required"),
        ("version: ''\n", "version is required"),
        ("version: v1\npolicy: seed999\n", "seed999"),
        ("version: v1\nthresholds: {a: 1}\n", "unknown keys"),
        ("version: v1\nseed000: {floor: 3}\n", "unknown keys"),
        ("version: v1\ntiers: {confident: 0.4, uncertain: 0.6}\n", "tiers must satisfy"),
        ("version: v1\ntiers: {confident: 1.5}\n", "tiers must satisfy"),
        ("version: v1\nseed000: {chunk_floor: 120}\n", "chunk_floor"),
        ("version: v1\nseed000: {max_distance: 0}\n", "max_distance"),
        ("version: v1\nseed000: {answer_gate: high}\n", "seed000"),
        ("version: v1\nseed000: [1, 2]\n", "must be a mapping"),
        ("version: v1\nmax_evidence: 0\n", "max_evidence"),
        ("version: v1\nrefusal_messages: {en: ''}\n", "refusal_messages"),
        ("version: v1\nrefusal_messages: [hello]\n", "refusal_messages"),
        ("version: [v1\n", "not valid YAML"),
        ("- version\n- v1\n", "top level must be a mapping"),
        ("just a string\n", "top level must be a mapping"),
        ("", "top level must be a mapping"),
    ],
)
def test_parse_policy_rejects(text: str, match: str) -> None:
    with pytest.raises(PolicyError, match=match):
        parse_policy(text)


def test_parse_policy_reads_every_field_and_records_sha256() -> None:
    text = (
        "version: '2026-12-01.test'\n"
        "seed000: {max_distance: 0.5, chunk_floor: 30, answer_gate: 50}\n"
        "tiers: {confident: 0.8, uncertain: 0.5}\n"
        "max_evidence: 3\n"
        "clarify_on_no_hits: true\n"
        "default_language: de\n"
        "refusal_messages: {de: 'Keine Infos.'}\n"
    )
    p = parse_policy(text)
    assert p.version == "2026-12-01.test"
    assert p.policy == "seed000"
    assert p.seed000 == Seed000Config(max_distance=0.5, chunk_floor=30.0, answer_gate=50.0)
    assert p.tiers == TierBounds(confident=0.8, uncertain=0.5)
    assert p.max_evidence == 3
    assert p.clarify_on_no_hits is True
    assert p.default_language == "de"
    assert dict(p.refusal_messages) == {"de": "Keine Infos."}
    assert p.sha256 == hashlib.sha256(text.encode()).hexdigest()


def test_parse_policy_minimal_uses_defaults() -> None:
    p = parse_policy("version: v1\n")
    assert p.seed000 == Seed000Config()
    assert p.tiers == TierBounds()
    assert p.max_evidence == 5
    assert p.clarify_on_no_hits is False


def test_packaged_default_policy_loads() -> None:
    text = DEFAULT_POLICY_PATH.read_text()
    raw = yaml.safe_load(text)
    p = load_policy(None)
    assert p.version == raw["version"] and p.version
    # The shipped default is written by `candor calibrate` (docs/evaluation.md).
    assert p.policy == "calibrated"
    assert "split=train" in raw["calibrated"]["fitted_on"]
    assert set(raw["calibrated"]["coefficients"]) <= SIGNAL_NAMES
    assert 0.0 < p.tiers.uncertain <= p.tiers.confident < 1.0
    # Its read floor was fitted by `calibrate --read-floor-cost`, which records the cost.
    assert p.tiers.uncertain < p.calibrated.read_floor < 1.0
    assert "read_floor_cost=" in p.calibrated.fitted_on
    assert p.seed000 == Seed000Config(0.65, 25.0, 40.0)  # the seed rules keep their defaults
    assert p.sha256 == hashlib.sha256(text.encode()).hexdigest()
    assert p.refusal_messages["en"]


def test_load_policy_from_file_and_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text("version: from-file\n")
    assert load_policy(path).version == "from-file"
    with pytest.raises(PolicyError, match="cannot read"):
        load_policy(tmp_path / "absent.yaml")


@pytest.mark.parametrize("value", ["lots", "null"])
def test_parse_policy_rejects_non_numeric_max_evidence_with_policy_error(value: str) -> None:
    try:
        parse_policy(f"version: v1\nmax_evidence: {value}\n")
    except PolicyError:
        return
    pytest.fail("accepted a non-numeric max_evidence")


def test_parse_policy_does_not_mangle_a_numeric_version() -> None:
    try:
        version = parse_policy("version: 1.10\n").version
    except PolicyError:
        return  # rejecting a non-string version is also fine
    assert version == "1.10"


PACKAGED = [DEFAULT_POLICY_PATH, *sorted((DEFAULT_POLICY_PATH.parent / "policies").glob("*.yaml"))]


@pytest.mark.parametrize("path", PACKAGED, ids=lambda p: p.name)
def test_a_signal_no_arm_observed_counts_against_passing_in_every_packaged_config(
    path: Path,
) -> None:
    c = load_policy(path).calibrated
    for arm, names in ARM_SIGNALS.items():
        for name in sorted(names & set(c.coefficients)):
            x = least_favourable(c, name)
            t = math.log1p(x) if name in c.log_features else x
            contribution = c.coefficients[name] * (t - c.means[name]) / c.scales[name]
            assert contribution <= 1e-12, (arm, name, x, contribution)
            lo, hi = SIGNAL_DOMAINS[name]
            assert x >= lo and (hi is None or x <= hi), (name, x)


# The configs fitted on today's features; the older fits also weigh ratios to the runner-up,
# which five copies of one text (no rivals) set to their extremes.
@pytest.mark.parametrize(
    "path",
    [DEFAULT_POLICY_PATH, DEFAULT_POLICY_PATH.parent / "policies" / "halueval-calibrated.yaml"],
    ids=lambda p: p.name,
)
def test_keyword_only_evidence_is_judged_with_the_dense_signals_against_it(path: Path) -> None:
    config = load_policy(path)
    c = config.calibrated
    query = "How much does a Growth plan cost per month?"
    text = "The Growth plan costs $49 per month with 2,000 labels included."
    views = [
        dataclasses.replace(cand(i, None, bm25=30.0 - i, fused=1 / (61 + i)), text=text)
        for i in range(1, 6)
    ]
    # The same evidence had the dense arm answered as it usually does: its fitted mean cosine,
    # and the two arms agreeing on the top candidate.
    typical = [dataclasses.replace(v, cosine=c.means["top_cosine"], in_both=True) for v in views]
    # Both read alike, so that only the dense arm's signals differ.
    read = ReaderView((0.9,))
    observed = decide(typical, config, query, reader=read)
    degraded = decide(views, config, query, missing_arms=("dense",), reader=read)
    # Read as 0, "neither arm agreed" was weighed for passing, and the degraded search looked
    # better than a full one: a missing arm must never read better than a typical answer.
    assert degraded.confidence < observed.confidence
    assert degraded.signals["top_in_both"] == 1.0  # the least favourable: agreement weighs against
    assert degraded.signals["top_cosine"] < c.means["top_cosine"]
    assert degraded.signals["unobserved_arms"] == 1.0
    assert "without dense results" in degraded.detail
    assert "top_in_both" in degraded.detail
    # Nothing changes for a full search, or for a policy that is not the calibrated model.
    as_given = decide(views, config, query)
    assert decide(views, config, query, missing_arms=()).confidence == as_given.confidence
    seed = dataclasses.replace(config, policy="seed000")
    assert (
        decide(views, seed, query, missing_arms=("dense",)).detail
        == decide(views, seed, query).detail
    )


@pytest.mark.parametrize("policy", ["calibrated", "seed000", "seed001", "seed003", "seed004"])
def test_a_score_that_is_not_a_number_never_passes(policy: str) -> None:
    # Every bound is a `<` test, which NaN fails: a NaN cosine passed the calibrated gate.
    config = load_policy(DEFAULT_POLICY_PATH)
    if policy != "calibrated":
        config = parse_policy(f'version: "v"\npolicy: {policy}\n')
    good = [cand(1, 0.9, bm25=20.0, fused=0.03, in_both=True), cand(2, 0.7, fused=0.01)]
    nan = [dataclasses.replace(good[0], cosine=math.nan), good[1]]
    question = "What is the capital of France?"
    assert decide(good, config, question, reader=ReaderView((0.9,))).outcome == PASS
    d = decide(nan, config, question, reader=ReaderView((0.9,)))
    assert (d.outcome, d.confidence) == (REFUSE, 0.0)
    assert "not finite" in d.detail


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("policy: seed003\nseed003: {w_top: .nan}", "seed003.w_top must be a finite number"),
        ("policy: seed004\nseed004: {ratio_min: .nan}", "seed004.ratio_min must be a finite"),
        ("calibrated: {bias: .inf}", "calibrated.bias must be a finite number"),
        ("calibrated: {coefficients: {top_cosine: -.inf}}", "must be a finite number"),
        ("max_evidence: " + "9" * 400, "max_evidence is too large"),
        ("version: v2", "'version' is given twice"),
        (
            "x0: &a [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]\n"
            + "".join(
                f"x{i}: &a{i} [{', '.join(['*a' if i == 1 else f'*a{i - 1}'] * 10)}]\n"
                for i in range(1, 7)
            ),
            "unknown keys",
        ),
        ("calibrated: {log_features: [[top_bm25]]}", "log_features must list signal names"),
        (
            "calibrated: {means: {top_bm25: 800}, log_features: [top_bm25]}",
            "calibrated.means.top_bm25 is a log1p-scale value",
        ),
        # Quoted, "false" was a non-empty string, so bool() turned CLARIFY on.
        ('clarify_on_no_hits: "false"', "clarify_on_no_hits must be true or false (unquoted)"),
        (
            "calibrated: {refuse_on_missing_facets: 'no'}",
            "calibrated.refuse_on_missing_facets must be true or false",
        ),
        # A negative scale turned the reader around: a certain reading refused, none passed.
        ("calibrated: {scales: {reader: -0.41}}", "calibrated.scales must be > 0"),
        # Zero chunks judged relevant "passed", then max() of none crashed every decision.
        ("policy: seed004\nseed004: {rerank_min_chunks: 0}", "rerank_min_chunks must be >= 1"),
        ("policy: seed004\nseed004: {ratio_min: -1}", "seed004.ratio_min must be >= 1"),
        ("policy: seed004\nseed004: {rrf_floor: -0.5}", "seed004.rrf_floor must be >= 0, or -1"),
    ],
)
def test_values_no_gate_can_use_are_rejected_naming_them(text: str, why: str) -> None:
    # A NaN seed003 weight passed "What is the capital of Mongolia?" at confidence 1.0
    # (min(1, nan) is 1); YAML 1.1 reads a tenant named yes as True, whose override never
    # applied; a log mean of 800 overflowed expm1 on every one-arm decision.
    with pytest.raises(PolicyError, match=re.escape(why)):
        parse_policy(f'version: "v"\n{text}\n')


def test_a_tenants_calibrated_model_replaces_the_files_whole() -> None:
    # Merged key by key, the tenant's own fit kept the file's weight for top_bm25.
    cfg = parse_policy(
        'version: "v"\npolicy: calibrated\n'
        "calibrated: {bias: 1, coefficients: {top_cosine: 1, top_bm25: 2}}\n"
        "tenants: {acme: {calibrated: {bias: -1, coefficients: {top_rrf: 3}}}, "
        "beta: {tiers: {uncertain: 0.5}}}\n"
    )
    acme = cfg.for_tenant("acme").calibrated
    assert (acme.bias, acme.coefficients) == (-1.0, {"top_rrf": 3.0})
    beta = cfg.for_tenant("beta")
    assert beta.calibrated.coefficients == {"top_cosine": 1.0, "top_bm25": 2.0}
    assert beta.tiers.uncertain == 0.5


def test_tenant_names_keep_the_text_they_are_written_with() -> None:
    # YAML 1.1 read yes, null and 0123 as True, None and 83: those overrides never applied.
    cfg = parse_policy(
        'version: "v"\ntenants: {yes: {max_evidence: 1}, null: {max_evidence: 2}, '
        "0123: {max_evidence: 3}, 123: {max_evidence: 4}}\n"
    )
    assert {t: cfg.for_tenant(t).max_evidence for t in ("yes", "null", "0123", "123")} == {
        "yes": 1,
        "null": 2,
        "0123": 3,
        "123": 4,
    }


def test_yaml_merge_keys_may_be_overridden_and_only_plain_keys_are_taken() -> None:
    cfg = parse_policy(
        'version: "v"\nseed000: &s {max_distance: 1.0, chunk_floor: 10}\n'
        "tenants: {t1: {seed000: {<<: *s, chunk_floor: 20}}}\n"
    )
    assert (cfg.seed000.chunk_floor, cfg.for_tenant("t1").seed000.chunk_floor) == (10, 20)
    assert cfg.for_tenant("t1").seed000.max_distance == 1.0
    with pytest.raises(PolicyError, match="keys must be plain names"):
        parse_policy('version: "v"\n? [a, b]\n: 1\n')
