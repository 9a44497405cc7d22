"""A client cancelling an Ask stream is routine: it must not log an ERROR with a traceback."""

from __future__ import annotations

import io
import logging
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from candor.cli import client
from candor.cli.stack import start_stack
from candor.gate.v1 import gate_pb2, gate_pb2_grpc
from candor.runtime import logs
from candor.settings import load_settings
from tests.helpers import Stack, metric_value, scrape, stack_env

SAMPLES = Path(__file__).resolve().parents[2] / "samples" / "helpcentre"
PASSED = "How do I turn on two-factor authentication?"


@pytest.fixture
def log_lines(monkeypatch: pytest.MonkeyPatch) -> Iterator[io.StringIO]:
    """The service's JSON logs as configured at start-up, into a buffer; restored after."""
    root, otel = logging.getLogger(), logging.getLogger("opentelemetry.context")
    handlers, level, filters = root.handlers[:], root.level, otel.filters[:]
    buffer = io.StringIO()
    monkeypatch.setattr(logs.sys, "stderr", buffer)
    logs.configure_logging()
    try:
        yield buffer
    finally:
        root.handlers[:], otel.filters[:] = handlers, filters
        root.setLevel(level)


def _settled(stack: Stack, labels: dict[str, str], want: float) -> str:
    """The gate's metrics once ``want`` calls with ``labels`` are counted: a cancelled handler
    finishes on the server a moment after the client has moved on."""
    deadline = time.monotonic() + 5
    while True:
        text = scrape(stack.metrics_port("GateService"))
        if metric_value(text, "grpc_server_handled_total", labels) >= want:
            return text
        if time.monotonic() > deadline:
            raise AssertionError(f"{labels} counted fewer than {want} times:\n{text}")
        time.sleep(0.05)


def test_cancelled_ask_streams_log_no_error(tmp_path: Path, log_lines: io.StringIO) -> None:
    stack = Stack(lambda: start_stack(load_settings(env=stack_env(str(tmp_path / "data")))))
    try:
        with grpc.insecure_channel(stack.address("RetrievalService")) as rch:
            assert client.ingest(rch, SAMPLES, "t", None).failed == 0
        with grpc.insecure_channel(stack.address("GateService")) as ch:
            gate = gate_pb2_grpc.GateServiceStub(ch)
            for _ in range(3):
                stream = gate.Ask(gate_pb2.AskRequest(tenant="t", query=PASSED), timeout=10)
                first = next(stream)
                # A passed question: the answer is still streaming when the client cancels.
                assert first.decision.outcome == gate_pb2.OUTCOME_PASS
                stream.cancel()
            # The stack still answers after the cancellations.
            events = list(gate.Ask(gate_pb2.AskRequest(tenant="t", query=PASSED), timeout=10))
            assert events[0].HasField("decision")
        # Counted as the caller's doing, not as a server fault (UNKNOWN pages on-call).
        metrics = _settled(stack, {"grpc_method": "Ask", "grpc_code": "CANCELLED"}, 3)
        assert metric_value(metrics, "grpc_server_handled_total", {"grpc_code": "UNKNOWN"}) == 0
    finally:
        stack.stop()
    text = log_lines.getvalue()
    assert '"msg": "decision"' in text  # the buffer does receive the services' logs
    # The lines themselves, so a failure says which error was logged.
    assert [line for line in text.splitlines() if '"level": "ERROR"' in line] == []


def test_other_detach_failures_still_log() -> None:
    record = logging.LogRecord("opentelemetry.context", logging.ERROR, "", 0, "", (), None)
    record.msg = "Failed to detach context"
    try:
        raise ValueError("token was created in a different Context")
    except ValueError as exc:
        record.exc_info = (type(exc), exc, exc.__traceback__)
    assert logs.ClosedStreamDetachFilter().filter(record)
