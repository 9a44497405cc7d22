"""OpenTelemetry tracing; the exporter is configured by the standard OTEL_* variables."""

from __future__ import annotations

import logging
import os

import grpc
from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.semconv._incubating.attributes.rpc_attributes import RPC_GRPC_STATUS_CODE
from opentelemetry.trace import Status, StatusCode

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
    """Install a tracer provider once per process.

    Spans are exported over OTLP only when OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT is set and
    OTEL_TRACES_EXPORTER is not "none"; otherwise they exist only to carry trace ids into logs
    and downstream metadata.
    """
    global _configured
    if _configured:
        return
    _configured = True
    resource = Resource.create({"service.name": os.environ.get("OTEL_SERVICE_NAME", service_name)})
    provider = TracerProvider(resource=resource)
    wants_export = os.environ.get("OTEL_TRACES_EXPORTER", "otlp") != "none" and (
        "OTEL_EXPORTER_OTLP_ENDPOINT" in os.environ
        or "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT" in os.environ
    )
    if wants_export:
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        log.info("exporting traces over OTLP")
    trace.set_tracer_provider(provider)


def current_trace_id() -> str:
    ctx = trace.get_current_span().get_span_context()
    return format(ctx.trace_id, "032x") if ctx.is_valid else ""


def record_call_status(code: grpc.StatusCode) -> None:
    """Put how the call ended on the current server span: its gRPC code, and ERROR for a
    server-side failure.

    OpenTelemetry's aio server wrapper sees only ``abort`` and ``set_code``: a call ended by
    ``abort_with_status``, an unexpected exception or a passed deadline kept code 0 and no error.
    """
    span = trace.get_current_span()
    span.set_attribute(RPC_GRPC_STATUS_CODE, code.value[0])
    if code in SERVER_ERROR_CODES:
        span.set_status(Status(StatusCode.ERROR, code.name))
