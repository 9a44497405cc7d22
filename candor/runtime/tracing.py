"""OpenTelemetry tracing; the exporter is configured by the standard OTEL_* variables."""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping

import grpc
from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SpanExporter
from opentelemetry.semconv._incubating.attributes.rpc_attributes import RPC_GRPC_STATUS_CODE
from opentelemetry.trace import Status, StatusCode

from candor.settings import SettingsError

log = logging.getLogger("candor.tracing")
_configured = False
#: Codes that are the server's failure, not the caller's (OpenTelemetry's gRPC semantic
#: conventions for server spans; the same list CandorGrpcServerErrors counts).
SERVER_ERROR_CODES = frozenset(
    {
        grpc.StatusCode.UNKNOWN,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.UNIMPLEMENTED,
        grpc.StatusCode.INTERNAL,
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.DATA_LOSS,
    }
)


def configure_tracing(service_name: str) -> None:
    """Install a tracer provider once per process, exporting as the OTEL_* variables say
    (``span_exporters``); without an exporter, spans exist only to carry trace ids into logs
    and downstream metadata."""
    global _configured
    if _configured:
        return
    exporters = span_exporters(os.environ)
    resource = Resource.create({"service.name": os.environ.get("OTEL_SERVICE_NAME", service_name)})
    provider = TracerProvider(resource=resource)
    for exporter in exporters:
        provider.add_span_processor(BatchSpanProcessor(exporter))
        log.info("exporting traces", extra={"exporter": type(exporter).__name__})
    trace.set_tracer_provider(provider)
    _configured = True


def span_exporters(environ: Mapping[str, str]) -> list[SpanExporter]:
    """The exporters OTEL_TRACES_EXPORTER names (``otlp``, the default, ``console``, ``none``).

    ``otlp`` exports only when OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT is set, and only over
    gRPC: the OTLP/HTTP exporter is not installed, so ``http/protobuf`` or ``http/json`` stops
    the service with a SettingsError rather than exporting to an endpoint that never answers.
    """
    names = [
        n.strip().lower()
        for n in environ.get("OTEL_TRACES_EXPORTER", "otlp").split(",")
        if n.strip()
    ]
    if "none" in names:
        return []
    out: list[SpanExporter] = []
    for name in names:
        if name == "console":
            out.append(ConsoleSpanExporter())
        elif name == "otlp":
            if not any(
                environ.get(v)
                for v in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
            ):
                continue
            protocol = environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or environ.get(
                "OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"
            )
            if protocol.strip().lower() != "grpc":
                raise SettingsError(
                    f"OTEL_EXPORTER_OTLP_PROTOCOL={protocol}: candor exports OTLP over gRPC "
                    "only (the OTLP/HTTP exporter is not installed); set it to grpc and point "
                    "OTEL_EXPORTER_OTLP_ENDPOINT at the collector's gRPC port (4317)"
                )
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

            out.append(OTLPSpanExporter())
        else:
            raise SettingsError(
                f"OTEL_TRACES_EXPORTER={environ['OTEL_TRACES_EXPORTER']}: {name!r} is not "
                "supported (otlp, console or none)"
            )
    return out


def current_trace_id() -> str:
    ctx = trace.get_current_span().get_span_context()
    return format(ctx.trace_id, "032x") if ctx.is_valid else ""


def record_call_status(code: grpc.StatusCode, span: trace.Span | None = None) -> None:
    """Put how the call ended on its server span (the current one unless given): its gRPC
    code, and ERROR for a server-side failure. A span already ended is left as it is.

    OpenTelemetry's aio server wrapper sees only ``abort`` and ``set_code``: a call ended by
    ``abort_with_status``, an unexpected exception or a passed deadline kept code 0 and no error.
    """
    span = span or trace.get_current_span()
    if not span.is_recording():
        return
    span.set_attribute(RPC_GRPC_STATUS_CODE, code.value[0])
    if code in SERVER_ERROR_CODES:
        span.set_status(Status(StatusCode.ERROR, code.name))
