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


def test_retrieval_refusing_the_gates_own_call_is_internal_not_the_callers_fault(
    tmp_path: Path,
) -> None:
    # Retrieval with keys the gate's callers do not hold (keys that differ between services):
    # the caller passed the gate's own checks, so PERMISSION_DENIED or UNAUTHENTICATED from
    # retrieval ("fix your credentials, do not retry") blamed the caller for a deployment fault.
    import grpc
    import pytest

    from candor.gate.v1 import gate_pb2_grpc
    from candor.runtime.errors import error_info_of

    config = tmp_path / "retrieval.yaml"
    config.write_text(
        "auth:\n  enabled: true\n  keys:\n    - {name: k, sha256: '" + "0" * 64 + "', "
        "tenants: ['*']}\n"
    )
    retrieval = Stack(
        lambda: start_stack(
            load_settings(str(config), env=stack_env(str(tmp_path / "r"))), "retrieval"
        )
    )
    try:
        env = stack_env(
            str(tmp_path / "g"), CANDOR_GATE__RETRIEVAL_TARGET=retrieval.address("RetrievalService")
        )
        gate = Stack(lambda: start_stack(load_settings(env=env), "gate"))
        try:
            with (
                grpc.insecure_channel(gate.address("GateService")) as ch,
                pytest.raises(grpc.RpcError) as err,
            ):
                gate_pb2_grpc.GateServiceStub(ch).Evaluate(
                    gate_pb2.EvaluateRequest(tenant="t", query="tyre pressure?"), timeout=10
                )
        finally:
            gate.stop()
    finally:
        retrieval.stop()
    assert err.value.code() == grpc.StatusCode.INTERNAL
    info = error_info_of(err.value)
    assert info is not None and info.reason == "RETRIEVAL_UNAUTHENTICATED"


def test_a_hung_retrieval_cut_off_by_short_caller_deadlines_is_counted_apart(
    tmp_path: Path,
) -> None:
    # A downstream that accepts connections and never answers (a stopped process): calls cut
    # off by a caller deadline under half the gate's own timeout were counted nowhere, so no
    # alert could say the service hung (an outside probe, with a stopped generator).
    import socket

    import grpc
    import pytest

    from candor.gate.v1 import gate_pb2_grpc

    hung = socket.socket()
    hung.bind(("127.0.0.1", 0))
    hung.listen(16)  # never accepted: the handshake completes, nothing is ever read
    env = stack_env(
        str(tmp_path / "data"),
        CANDOR_GATE__RETRIEVAL_TARGET=f"127.0.0.1:{hung.getsockname()[1]}",
        CANDOR_GATE__RETRIEVAL_TIMEOUT_SECONDS="10",
    )
    stack = Stack(lambda: start_stack(load_settings(env=env), "gate"))
    try:
        with grpc.insecure_channel(stack.address("GateService")) as ch:
            stub = gate_pb2_grpc.GateServiceStub(ch)
            for _ in range(2):
                with pytest.raises(grpc.RpcError) as err:
                    stub.Evaluate(gate_pb2.EvaluateRequest(tenant="t", query="tyres?"), timeout=1)
                assert err.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        text = scrape(stack.metrics_port("GateService"))
    finally:
        stack.stop()
        hung.close()
    cut = "candor_gate_downstream_caller_deadlines_total"
    assert metric_value(text, cut, {"downstream": "retrieval"}) == 2
    assert metric_value(text, cut, {"downstream": "generator"}) == 0
    calls = "candor_gate_downstream_calls_total"
    assert metric_value(text, calls, {"downstream": "retrieval"}) == 0  # not a failure of its own
