"""A decision says what retrieval searched when the query rewrite was used."""

from __future__ import annotations

from pathlib import Path

import grpc

from candor.cli.stack import start_stack
from candor.gate.v1 import gate_pb2, gate_pb2_grpc
from candor.settings import load_settings
from tests.helpers import Stack, seed_bikes, stack_env
from tests.llm.server import fake_llm
from tests.rerank.fakes import oa_completion

REWRITE = "What pressure should road bicycle tyres run at?"


def _evaluate(stack: Stack, query: str) -> gate_pb2.Decision:
    with grpc.insecure_channel(stack.address("GateService")) as ch:
        return (
            gate_pb2_grpc.GateServiceStub(ch)
            .Evaluate(gate_pb2.EvaluateRequest(tenant="t", query=query), timeout=10)
            .decision
        )


def test_the_decision_names_the_rewrite_retrieval_searched(tmp_path: Path) -> None:
    with fake_llm(lambda body: oa_completion(REWRITE)) as llm:
        env = stack_env(
            str(tmp_path / "data"),
            CANDOR_RETRIEVAL__REWRITE__BACKEND="openai_compat",
            CANDOR_RETRIEVAL__REWRITE__BASE_URL=llm.base_url,
            CANDOR_RETRIEVAL__REWRITE__MODEL="small",
            CANDOR_RETRIEVAL__REWRITE__TIMEOUT_SECONDS="2",
        )
        stack = Stack(lambda: start_stack(load_settings(env=env)))
        try:
            seed_bikes(stack)
            assert _evaluate(stack, "road bike tyre psi?").rewritten_query == REWRITE
            # Unrelated to the question: not used, and the decision says nothing was rewritten.
            assert _evaluate(stack, "Who won the 1998 World Cup?").rewritten_query == ""
        finally:
            stack.stop()
