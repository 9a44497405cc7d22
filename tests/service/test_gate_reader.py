"""The evidence reader through the real stack: read when a policy weighs it, refuse without it."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest

from candor.cli.stack import start_stack
from candor.gate.v1 import gate_pb2, gate_pb2_grpc
from candor.retrieval.v1 import retrieval_pb2, retrieval_pb2_grpc
from candor.settings import SettingsError, load_settings
from gate_svc.reader import model_digest, reader_file
from tests.helpers import Stack, metric_value, scrape, stack_env

#: A calibrated policy that weighs only the reader: pass when it is sure the evidence answers.
READER_POLICY = """\
version: reader-only-1
policy: calibrated
calibrated:
  bias: 0.0
  coefficients: {reader: 12.0}
  means: {reader: 0.5}
  scales: {reader: 1.0}
tiers: {confident: 0.9, uncertain: 0.5}
"""

DOCS = [
    retrieval_pb2.Document(
        document_id="tides",
        title="Tides",
        text="The Moon's gravity pulls the oceans, which causes two high tides every day. "
        "Spring tides happen at new and full moon.",
    ),
    retrieval_pb2.Document(
        document_id="bread",
        title="Bread",
        text="Sourdough starter is a mix of flour and water kept alive with regular feeding.",
    ),
]


def _evaluate(stack: Stack, query: str) -> gate_pb2.Decision:
    with grpc.insecure_channel(stack.address("RetrievalService")) as ch:
        retrieval_pb2_grpc.RetrievalServiceStub(ch).UpsertDocuments(
            retrieval_pb2.UpsertDocumentsRequest(tenant="t", documents=DOCS)
        )
    with grpc.insecure_channel(stack.address("GateService")) as ch:
        reply = gate_pb2_grpc.GateServiceStub(ch).Evaluate(
            gate_pb2.EvaluateRequest(tenant="t", query=query), timeout=10
        )
    return reply.decision


def _stack(tmp_path: Path, policy: str, **env: str) -> Stack:
    path = tmp_path / "policy.yaml"
    path.write_text(policy)
    settings = load_settings(
        env=stack_env(str(tmp_path / "data"), CANDOR_GATE__POLICY_PATH=str(path), **env)
    )
    return Stack(lambda: start_stack(settings))


def _decide(
    tmp_path: Path, policy: str, *queries: str, **env: str
) -> tuple[list[gate_pb2.Decision], str]:
    """Each query's decision on a fresh stack, and the gate's metrics afterwards."""
    stack = _stack(tmp_path, policy, **env)
    try:
        decisions = [_evaluate(stack, q) for q in queries]
        return decisions, scrape(stack.metrics_port("GateService"))
    finally:
        stack.stop()


def test_a_policy_that_weighs_the_reader_gets_its_reading(tmp_path: Path) -> None:
    (answered, missing), text = _decide(
        tmp_path,
        READER_POLICY,
        "What causes two high tides every day?",
        "Who discovered that the Moon causes tides?",
    )
    a = {s.name: s.value for s in answered.signals}
    m = {s.name: s.value for s in missing.signals}
    assert a["reader_fallback"] == 0.0
    assert not answered.degraded and not missing.degraded
    assert 0.0 <= m["reader"] < a["reader"] <= 1.0
    assert answered.outcome == gate_pb2.OUTCOME_PASS
    assert missing.outcome == gate_pb2.OUTCOME_REFUSE
    assert metric_value(text, "candor_gate_reader_seconds_count", {}) == 2
    assert metric_value(text, "candor_gate_reader_waiting", {}) == 0  # back down after each
    info = {"model": "v4", "digest": model_digest()}
    assert metric_value(text, "candor_gate_evidence_reader_info", info) == 1


@pytest.mark.parametrize(
    ("setting", "reason"),
    [
        ({"CANDOR_GATE__READER__ENABLED": "false"}, "DISABLED"),
        ({"CANDOR_GATE__READER__TIMEOUT_SECONDS": "0.000001"}, "TIMEOUT"),
    ],
)
def test_without_a_reading_a_policy_that_weighs_it_refuses_and_says_so(
    tmp_path: Path, setting: dict[str, str], reason: str
) -> None:
    (d,), text = _decide(
        tmp_path, READER_POLICY, "What causes two high tides every day?", **setting
    )
    signals = {s.name: s.value for s in d.signals}
    assert signals["reader_fallback"] == 1.0
    assert "reader" not in signals
    assert d.outcome == gate_pb2.OUTCOME_REFUSE
    assert metric_value(text, "candor_gate_reader_fallbacks_total", {"reason": reason}) == 1
    assert ("candor_gate_evidence_reader_info{" in text) is (reason != "DISABLED")
    assert d.degraded  # a refusal for want of a reading is not the knowledge base's gap


def test_a_policy_that_ignores_the_reader_never_runs_it(tmp_path: Path) -> None:
    (d,), text = _decide(
        tmp_path, 'version: "s0"\npolicy: seed000\n', "What causes two high tides every day?"
    )
    assert not {s.name for s in d.signals} & {"reader", "reader_top1", "reader_fallback"}
    assert (metric_value(text, "candor_gate_reader_seconds_count", {}) or 0) == 0
    assert not d.degraded


def test_a_shadow_that_reads_leaves_its_reading_out_of_the_active_decision(
    tmp_path: Path,
) -> None:
    # The shadow's reader signals showed in the signals of an active seed000 decision, which
    # never weighs them: its explanation named numbers that did not decide it.
    shadow = tmp_path / "shadow.yaml"
    shadow.write_text(READER_POLICY.replace("reader-only-1", "reader-shadow-1"))
    (d,), text = _decide(
        tmp_path,
        'version: "s0"\npolicy: seed000\n',
        "What causes two high tides every day?",
        CANDOR_GATE__SHADOW_POLICY_PATH=str(shadow),
    )
    assert not {s.name for s in d.signals} & {"reader", "reader_top1", "reader_fallback"}
    assert metric_value(text, "candor_gate_reader_seconds_count", {}) == 1  # the shadow read
    assert d.shadow.policy_version == "reader-shadow-1"


def test_an_unreadable_reader_file_stops_start_up(tmp_path: Path) -> None:
    bad = tmp_path / "reader.onnx"
    bad.write_bytes(b"not an onnx graph")
    with pytest.raises(SettingsError, match=r"gate\.reader"):
        _stack(tmp_path, READER_POLICY, CANDOR_GATE__READER__MODEL_PATH=str(bad))


def test_a_graph_that_is_not_a_reader_stops_start_up(tmp_path: Path) -> None:
    # It loads (it is a valid ONNX graph) but has no reader output: without the probe read every
    # decision would fall back and refuse, with only a metric to say why.
    from retrieval_svc.embed.minilm_model import source_model

    with pytest.raises(SettingsError, match=r"gate\.reader.*is not an evidence reader"):
        _stack(tmp_path, READER_POLICY, CANDOR_GATE__READER__MODEL_PATH=str(source_model()))


def test_an_unknown_bundled_reader_stops_start_up(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match=r"gate\.reader.*bundled readers v4, v5, got 'v9'"):
        _stack(tmp_path, READER_POLICY, CANDOR_GATE__READER__MODEL="v9")


def test_the_shipped_default_does_not_run_beside_reader_v5(tmp_path: Path) -> None:
    from gate_svc.policy import DEFAULT_POLICY_PATH, PolicyError

    v4, v5 = model_digest(), model_digest(reader_file("v5"))
    with pytest.raises(
        PolicyError,
        match=rf"is {v4} \(bundled v4\) but this gate runs evidence reader {v5} \(bundled v5\)",
    ):
        _stack(tmp_path, DEFAULT_POLICY_PATH.read_text(), CANDOR_GATE__READER__MODEL="v5")


def test_reader_v5_runs_with_the_config_fitted_on_it(tmp_path: Path) -> None:
    digest = model_digest(reader_file("v5"))
    packaged = Path(__file__).parents[2] / "gate_svc" / "policies" / "reader-v5-pooled.yaml"
    (tmp_path / "packaged").mkdir()
    (tmp_path / "bound").mkdir()
    stack = _stack(tmp_path / "packaged", packaged.read_text(), CANDOR_GATE__READER__MODEL="v5")
    try:
        with grpc.insecure_channel(stack.address("GateService")) as ch:
            info = gate_pb2_grpc.GateServiceStub(ch).GetPolicy(gate_pb2.GetPolicyRequest())
    finally:
        stack.stop()
    assert info.evidence_reader == digest == info.active.reader_model
    # A config bound to v5 that weighs the reader alone: the decision is v5's reading.
    bound = READER_POLICY.replace("  bias: 0.0\n", f"  bias: 0.0\n  reader_model: {digest}\n")
    (answered, missing), text = _decide(
        tmp_path / "bound",
        bound,
        "What causes two high tides every day?",
        "Who discovered that the Moon causes tides?",
        CANDOR_GATE__READER__MODEL="v5",
    )
    a = {s.name: s.value for s in answered.signals}
    m = {s.name: s.value for s in missing.signals}
    assert m["reader"] < 0.5 < a["reader"]
    assert (answered.outcome, missing.outcome) == (gate_pb2.OUTCOME_PASS, gate_pb2.OUTCOME_REFUSE)
    info = {"model": "v5", "digest": digest}
    assert metric_value(text, "candor_gate_evidence_reader_info", info) == 1


def test_a_policy_fitted_on_another_reader_stops_start_up(tmp_path: Path) -> None:
    from gate_svc.policy import PolicyError

    bound = READER_POLICY.replace(
        "  bias: 0.0\n", "  bias: 0.0\n  reader_model: 0123456789abcdef\n"
    )
    with pytest.raises(PolicyError, match=f"runs evidence reader {model_digest()}"):
        _stack(tmp_path, bound)


#: Weighs the reader, but a low top cosine outweighs even a certain reading.
GATED_POLICY = """\
version: reader-gated-1
policy: calibrated
calibrated:
  bias: 0.0
  coefficients: {reader: 2.0, top_cosine: 40.0}
  means: {reader: 0.5, top_cosine: 0.6}
  scales: {reader: 1.0, top_cosine: 1.0}
tiers: {confident: 0.9, uncertain: 0.5}
"""


def test_the_read_is_skipped_when_even_a_certain_reading_would_refuse(tmp_path: Path) -> None:
    (off, on), text = _decide(
        tmp_path,
        GATED_POLICY,
        "Which striker scored the most goals in the 1994 World Cup?",
        "What causes two high tides every day?",
    )
    off_signals = {s.name: s.value for s in off.signals}
    on_signals = {s.name: s.value for s in on.signals}
    assert off.outcome == gate_pb2.OUTCOME_REFUSE
    assert off_signals["reader_skipped"] == 1.0 and "reader" not in off_signals
    assert "reader_skipped" not in on_signals and "reader" in on_signals
    assert metric_value(text, "candor_gate_reader_skips_total", {"bound": "pass_bound"}) == 1
    assert metric_value(text, "candor_gate_reader_skips_total", {"bound": "read_floor"}) == 0
    assert metric_value(text, "candor_gate_reader_seconds_count", {}) == 1


def test_below_the_read_floor_the_gate_refuses_without_reading(tmp_path: Path) -> None:
    # A floor only a near-perfect match clears: the tides question would pass on its reading
    # (the test above), but even a certain reading stays under 0.999999.
    floored = GATED_POLICY.replace("  bias: 0.0\n", "  bias: 0.0\n  read_floor: 0.999999\n")
    (d,), text = _decide(tmp_path, floored, "What causes two high tides every day?")
    signals = {s.name: s.value for s in d.signals}
    assert d.outcome == gate_pb2.OUTCOME_REFUSE
    assert d.reason == gate_pb2.REASON_LOW_CONFIDENCE
    assert "read floor" in d.reason_detail
    assert signals["reader_skipped"] == 1.0 and "reader" not in signals
    assert {t.name: t.value for t in d.thresholds}["read_floor"] == 0.999999
    assert metric_value(text, "candor_gate_reader_skips_total", {"bound": "read_floor"}) == 1
    assert (metric_value(text, "candor_gate_reader_seconds_count", {}) or 0) == 0
