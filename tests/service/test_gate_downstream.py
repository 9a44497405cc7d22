"""The gate counts its own calls to retrieval and the generator by gRPC code: a retrieval the
gate cannot reach shows there, not only as refusals."""

from __future__ import annotations

from pathlib import Path

from candor.cli.stack import start_stack
from candor.gate.v1 import gate_pb2
from candor.settings import load_settings
from tests.helpers import Stack, evaluate, free_port, metric_value, scrape, stack_env


def test_an_unreachable_retrieval_is_counted_unavailable_by_the_gate(tmp_path: Path) -> None:
    env = stack_env(
        str(tmp_path / "data"), CANDOR_GATE__RETRIEVAL_TARGET=f"127.0.0.1:{free_port()}"
    )
    stack = Stack(lambda: start_stack(load_settings(env=env), "gate"))
    try:
        decision = evaluate(stack, "What pressure do road tyres run at?")
        text = scrape(stack.metrics_port("GateService"))
    finally:
        stack.stop()
    assert decision.reason == gate_pb2.REASON_ARMS_UNAVAILABLE
    calls = "candor_gate_downstream_calls_total"
    assert metric_value(text, calls, {"downstream": "retrieval", "grpc_code": "UNAVAILABLE"}) == 1
    assert metric_value(text, calls, {"downstream": "retrieval", "grpc_code": "OK"}) == 0
    # Zero from start-up, so the error ratio (whose rule reads a downstream with no error
    # series as 0) exists before the first call.
    assert f'{calls}{{downstream="generator",grpc_code="OK"}} 0.0' in text
