"""Server spans carry the call's real gRPC code, and ERROR for the server's own failures."""

from __future__ import annotations

import io
import json
import logging
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any, NoReturn

import grpc
import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from candor.runtime.errors import FieldViolations, abort_info, abort_invalid
from candor.runtime.logs import JsonFormatter
from candor.runtime.metrics import ServiceMetrics
from candor.runtime.server import server_interceptors
from tests.helpers import LoopThread

SERVICE = "candor.test.v1.TracedService"


async def _ok(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
    return b"ok"


async def _invalid(request: bytes, context: grpc.aio.ServicerContext) -> NoReturn:
    v = FieldViolations()
    v.add("query", "required")
    await abort_invalid(context, v)


async def _unauthenticated(request: bytes, context: grpc.aio.ServicerContext) -> NoReturn:
    await abort_info(context, grpc.StatusCode.UNAUTHENTICATED, "NO_KEY", "no key")


async def _denied(request: bytes, context: grpc.aio.ServicerContext) -> NoReturn:
    await abort_info(context, grpc.StatusCode.PERMISSION_DENIED, "TENANT", "not yours")


async def _late(request: bytes, context: grpc.aio.ServicerContext) -> NoReturn:
    await abort_info(context, grpc.StatusCode.DEADLINE_EXCEEDED, "DEADLINE", "too late")


async def _boom(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
    raise RuntimeError("a bug")


async def _stream_down(request: bytes, context: grpc.aio.ServicerContext) -> AsyncIterator[bytes]:
    yield b"first"
    await abort_info(context, grpc.StatusCode.UNAVAILABLE, "LLM_DOWN", "backend down")


async def _stream_flood(request: bytes, context: grpc.aio.ServicerContext) -> AsyncIterator[bytes]:
    for _ in range(100_000):  # more than flow control lets through: it waits at a yield
        yield b"x" * 65536


UNARY = {
    "Ok": _ok,
    "Invalid": _invalid,
    "Unauthenticated": _unauthenticated,
    "Denied": _denied,
    "Late": _late,
    "Boom": _boom,
}


@pytest.fixture
def traced() -> Iterator[tuple[str, InMemorySpanExporter]]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    loop = LoopThread()

    async def start() -> tuple[grpc.aio.Server, int]:
        server = grpc.aio.server(interceptors=server_interceptors(ServiceMetrics(), provider))
        handlers: dict[str, grpc.RpcMethodHandler] = {
            name: grpc.unary_unary_rpc_method_handler(fn) for name, fn in UNARY.items()
        }
        handlers["StreamDown"] = grpc.unary_stream_rpc_method_handler(_stream_down)
        handlers["StreamFlood"] = grpc.unary_stream_rpc_method_handler(_stream_flood)
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, handlers),))
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        return server, port

    server, port = loop.run(start())
    try:
        yield f"127.0.0.1:{port}", exporter
    finally:
        loop.run(server.stop(0))
        loop.close()


def _span(exporter: InMemorySpanExporter, method: str) -> ReadableSpan:
    # The span ends as the handler returns, which can be a moment after the client has its reply.
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        for span in exporter.get_finished_spans():
            if span.name == f"/{SERVICE}/{method}":
                return span
        time.sleep(0.01)
    raise AssertionError(f"no span for {method}: {exporter.get_finished_spans()}")


def _call(target: str, method: str) -> Any:
    with grpc.insecure_channel(target) as ch:
        if method.startswith("Stream"):
            return list(ch.unary_stream(f"/{SERVICE}/{method}")(b"", timeout=5))
        return ch.unary_unary(f"/{SERVICE}/{method}")(b"", timeout=5)


@pytest.mark.parametrize(
    ("method", "code", "error"),
    [
        ("Ok", grpc.StatusCode.OK, False),
        # The caller's mistakes: their code, but not an error of this server.
        ("Invalid", grpc.StatusCode.INVALID_ARGUMENT, False),
        ("Unauthenticated", grpc.StatusCode.UNAUTHENTICATED, False),
        ("Denied", grpc.StatusCode.PERMISSION_DENIED, False),
        ("Late", grpc.StatusCode.DEADLINE_EXCEEDED, True),
        ("Boom", grpc.StatusCode.UNKNOWN, True),
        ("StreamDown", grpc.StatusCode.UNAVAILABLE, True),
    ],
)
def test_server_span_carries_the_status_the_caller_got(
    traced: tuple[str, InMemorySpanExporter], method: str, code: grpc.StatusCode, error: bool
) -> None:
    target, exporter = traced
    if code == grpc.StatusCode.OK:
        _call(target, method)
    else:
        with pytest.raises(grpc.RpcError) as info:
            _call(target, method)
        assert info.value.code() == code
    span = _span(exporter, method)
    assert span.attributes is not None
    assert span.attributes["rpc.grpc.status_code"] == code.value[0]
    assert span.status.status_code == (StatusCode.ERROR if error else StatusCode.UNSET)


def test_a_stream_the_caller_cancels_while_it_waits_at_a_yield_is_cancelled_on_its_span(
    traced: tuple[str, InMemorySpanExporter],
) -> None:
    # OpenTelemetry ends the span without closing the stream inside it, whose own ending
    # comes too late to mark the span: the call's done callback marks it first.
    target, exporter = traced
    with grpc.insecure_channel(target) as ch:
        call = ch.unary_stream(f"/{SERVICE}/StreamFlood")(b"", timeout=30)
        next(call)
        time.sleep(0.3)  # the server fills the window and waits at its yield
        call.cancel()
    span = _span(exporter, "StreamFlood")
    assert span.attributes is not None
    assert span.attributes["rpc.grpc.status_code"] == grpc.StatusCode.CANCELLED.value[0]
    assert span.status.status_code == StatusCode.UNSET  # the caller left: no server error


@pytest.fixture
def json_logs() -> Iterator[io.StringIO]:
    buffer = io.StringIO()
    handler = logging.StreamHandler(buffer)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        yield buffer
    finally:
        root.removeHandler(handler)


def test_an_unexpected_exception_is_logged_with_its_traceback_under_the_call_trace_id(
    traced: tuple[str, InMemorySpanExporter], json_logs: io.StringIO
) -> None:
    target, exporter = traced
    with pytest.raises(grpc.RpcError) as info:
        _call(target, "Boom")
    assert info.value.code() == grpc.StatusCode.UNKNOWN
    trace_id = format(_span(exporter, "Boom").context.trace_id, "032x")
    # The caller gets the trace id to look for, not the exception's text.
    assert info.value.details() == f"internal error; trace_id {trace_id} in the server log"
    errors = [
        json.loads(line)
        for line in json_logs.getvalue().splitlines()
        if json.loads(line)["level"] == "ERROR"
    ]
    # One ERROR line for the failure, with the stack trace and the trace id.
    assert len(errors) == 1, errors
    assert errors[0]["trace_id"] == trace_id
    assert "RuntimeError: a bug" in errors[0]["exc"]
    assert errors[0]["method"] == f"/{SERVICE}/Boom"
