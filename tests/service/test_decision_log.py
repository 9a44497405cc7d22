"""The decision log line says whose question it was and whether a tenant override decided."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from candor.cli.stack import start_stack
from candor.settings import load_settings
from tests.helpers import Stack, ask, evaluate, seed_bikes, stack_env

POLICY = 'version: "cfg-1"\npolicy: seed000\ntenants:\n  acme: {policy: seed000}\n'


def test_decision_log_carries_the_tenant_and_the_override_that_applied(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY)
    env = stack_env(str(tmp_path / "data"), CANDOR_GATE__POLICY_PATH=str(policy))
    stack = Stack(lambda: start_stack(load_settings(env=env)))
    caplog.set_level(logging.INFO, logger="candor.gate")
    try:
        for tenant in ("t", "acme"):
            seed_bikes(stack, tenant)
            evaluate(stack, "What pressure do road tyres run at?", tenant=tenant)
    finally:
        stack.stop()
    logged = [
        (r.tenant, r.policy_tenant, r.policy_version)  # type: ignore[attr-defined]
        for r in caplog.records
        if r.getMessage() == "decision"
    ]
    assert logged == [("t", "", "cfg-1"), ("acme", "acme", "cfg-1")]


def test_the_generators_answer_log_names_the_config_that_let_it_through(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # The pass token carries the policy version; the generator never said it, so an answer
    # in its log could not be traced to the thresholds that admitted it.
    from candor.gate.v1 import gate_pb2

    policy = tmp_path / "policy.yaml"
    policy.write_text('version: "cfg-7"\npolicy: seed000\n')
    env = stack_env(str(tmp_path / "data"), CANDOR_GATE__POLICY_PATH=str(policy))
    stack = Stack(lambda: start_stack(load_settings(env=env)))
    caplog.set_level(logging.INFO, logger="candor.generator")
    try:
        seed_bikes(stack, "acme")
        replies = ask(stack, "What pressure do road tyres run at?", tenant="acme")
    finally:
        stack.stop()
    assert replies[0].decision.outcome == gate_pb2.OUTCOME_PASS
    [line] = [r for r in caplog.records if r.getMessage() == "answer generated"]
    assert (line.policy_version, line.tenant) == ("cfg-7", "acme")  # type: ignore[attr-defined]
