"""Stopping the all-in-one stack lets the gate's in-flight Asks finish on the services it calls."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import grpc
import pytest

from candor.cli import client
from candor.cli.stack import start_stack
from candor.gate.v1 import gate_pb2, gate_pb2_grpc
from candor.settings import load_settings
from retrieval_svc.knowledge_base import KnowledgeBase
from tests.helpers import Stack, stack_env

SAMPLES = Path(__file__).resolve().parents[2] / "samples" / "helpcentre"
PASSED = "How do I turn on two-factor authentication?"
SLOW_RETRIEVAL_SECONDS = 0.5


def test_an_ask_in_flight_at_shutdown_gets_its_whole_answer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stack = Stack(lambda: start_stack(load_settings(env=stack_env(str(tmp_path / "data")))))
    stopped = False
    try:
        with grpc.insecure_channel(stack.address("RetrievalService")) as ch:
            assert client.ingest(ch, SAMPLES, "t", None).failed == 0
        retrieving = threading.Event()
        real = KnowledgeBase.retrieve

        async def slow(self: KnowledgeBase, *args: Any, **kwargs: Any) -> Any:
            retrieving.set()
            await asyncio.sleep(SLOW_RETRIEVAL_SECONDS)
            return await real(self, *args, **kwargs)

        monkeypatch.setattr(KnowledgeBase, "retrieve", slow)
        events: list[gate_pb2.AskResponse] = []
        errors: list[grpc.RpcError] = []

        def ask() -> None:
            with grpc.insecure_channel(stack.address("GateService")) as ch:
                request = gate_pb2.AskRequest(tenant="t", query=PASSED)
                try:
                    events.extend(gate_pb2_grpc.GateServiceStub(ch).Ask(request, timeout=30))
                except grpc.RpcError as exc:
                    errors.append(exc)

        caller = threading.Thread(target=ask)
        caller.start()
        assert retrieving.wait(10)
        stack.stop()  # while the Ask waits on retrieval, before it has called the generator
        stopped = True
        caller.join(30)
    finally:
        if not stopped:
            stack.stop()
    assert not errors, [(e.code(), e.details()) for e in errors]
    assert events[0].decision.outcome == gate_pb2.OUTCOME_PASS
    assert events[-1].HasField("final")
