"""Each seed's gate as a selectable policy, the calibrated policy, overrides and validation."""

from __future__ import annotations

import math

import pytest

from gate_svc.policy import (
    CONFIDENT,
    PASS,
    REFUSE,
    UNCERTAIN,
    PolicyError,
    decide,
    parse_policy,
)
from gate_svc.rerank_view import RerankView
from gate_svc.signals import (
    CandidateView,
    best_sentence_alignment,
    compute_signals,
    facet_coverage,
    facets,
    pair_coverage,
)
from tests.helpers import outputs_under_hash_seeds


def cand(
    i: int, cos: float | None, fused: float, both: bool = False, doc: str = "", text: str = ""
) -> CandidateView:
    return CandidateView(
        f"c{i}",
        f"p{i}",
        doc or f"d{i}",
        "",
        text or f"text {i}",
        1,
        cos,
        5.0 if both else None,
        fused,
        i,
        both,
    )


def policy(name: str, extra: str = "") -> object:
    return parse_policy(f'version: "v-{name}"\npolicy: {name}\n{extra}')


def test_seed001_logistic_on_top_rrf_and_consensus_with_tiers() -> None:
    cfg = parse_policy('version: "v"\npolicy: seed001\nseed001: {a: 100, b: 2, c: -3}\n')
    top_both = [cand(1, 0.5, 2 / 61, both=True), cand(2, 0.4, 1 / 62)]
    d = decide(top_both, cfg)
    expected = 1 / (1 + math.exp(-(100 * 2 / 61 + 2 - 3)))
    assert d.confidence == pytest.approx(expected)  # 0.908
    assert (d.outcome, d.tier) == (PASS, CONFIDENT)
    one_arm = [cand(1, 0.5, 1 / 61), cand(2, 0.4, 1 / 62)]
    d2 = decide(one_arm, cfg)
    assert d2.confidence == pytest.approx(1 / (1 + math.exp(-(100 / 61 - 3))))  # 0.204
    assert (d2.outcome, d2.reason) == (REFUSE, "low_confidence")


def test_seed001_tier_boundaries_are_inclusive() -> None:
    # c chosen so that confidence is exactly the bound: logit(0.75) and logit(0.45)
    for bound, tier in ((0.75, CONFIDENT), (0.45, UNCERTAIN)):
        c = math.log(bound / (1 - bound)) + 1e-9  # float round-trip of the bound
        cfg = parse_policy(f'version: "v"\npolicy: seed001\nseed001: {{a: 0, b: 0, c: {c}}}\n')
        d = decide([cand(1, 0.5, 0.02)], cfg)
        assert d.outcome == PASS and d.tier == tier, bound


def test_seed003_composite_declines_early_and_uses_its_own_tiers() -> None:
    cfg = parse_policy('version: "v"\npolicy: seed003\n')
    strong = [cand(1, 0.95, 0.03, doc="a"), *[cand(i, 0.3, 0.01, doc="a") for i in range(2, 6)]]
    d = decide(strong, cfg)
    # 0.6*0.95 + 0.2*min(1, 0.65/0.3) + 0.2*1.0 = 0.97
    assert d.signals["quality_composite"] == pytest.approx(0.97)
    assert (d.outcome, d.tier) == (PASS, CONFIDENT)
    weak = [cand(i, 0.2, 0.01) for i in range(1, 6)]
    d2 = decide(weak, cfg)
    assert d2.outcome == REFUSE and "declined early" in d2.detail


def test_seed004_without_reranker_uses_rescaled_floor_and_ratio() -> None:
    cfg = parse_policy('version: "v"\npolicy: seed004\n')
    assert dict(decide([cand(1, 0.5, 0.03)], cfg).thresholds)["rrf_floor"] == pytest.approx(
        0.05 * 2 / 61
    )
    clear = [cand(1, 0.5, 2 / 61, both=True), cand(2, 0.4, 1 / 62)]
    d = decide(clear, cfg)
    assert (d.outcome, d.tier) == (PASS, UNCERTAIN)
    tied = [cand(1, 0.5, 1 / 61), cand(2, 0.4, 1 / 61.5)]
    d2 = decide(tied, cfg)
    assert (d2.outcome, d2.reason) == (REFUSE, "no_clear_winner")


def test_seed004_with_reranker_and_its_fallback() -> None:
    cfg = parse_policy('version: "v"\npolicy: seed004\n')
    cands = [cand(1, 0.5, 0.03), cand(2, 0.4, 0.02)]
    d = decide(cands, cfg, rerank=RerankView({"c1": 1, "c2": 3}, backend="x"))
    assert d.outcome == PASS and [e.chunk_id for e in d.evidence] == ["c2"]
    d2 = decide(cands, cfg, rerank=RerankView({"c1": 1, "c2": 1}))
    assert (d2.outcome, d2.reason) == (REFUSE, "rerank_not_relevant")
    d3 = decide(cands, cfg, rerank=RerankView(fallback=True, error="timeout"))
    assert "reranker fell back: timeout" in d3.detail
    assert d3.signals["rerank_fallback"] == 1.0


def test_an_unreachable_rrf_floor_is_rejected_with_the_reason() -> None:
    with pytest.raises(PolicyError, match=r"can never be met.*2/61 = 0\.0328"):
        parse_policy('version: "v"\npolicy: seed004\nseed004: {rrf_floor: 0.05}\n')
    ok = parse_policy('version: "v"\npolicy: seed004\nseed004: {rrf_floor: 0.02}\n')
    assert ok.seed004.effective_floor == 0.02


def test_calibrated_policy_applies_its_coefficients() -> None:
    cfg = parse_policy(
        'version: "v"\npolicy: calibrated\ncalibrated:\n  bias: -1.0\n'
        "  coefficients: {top_cosine: 4.0, facet_coverage: 2.0}\n"
        "  means: {top_cosine: 0.5}\n  scales: {top_cosine: 0.1}\n"
    )
    d = decide([cand(1, 0.6, 0.03, text="Refunds take 30 days.")], cfg, "refund days")
    z = -1.0 + 4.0 * (0.6 - 0.5) / 0.1 + 2.0 * d.signals["facet_coverage"]
    assert d.confidence == pytest.approx(1 / (1 + math.exp(-z)))
    assert d.outcome == PASS
    with pytest.raises(PolicyError, match="unknown signals"):
        parse_policy('version: "v"\ncalibrated: {coefficients: {nonsense: 1}}\n')
    with pytest.raises(PolicyError, match=r"needs calibrated\.coefficients"):
        parse_policy('version: "v"\npolicy: calibrated\n')


def test_calibrated_can_refuse_on_missing_facets() -> None:
    cfg = parse_policy(
        'version: "v"\npolicy: calibrated\ncalibrated:\n  bias: 5\n'
        "  coefficients: {top_cosine: 1}\n  refuse_on_missing_facets: true\n"
    )
    d = decide(
        [cand(1, 0.9, 0.03, text="Kestrel Express ships parcels.")],
        cfg,
        "Does NorthLine Freight ship parcels?",
    )
    assert (d.outcome, d.reason) == (REFUSE, "missing_facets")
    assert set(d.missing_facets) == {"northline", "freight"}


def test_tenant_overrides_change_only_that_tenant() -> None:
    cfg = parse_policy(
        'version: "v7"\npolicy: seed000\ntenants:\n  acme: {policy: seed003, '
        "seed003: {uncertain: 0.7}}\n"
    )
    assert cfg.for_tenant("acme").policy == "seed003"
    assert cfg.for_tenant("acme").seed003.uncertain == 0.7
    assert cfg.for_tenant("acme").version == "v7"
    assert cfg.for_tenant("other").policy == "seed000"
    with pytest.raises(PolicyError, match=r"tenants\.bad"):
        parse_policy('version: "v"\ntenants:\n  bad: {policy: nope}\n')


def test_every_policy_handles_no_candidates_and_curated_answers() -> None:
    for name in ("seed000", "seed001", "seed003", "seed004"):
        cfg = parse_policy(f'version: "v"\npolicy: {name}\nclarify_on_no_hits: true\n')
        assert decide([], cfg).outcome == "clarify", name
        curated = CandidateView(
            "q1", "q1", "faq", "", "Can I ship batteries?\nNo.", 2, 0.8, None, 0.001, 2, False
        )
        d = decide([cand(1, 0.2, 0.01), curated], cfg, "Can I ship batteries?")
        assert (d.outcome, d.reason, d.evidence[0].chunk_id) == (PASS, "curated_answer", "q1")


def test_facets_and_coverage() -> None:
    assert facets("What does error PX-412 mean?") == ["px-412"]
    assert "northline" in facets("Can I ship batteries with NorthLine Freight?")
    cov, missing = facet_coverage(
        "Does NorthLine Freight take lithium batteries?", ["NorthLine Freight accepts pallets."]
    )
    assert missing == ["lithium"] and cov == pytest.approx(2 / 3)
    assert facet_coverage("how do I sign in", ["anything"]) == (1.0, [])


def test_best_sentence_alignment_prefers_one_answering_sentence() -> None:
    q = "How many days do I have to void a label?"
    answering = ["You can void a label within 30 days of buying it. Other text here."]
    scattered = ["Labels are printed. Days are long. You can void things."]
    a, sentence = best_sentence_alignment(q, answering)
    b, _ = best_sentence_alignment(q, scattered)
    assert a > b and "30 days" in sentence


def test_pair_coverage_needs_both_hops_of_a_two_hop_question() -> None:
    q = "Which river flows through the city where the painter Vermeer was born?"
    both_hops = [
        "Johannes Vermeer was a Dutch painter born in Delft in 1632.",
        "Delft lies on the Schie river, between Rotterdam and The Hague.",
        "Delft is known for its blue pottery and its river boats.",
    ]
    one_hop = [both_hops[0], "Vermeer painted Girl with a Pearl Earring around 1665."]
    full = pair_coverage(q, both_hops)
    partial = pair_coverage(q, one_hop)
    assert full > partial > 0.0
    # Two sentences cover more of the question than the best single one does.
    assert full > best_sentence_alignment(q, both_hops)[0]
    assert pair_coverage(q, []) == 0.0
    assert pair_coverage("the of and", both_hops) == 0.0
    signals = compute_signals([cand(1, 0.7, 0.03, text=" ".join(both_hops))], q).values
    assert signals["pair_coverage"] == pytest.approx(full)


def test_sentence_signals_do_not_depend_on_the_processs_hash_seed() -> None:
    # Set iteration order follows PYTHONHASHSEED; summing weights in it moved pair_coverage's
    # last bits between processes, so one question's signals differed run to run.
    code = (
        "from gate_svc.signals import pair_coverage, best_sentence_alignment\n"
        "q = 'American politician Joe Heck ran unsuccessfully against Democrat Catherine "
        "Cortez Masto, a woman who previously served as the 32nd Attorney General of where?'\n"
        "print(repr(pair_coverage(q, [q])), repr(best_sentence_alignment(q, [q])[0]))\n"
    )
    seen = outputs_under_hash_seeds(code, 12)
    assert len(seen) == 1, seen


def test_top_candidate_coverage_ignores_terms_lent_by_other_candidates() -> None:
    q = "Does NorthLine Freight take lithium batteries?"
    top = cand(1, 0.8, 0.03, text="NorthLine Freight accepts pallets up to 1,000 kg.")
    other = cand(2, 0.5, 0.02, text="Lithium batteries must be declared as dangerous goods.")
    v = compute_signals([top, other], q).values
    assert v["facet_coverage"] == pytest.approx(1.0)  # across the evidence: all there
    assert v["top_facet_coverage"] == pytest.approx(2 / 3)  # the top chunk lacks "lithium"
    assert v["top_pair_coverage"] < v["pair_coverage"]
    assert compute_signals([], q).values["top_facet_coverage"] == 0.0


def test_answer_type_signal() -> None:
    ev = [cand(1, 0.6, 0.03, text="Refunds are processed after the carrier confirms.")]
    v = compute_signals(ev, "How long do refunds take?").values
    assert v["answer_type_expected"] == 1.0 and v["answer_type_found"] == 0.0
    ev2 = [cand(1, 0.6, 0.03, text="Refunds take 5 business days.")]
    assert compute_signals(ev2, "How long do refunds take?").values["answer_type_found"] == 1.0


@pytest.mark.parametrize("name", ["halueval-calibrated.yaml", "halueval-full-calibrated.yaml"])
def test_the_shipped_halueval_calibrated_configs_load(name: str) -> None:
    from pathlib import Path

    import gate_svc

    path = Path(gate_svc.__file__).parent / "policies" / name
    cfg = parse_policy(path.read_text())
    assert cfg.policy == "calibrated" and "split=train" in cfg.calibrated.fitted_on
    # Logged features are features it weighs (older fits logged the engines' BM25 and ratios).
    assert set(cfg.calibrated.log_features) <= set(cfg.calibrated.coefficients)
    assert 0 < cfg.tiers.uncertain <= cfg.tiers.confident < 1


@pytest.mark.parametrize(
    "name",
    [
        "policy_default.yaml",
        "policies/halueval-calibrated.yaml",
        "policies/halueval-full-calibrated.yaml",
    ],
)
def test_shipped_configs_that_weigh_the_reader_are_bound_to_the_shipped_reader(name: str) -> None:
    from pathlib import Path

    import gate_svc
    from gate_svc.policy import reader_mismatch, uses_reader
    from gate_svc.reader import model_digest

    cfg = parse_policy((Path(gate_svc.__file__).parent / name).read_text())
    if uses_reader(cfg):
        assert cfg.calibrated.reader_model == model_digest()
    assert reader_mismatch(cfg, model_digest()) is None
