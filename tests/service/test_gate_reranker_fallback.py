"""A reranker that cannot be reached degrades the decision to seed 004's retrieval-score gate."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest

from candor.cli.stack import start_stack
from candor.gate.v1 import gate_pb2, gate_pb2_grpc
from candor.retrieval.v1 import retrieval_pb2, retrieval_pb2_grpc
from candor.settings import load_settings
from tests.helpers import Stack, free_port, metric_value, scrape, stack_env


def test_unreachable_reranker_falls_back_and_says_so(tmp_path: Path) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text('version: "rr-1"\npolicy: seed004\n')
    dead = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens here
    env = stack_env(
        str(tmp_path / "data"),
        CANDOR_GATE__POLICY_PATH=str(policy),
        CANDOR_GATE__RERANKER__BACKEND="llm",
        CANDOR_GATE__RERANKER__MODEL="judge",
        CANDOR_GATE__RERANKER__BASE_URL=dead,
        CANDOR_GATE__RERANKER__TIMEOUT_SECONDS="0.5",
    )
    stack = Stack(lambda: start_stack(load_settings(env=env)))
    try:
        with grpc.insecure_channel(stack.address("RetrievalService")) as ch:
            retrieval_pb2_grpc.RetrievalServiceStub(ch).UpsertDocuments(
                retrieval_pb2.UpsertDocumentsRequest(
                    tenant="t",
                    documents=[
                        retrieval_pb2.Document(
                            document_id="tides",
                            title="Tides",
                            text="The Moon's gravity causes two high tides a day.",
                        ),
                        retrieval_pb2.Document(
                            document_id="bread",
                            title="Bread",
                            text="Sourdough starter is flour and water.",
                        ),
                    ],
                )
            )
        with grpc.insecure_channel(stack.address("GateService")) as ch:
            d = (
                gate_pb2_grpc.GateServiceStub(ch)
                .Evaluate(
                    gate_pb2.EvaluateRequest(tenant="t", query="why are there two high tides"),
                    timeout=10,
                )
                .decision
            )
        assert "reranker fell back" in d.reason_detail
        assert {s.name: s.value for s in d.signals}["rerank_fallback"] == 1.0
        assert d.degraded
        assert d.outcome in (gate_pb2.OUTCOME_PASS, gate_pb2.OUTCOME_REFUSE)
        text = scrape(stack.metrics_port("GateService"))
        assert (
            metric_value(
                text,
                "candor_gate_rerank_fallbacks_total",
                {"backend": "llm_evidence", "reason": "UPSTREAM_UNAVAILABLE"},
            )
            == 1
        )
    finally:
        stack.stop()


def test_a_policy_that_does_not_read_the_reranker_never_calls_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from tests.llm.server import fake_llm

    with fake_llm(lambda body: 5.0) as llm:  # a judge that would stall every decision
        env = stack_env(
            str(tmp_path / "data"),
            CANDOR_GATE__RERANKER__BACKEND="llm",
            CANDOR_GATE__RERANKER__MODEL="judge",
            CANDOR_GATE__RERANKER__BASE_URL=llm.base_url,
        )
        stack = Stack(lambda: start_stack(load_settings(env=env)))  # the shipped default policy
        try:
            tides = retrieval_pb2.Document(
                document_id="tides", title="Tides", text="The Moon causes two high tides a day."
            )
            with grpc.insecure_channel(stack.address("RetrievalService")) as ch:
                retrieval_pb2_grpc.RetrievalServiceStub(ch).UpsertDocuments(
                    retrieval_pb2.UpsertDocumentsRequest(tenant="t", documents=[tides])
                )
            with grpc.insecure_channel(stack.address("GateService")) as ch:
                d = (
                    gate_pb2_grpc.GateServiceStub(ch)
                    .Evaluate(
                        gate_pb2.EvaluateRequest(tenant="t", query="why two high tides?"),
                        timeout=10,
                    )
                    .decision
                )
            assert "rerank_fallback" not in {s.name for s in d.signals}
            assert llm.bodies == []
            # Configured and never called: start-up says so.
            assert "gate.reranker is configured but no threshold config reads it" in caplog.text
        finally:
            stack.stop()


def test_a_policy_that_weighs_a_reranker_none_is_configured_for_is_degraded(
    tmp_path: Path,
) -> None:
    # As a disabled reader is: the decision lacks an input its policy weighs.
    from tests.service.test_gate_reader import _decide

    (d,), _ = _decide(tmp_path, 'version: "rr-2"\npolicy: seed004\n', "why two high tides?")
    assert d.degraded
    (tmp_path / "s0").mkdir()
    (d,), _ = _decide(tmp_path / "s0", 'version: "s0"\npolicy: seed000\n', "why two high tides?")
    assert not d.degraded
