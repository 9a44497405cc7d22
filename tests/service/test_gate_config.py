"""The gate over gRPC: hot-reloaded config versions, shadow counting, refusals by language."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from candor.cli.stack import start_stack
from candor.gate.v1 import gate_pb2, gate_pb2_grpc
from candor.settings import load_settings
from tests.helpers import Stack, evaluate, metric_value, scrape, seed_bikes, stack_env

ACTIVE_V1 = 'version: "cfg-1"\npolicy: seed000\n'
ACTIVE_V2 = 'version: "cfg-2"\npolicy: seed000\nseed000: {chunk_floor: 0, answer_gate: 0}\n'
SHADOW = 'version: "shadow-1"\npolicy: seed000\nseed000: {chunk_floor: 0, answer_gate: 0}\n'
QUESTION = "How many spare tyres does a unicycle carry?"


@pytest.fixture(scope="module")
def gate(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Stack, Path]]:
    tmp = tmp_path_factory.mktemp("gate")
    policy, shadow = tmp / "policy.yaml", tmp / "shadow.yaml"
    policy.write_text(ACTIVE_V1)
    shadow.write_text(SHADOW)
    env = stack_env(
        str(tmp / "data"),
        CANDOR_GATE__POLICY_PATH=str(policy),
        CANDOR_GATE__SHADOW_POLICY_PATH=str(shadow),
        CANDOR_GATE__POLICY_POLL_SECONDS="0.1",
    )
    stack = Stack(lambda: start_stack(load_settings(env=env)))
    seed_bikes(stack)
    yield stack, policy
    stack.stop()


def _evaluate(stack: Stack, query: str = QUESTION, language: str = "") -> gate_pb2.Decision:
    decision: gate_pb2.Decision = evaluate(stack, query, language)
    return decision


def test_shadow_is_evaluated_beside_the_active_version_and_counted(
    gate: tuple[Stack, Path],
) -> None:
    stack, _ = gate
    d = _evaluate(stack)
    assert d.policy_version == "cfg-1" and d.outcome == gate_pb2.OUTCOME_REFUSE
    assert d.shadow.policy_version == "shadow-1"
    assert d.shadow.outcome == gate_pb2.OUTCOME_PASS and not d.shadow.agrees
    text = scrape(stack.metrics_port("GateService"))
    assert (
        metric_value(
            text,
            "candor_gate_shadow_decisions_total",
            {"agreement": "disagree", "shadow_version": "shadow-1"},
        )
        >= 1
    )
    with grpc.insecure_channel(stack.address("GateService")) as ch:
        info = gate_pb2_grpc.GateServiceStub(ch).GetPolicy(gate_pb2.GetPolicyRequest())
    assert (info.active.version, info.shadow.version) == ("cfg-1", "shadow-1")
    assert {t.name for t in info.active.thresholds} >= {
        "seed000.chunk_floor",
        "seed000.answer_gate",
    }


def test_a_shadow_that_cannot_decide_is_counted_and_the_decision_stands(
    gate: tuple[Stack, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A shadow config whose model overflowed failed the whole Evaluate as UNKNOWN.
    from gate_svc import service

    real = service.decide

    def failing_shadow(candidates, config, *args):  # type: ignore[no-untyped-def]
        if config.version == "shadow-1":
            raise OverflowError("math range error")
        return real(candidates, config, *args)

    monkeypatch.setattr(service, "decide", failing_shadow)
    stack, _ = gate
    d = _evaluate(stack)
    assert d.outcome == gate_pb2.OUTCOME_REFUSE and not d.HasField("shadow")
    text = scrape(stack.metrics_port("GateService"))
    labels = {"agreement": "error", "shadow_version": "shadow-1"}
    assert metric_value(text, "candor_gate_shadow_decisions_total", labels) == 1


@pytest.mark.parametrize(
    ("query", "lang", "words"),
    [
        ("Who won the 1998 football World Cup?", "en", "information"),
        ("Wer hat die Fußball-Weltmeisterschaft 1998 gewonnen?", "de", "Informationen"),
        ("1998 Dünya Kupasını kim kazandı?", "tr", "bilgim yok"),
    ],
)
def test_refusals_come_in_the_language_of_the_question(
    gate: tuple[Stack, Path], query: str, lang: str, words: str
) -> None:
    d = _evaluate(gate[0], query)
    assert d.outcome == gate_pb2.OUTCOME_REFUSE
    assert d.refusal_language == lang and words in d.refusal_message


def test_a_new_version_takes_effect_without_restart_and_a_bad_one_is_rejected(
    gate: tuple[Stack, Path],
) -> None:
    stack, policy = gate
    policy.write_text("version: broken\npolicy: no-such-policy\n")
    time.sleep(0.5)
    assert _evaluate(stack).policy_version == "cfg-1"
    text = scrape(stack.metrics_port("GateService"))
    assert (
        metric_value(
            text, "candor_gate_config_reloads_total", {"role": "active", "result": "failure"}
        )
        >= 1
    )
    policy.write_text(ACTIVE_V2)
    deadline = time.monotonic() + 5
    while _evaluate(stack).policy_version != "cfg-2":
        assert time.monotonic() < deadline, "new version never took effect"
        time.sleep(0.1)
    d = _evaluate(stack)
    assert d.outcome == gate_pb2.OUTCOME_PASS and d.shadow.agrees
    text = scrape(stack.metrics_port("GateService"))
    assert (
        metric_value(text, "candor_gate_policy_info", {"role": "active", "policy_version": "cfg-2"})
        == 1
    )
    assert metric_value(text, "candor_gate_decisions_total", {"policy_version": "cfg-2"}) >= 1
