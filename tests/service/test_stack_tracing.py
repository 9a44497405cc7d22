"""The spans of the all-in-one process are named after candor, not after the first service."""

from __future__ import annotations

import asyncio
from typing import Any

import grpc
import pytest
from opentelemetry.sdk.trace import TracerProvider

from candor.cli import stack
from candor.runtime import tracing
from candor.runtime.server import ServiceSpec
from candor.settings import ServerSettings, Settings


def _spec(name: str) -> Any:
    def build(settings: Settings) -> ServiceSpec:
        def register(server: grpc.aio.Server) -> None:
            pass

        return ServiceSpec(name, register, ServerSettings(host="127.0.0.1", port=0, metrics_port=0))

    return build


@pytest.fixture
def providers(monkeypatch: pytest.MonkeyPatch) -> list[TracerProvider]:
    """The providers installed, in a process whose tracing is not configured yet."""
    installed: list[TracerProvider] = []
    monkeypatch.setattr(tracing, "_configured", False)
    monkeypatch.setattr(tracing.trace, "set_tracer_provider", installed.append)
    monkeypatch.delenv("OTEL_SERVICE_NAME", raising=False)
    monkeypatch.setattr(stack, "build_retrieval", _spec("candor.retrieval.v1.RetrievalService"))
    monkeypatch.setattr(stack, "build_generator", _spec("candor.generator.v1.GeneratorService"))
    monkeypatch.setattr(stack, "build_gate", _spec("candor.gate.v1.GateService"))
    monkeypatch.setattr(stack, "signing_key", lambda settings: None)
    return installed


async def _start_and_stop(which: str) -> None:
    for svc in await stack.start_stack(Settings(), which):
        await svc.stop(0)


@pytest.mark.parametrize(
    ("which", "name"),
    [("all", "candor"), ("retrieval", "candor.retrieval.v1.RetrievalService")],
)
def test_service_name_of_the_process(
    providers: list[TracerProvider], which: str, name: str
) -> None:
    asyncio.run(_start_and_stop(which))
    (provider,) = providers
    assert provider.resource.attributes["service.name"] == name
