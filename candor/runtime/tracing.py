"""OpenTelemetry tracing; the exporter is configured by the standard OTEL_* variables."""

from __future__ import annotations

import logging
import os

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

log = logging.getLogger("candor.tracing")
_configured = False


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
