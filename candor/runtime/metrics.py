"""Prometheus metrics: the standard grpc_server_* set (as go-grpc-prometheus names them)."""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from typing import Any
from wsgiref.simple_server import WSGIServer

import grpc
from opentelemetry import trace
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from candor.runtime.admission import InFlightLimit, Slot, overloaded_status
from candor.runtime.errors import abort_with
from candor.runtime.tracing import record_call_status

log = logging.getLogger("candor.server")
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)


class ServiceMetrics:
    """One registry per service, so each service's /metrics shows only its own series."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self._http: WSGIServer | None = None
        labels = ["grpc_type", "grpc_service", "grpc_method"]
        self.started = Counter(
            "grpc_server_started_total",
            "RPCs started on the server.",
            labels,
            registry=self.registry,
        )
        self.handled = Counter(
            "grpc_server_handled_total",
            "RPCs completed on the server, by status code.",
            [*labels, "grpc_code"],
            registry=self.registry,
        )
        self.handling = Histogram(
            "grpc_server_handling_seconds",
            "Time to handle an RPC, until its last message.",
            labels,
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.msg_sent = Counter(
            "grpc_server_msg_sent_total",
            "Stream messages sent by the server.",
            labels,
            registry=self.registry,
        )
        self.in_flight = Gauge(
            "candor_server_calls_in_flight",
            "Calls to this server's own methods running now (not health checks or reflection).",
            ["grpc_service"],
            registry=self.registry,
        )
        self.max_in_flight = Gauge(
            "candor_server_max_in_flight",
            "server.max_in_flight: calls past it are refused UNAVAILABLE (0: no limit).",
            ["grpc_service"],
            registry=self.registry,
        )
        self.shed = Counter(
            "candor_server_shed_total",
            "Calls refused UNAVAILABLE (reason OVERLOADED) because max_in_flight were running.",
            ["grpc_service"],
            registry=self.registry,
        )
        self.oversized = Counter(
            "candor_server_oversized_requests_total",
            "Requests refused RESOURCE_EXHAUSTED for exceeding server.max_message_bytes (those "
            "up to twice it; larger ones the transport refuses uncounted).",
            ["grpc_service"],
            registry=self.registry,
        )

    def serve(self, host: str, port: int) -> None:
        """Expose /metrics on its own port (0 disables)."""
        if port:
            try:
                self._http, _ = start_http_server(port, addr=host, registry=self.registry)
            except OSError as exc:
                raise OSError(exc.errno, f"cannot serve metrics on {host}:{port}: {exc}") from exc

    def close(self) -> None:
        """Stop serving /metrics and release its port; idempotent."""
        http, self._http = self._http, None
        if http is not None:
            http.shutdown()
            http.server_close()


def _split(method: str) -> tuple[str, str]:
    service, _, name = method.lstrip("/").partition("/")
    return service, name


def code_of(context: grpc.aio.ServicerContext, error: BaseException | None) -> grpc.StatusCode:
    """The status a finished call ends with: the one it set or aborted with, else what its
    exception becomes."""
    # A caller that goes away (cancels, or its deadline passes) ends the handler with
    # CancelledError, or a stream with GeneratorExit: not UNKNOWN, which would say the server
    # broke. The caller saw DEADLINE_EXCEEDED when its deadline is spent, else CANCELLED.
    # Decided before context.code(): OpenTelemetry's stream wrapper does not close this
    # stream when it is closed itself, so GeneratorExit can come from the finaliser after the
    # call is over, when the context may read OK.
    if isinstance(error, asyncio.CancelledError | GeneratorExit) or (
        # A servicer's exception after its caller left reached nobody: the caller saw its
        # deadline or its cancel, and an UNKNOWN here fed the error and availability alerts.
        isinstance(error, Exception)
        and not isinstance(error, grpc.aio.AbortError)
        and _caller_left(context)
    ):
        return _left_with(context)
    code = context.code()
    if isinstance(code, grpc.StatusCode):
        return code
    if isinstance(code, int):
        for candidate in grpc.StatusCode:
            if candidate.value[0] == code:
                return candidate
    if error is None:
        if _caller_left(context):
            # Its reply reached nobody: the caller already saw its deadline or its cancel. A
            # cold gate's Evaluate under a 50 ms deadline was counted OK (an error-model probe).
            return _left_with(context)
        return grpc.StatusCode.OK
    return grpc.StatusCode.UNKNOWN


class MetricsInterceptor(grpc.aio.ServerInterceptor):
    """Counts and times every unary and server-streaming RPC, records its status on the
    server span and logs a servicer's unexpected exception under the call's trace id (so it
    must run inside the OpenTelemetry interceptor)."""

    def __init__(
        self,
        metrics: ServiceMetrics,
        services: Iterable[str] = (),
        limit: InFlightLimit | None = None,
        max_request_bytes: int = 0,
    ) -> None:
        self._m = metrics
        self._max_request_bytes = max_request_bytes
        """Larger request bodies are refused RESOURCE_EXHAUSTED here, counted (0: unchecked)."""
        self._services = frozenset(services)
        """The services this server has: the only grpc_service values an unknown method gets,
        and the only ones ``limit`` counts and sheds (never health checks or reflection)."""
        self._limit = limit
        if limit is not None:
            for name in self._services:
                metrics.in_flight.labels(name).set_function(lambda: limit.running)
                metrics.max_in_flight.labels(name).set(limit.limit)
                metrics.shed.labels(name)
        for name in self._services:
            metrics.oversized.labels(name)
        self._closing = asyncio.Event()
        """Set at shutdown: writing handlers' open calls (grpc's health Watch, which never
        returns by itself) then end UNAVAILABLE instead of holding the server's grace."""

    def end_open_writers(self) -> None:
        """End the writing handlers' open calls (at shutdown, after the drain delay)."""
        self._closing.set()

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(details)
        service, method = _split(details.method)
        m = self._m
        if handler is None:
            # grpc answers UNIMPLEMENTED itself, past every interceptor: counted here, or a
            # caller on a newer API than this server would never show in the error ratio. The
            # call type is unknown without a handler, and the path is the caller's to choose
            # (300 made-up methods were 1,200 series): the method is "unknown", and so is a
            # service this server does not have; the path is logged.
            log.info("unimplemented method called", extra={"grpc_path": details.method[:256]})
            labels = ("unknown", service if service in self._services else "unknown", "unknown")
            m.started.labels(*labels).inc()
            m.handled.labels(*labels, grpc.StatusCode.UNIMPLEMENTED.name).inc()
            return handler
        if handler.unary_unary:
            inner_uu = handler.unary_unary

            async def unary(request: Any, context: grpc.aio.ServicerContext) -> Any:
                labels = ("unary", service, method)
                m.started.labels(*labels).inc()
                start = time.perf_counter()
                error: BaseException | None = None
                slot = Slot()
                try:
                    # A body that can never be served is refused first: shed, it would be
                    # retried as if it could.
                    await _refuse_unreadable(context, request, m, service)
                    await self._admit(service, context, slot)
                    return await inner_uu(request, context)
                except BaseException as exc:
                    error = exc
                    await _abort_unexpected(context, details.method, exc)
                    raise
                finally:
                    slot.release()
                    _finished(m, labels, code_of(context, error), slot, start)

            return grpc.unary_unary_rpc_method_handler(
                unary,
                _lenient(handler.request_deserializer, self._max_request_bytes),
                handler.response_serializer,
            )
        if handler.unary_stream:
            inner_us = handler.unary_stream
            if not inspect.isasyncgenfunction(inner_us):
                inner_us = _yielding(inner_us, self._closing)

            async def stream(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
                labels = ("server_stream", service, method)
                m.started.labels(*labels).inc()
                start = time.perf_counter()
                error: BaseException | None = None
                # A caller that cancels while this stream waits at a yield ends OpenTelemetry's
                # span without closing this generator, whose finally then runs too late to mark
                # the span: the call's own done callback comes first.
                span = trace.get_current_span()
                ended = False
                slot = Slot()

                def done(_: object) -> None:
                    # The same caller-cancel: this generator's finally may run only when it is
                    # collected, and the slot must not be held until then.
                    slot.release()
                    if not ended:
                        _left_early(span, context)

                context.add_done_callback(done)
                try:
                    await _refuse_unreadable(context, request, m, service)
                    await self._admit(service, context, slot)
                    async for item in inner_us(request, context):
                        m.msg_sent.labels(*labels).inc()
                        yield item
                except BaseException as exc:
                    error = exc
                    await _abort_unexpected(context, details.method, exc)
                    raise
                finally:
                    ended = True
                    slot.release()
                    _finished(m, labels, code_of(context, error), slot, start)

            return grpc.unary_stream_rpc_method_handler(
                stream,
                _lenient(handler.request_deserializer, self._max_request_bytes),
                handler.response_serializer,
            )
        return handler

    async def _admit(self, service: str, context: grpc.aio.ServicerContext, slot: Slot) -> None:
        """Take a slot for a call to one of this server's services, or refuse the call."""
        limit = self._limit
        if limit is None or service not in self._services:
            return
        if limit.try_enter():
            slot.hold(limit)
            return
        slot.shed = True
        self._m.shed.labels(service).inc()
        await abort_with(context, overloaded_status(service))


def _yielding(
    writes: Callable[[Any, grpc.aio.ServicerContext], Awaitable[None]],
    closing: asyncio.Event,
) -> Callable[[Any, grpc.aio.ServicerContext], AsyncIterator[Any]]:
    """A streaming handler that writes with context.write() (grpc's own health Watch) as an
    async generator: this wrapper, and OpenTelemetry's around it, iterate what they wrap, and
    iterating a coroutine failed every Watch with UNKNOWN. Once ``closing`` is set the call
    ends UNAVAILABLE (the caller watches elsewhere): a Watch never returns by itself, and a
    cancelled one never sent its status, so the server waited out its grace either way."""

    async def stream(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
        writer = asyncio.ensure_future(writes(request, context))
        stop = asyncio.ensure_future(closing.wait())
        try:
            await asyncio.wait({writer, stop}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop.cancel()
            if not writer.done():
                writer.cancel()
        if writer.done() and not writer.cancelled():
            writer.result()  # its own error, if any
        else:
            await context.abort(grpc.StatusCode.UNAVAILABLE, "the server is shutting down")
        nothing: tuple[Any, ...] = ()  # the handler wrote its messages itself
        for item in nothing:
            yield item

    return stream


class _Undecodable:
    """A request body its message type cannot parse (corrupt bytes, invalid UTF-8 in a
    string field): grpc's own deserializer raised before any interceptor, so the caller got
    UNKNOWN naming a Python class and the call was never counted."""

    def __init__(self, error: Exception) -> None:
        self.error = error


class _Oversized:
    """A request body over ``server.max_message_bytes``: refused by grpc's transport, the call
    never reached an interceptor and showed in no metric. The transport's own limit is set
    higher (server.py), so this one is met first."""

    def __init__(self, size: int, limit: int) -> None:
        self.size = size
        self.limit = limit


def _lenient(
    deserialize: Callable[[bytes], Any] | None, max_bytes: int = 0
) -> Callable[[bytes], Any] | None:
    if deserialize is None:
        return None
    strict = deserialize

    def parse(data: bytes) -> Any:
        if max_bytes and len(data) > max_bytes:
            return _Oversized(len(data), max_bytes)
        try:
            return strict(data)
        except Exception as exc:
            return _Undecodable(exc)

    return parse


async def _refuse_unreadable(
    context: grpc.aio.ServicerContext, request: Any, m: ServiceMetrics, service: str
) -> None:
    if isinstance(request, _Oversized):
        m.oversized.labels(service).inc()
        log.info(
            "request over the message limit",
            extra={"size_bytes": request.size, "max_message_bytes": request.limit},
        )
        # RESOURCE_EXHAUSTED, as grpc's transport said: callers (our ingest client among them)
        # read it as "send less in one message".
        await context.abort(
            grpc.StatusCode.RESOURCE_EXHAUSTED,
            f"the request is {request.size:,} bytes; this server accepts at most "
            f"{request.limit:,} in one message (server.max_message_bytes): send less per call",
        )
    if isinstance(request, _Undecodable):
        log.info("undecodable request", extra={"error_type": type(request.error).__name__})
        await context.abort(
            grpc.StatusCode.INVALID_ARGUMENT,
            "the request body is not a valid message of this method's type",
        )


async def _abort_unexpected(
    context: grpc.aio.ServicerContext, method: str, error: BaseException
) -> None:
    """A servicer's own exception (not an abort, not the caller leaving): logged with its
    traceback while the call's span is current, then ended as UNKNOWN as grpc would.

    grpc logs an escaped exception itself, but after the span has ended: without a trace id,
    which is how the runbook finds the stack trace of a failed call.
    """
    if not isinstance(error, Exception) or isinstance(error, grpc.aio.AbortError):
        return
    # grpc's own error from an abort sent as the caller's deadline lands (ExecuteBatchError)
    # comes with a few milliseconds still on this side's clock: each such call logged an
    # ERROR with a traceback (3 in 2,000 calls with 3-15 ms deadlines, an outside probe). Only
    # then: a downstream's AioRpcError or a UsageError from a servicer bug is a bug's.
    if _caller_left(context) or (_grpc_own(error) and deadline_spent(context)):
        # The caller left (or its deadline passed): nobody gets an abort now, and a second one
        # would fail. grpc's own errors from a send on the dead call are no bug; anything else
        # may be one, raised on the way out of a cancelled call (an abort on it, a stream
        # closing): kept with its traceback and trace id, as a warning, not a page.
        if _grpc_own(error):
            log.debug("call ended while aborting", extra={"method": method, "error": repr(error)})
        else:
            log.warning(
                "error in servicer after the caller left",
                exc_info=error,
                extra={"method": method, "error_type": type(error).__name__},
            )
        return
    log.error(
        "unexpected error in servicer",
        exc_info=error,
        extra={"method": method, "error_type": type(error).__name__},
    )
    span = trace.get_current_span()
    span.record_exception(error)
    # The caller learns that it failed and where the log has it, not the exception's text
    # (file paths, hosts, other tenants' ids can be in it).
    trace_id = span.get_span_context().trace_id
    where = f"; trace_id {trace_id:032x} in the server log" if trace_id else ""
    try:
        await context.abort(grpc.StatusCode.UNKNOWN, f"internal error{where}")
    except grpc.aio.AbortError:
        raise
    except Exception as exc:  # the call is over after all: the original error is re-raised
        log.debug("cannot abort a finished call", extra={"error": repr(exc)})


def _grpc_own(error: BaseException) -> bool:
    """An error grpc raised about the call itself (ExecuteBatchError, UsageError, ...)."""
    return type(error).__module__.startswith("grpc")


DEADLINE_SLACK_SECONDS = 0.05
"""A cancel this close to the caller's deadline is the deadline: the caller's clock starts
first, so its deadline fires (and it resets the stream) while this side still reads a few
milliseconds left. Read as a cancel, an upsert that ran out of time queued was CANCELLED."""


def deadline_spent(context: grpc.aio.ServicerContext) -> bool:
    """Whether the caller's deadline has passed, or is within DEADLINE_SLACK_SECONDS."""
    remaining = context.time_remaining()
    return remaining is not None and remaining <= DEADLINE_SLACK_SECONDS


def _left_with(context: grpc.aio.ServicerContext) -> grpc.StatusCode:
    """What a caller that went away saw: its deadline, or its own cancel."""
    return (
        grpc.StatusCode.DEADLINE_EXCEEDED if deadline_spent(context) else grpc.StatusCode.CANCELLED
    )


def _caller_left(context: grpc.aio.ServicerContext) -> bool:
    remaining = context.time_remaining()
    cancelled = getattr(context, "cancelled", None)
    return bool(cancelled and cancelled()) or (remaining is not None and remaining <= 0)


def _left_early(span: trace.Span, context: grpc.aio.ServicerContext) -> None:
    """The call is over and its stream never finished: the caller went away (a cancel, a
    passed deadline, or a write that found it gone)."""
    record_call_status(_left_with(context), span)


def _finished(
    m: ServiceMetrics,
    labels: tuple[str, str, str],
    code: grpc.StatusCode,
    slot: Slot,
    start: float,
) -> None:
    if not slot.shed:
        # A shed call took no time: timed, it counted as a fast good call in the latency SLO
        # and pulled p50/p99 down just when the server was overloaded.
        m.handling.labels(*labels).observe(time.perf_counter() - start)
    m.handled.labels(*labels, code.name).inc()
    record_call_status(code)
