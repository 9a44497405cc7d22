"""OTEL_TRACES_EXPORTER and the OTLP protocol variables pick the span exporters, or stop the
service with a clear message for what candor cannot export."""

from __future__ import annotations

import pytest
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace.export import ConsoleSpanExporter

from candor.runtime.tracing import span_exporters
from candor.settings import SettingsError

ENDPOINT = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4317"}


def _kinds(environ: dict[str, str]) -> list[type]:
    return [type(e) for e in span_exporters(environ)]


def test_otlp_over_grpc_only_when_an_endpoint_is_set() -> None:
    assert _kinds({}) == []
    assert _kinds(ENDPOINT) == [OTLPSpanExporter]
    assert _kinds({**ENDPOINT, "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}) == [OTLPSpanExporter]


def test_console_alone_even_with_an_endpoint() -> None:
    assert _kinds({"OTEL_TRACES_EXPORTER": "console"}) == [ConsoleSpanExporter]
    assert _kinds({**ENDPOINT, "OTEL_TRACES_EXPORTER": "console"}) == [ConsoleSpanExporter]
    both = {**ENDPOINT, "OTEL_TRACES_EXPORTER": "otlp,console"}
    assert _kinds(both) == [OTLPSpanExporter, ConsoleSpanExporter]


def test_none_exports_nothing() -> None:
    assert _kinds({**ENDPOINT, "OTEL_TRACES_EXPORTER": "none"}) == []


@pytest.mark.parametrize(
    "variable", ["OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"]
)
def test_otlp_over_http_fails_loudly(variable: str) -> None:
    environ = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318", variable: "http/protobuf"}
    with pytest.raises(SettingsError, match="gRPC only"):
        span_exporters(environ)


def test_an_unknown_exporter_fails_loudly() -> None:
    with pytest.raises(SettingsError, match="zipkin"):
        span_exporters({"OTEL_TRACES_EXPORTER": "zipkin"})
