"""Boot any candor service on grpc.aio: health, reflection, metrics, tracing, graceful SIGTERM."""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from opentelemetry.instrumentation.grpc import aio_server_interceptor
from opentelemetry.trace import TracerProvider

from candor.runtime.admission import InFlightLimit
from candor.runtime.metrics import MetricsInterceptor, ServiceMetrics
from candor.runtime.reflection import enable_reflection
from candor.runtime.tracing import configure_tracing
from candor.settings import ServerSettings

log = logging.getLogger("candor.server")

TRANSPORT_RECEIVE_FACTOR = 2
"""The transport accepts requests up to this many times ``max_message_bytes``; the metrics
interceptor refuses (and counts) those over the limit itself."""
MAX_GRPC_MESSAGE_BYTES = 2**31 - 1
"""grpc's channel arguments are C ints: a larger one fails the server's creation."""


@dataclass
class ServiceSpec:
    """What the runtime needs to boot one service."""

    name: str
    """Full proto service name, e.g. ``candor.gate.v1.GateService``."""
    register: Callable[[grpc.aio.Server], None]
    settings: ServerSettings
    metrics: ServiceMetrics = field(default_factory=ServiceMetrics)
    on_stop: Callable[[], Awaitable[None]] | None = None
    """Runs after the server drained (close stores, channels)."""
    on_start: Callable[[], Awaitable[None]] | None = None
    """Runs once the server listens, before it reports SERVING (start watchers)."""
    failed_start: bool = False
    """Set before ``on_stop`` when the service (or the stack it starts with) did not come up:
    it served nothing, so an earlier unclean run's mark on its data stays."""


@dataclass
class RunningService:
    spec: ServiceSpec
    server: grpc.aio.Server
    health: health.aio.HealthServicer
    port: int
    interceptor: MetricsInterceptor | None = None

    @property
    def address(self) -> str:
        return f"{self.spec.settings.host}:{self.port}"

    async def set_serving(self, serving: bool) -> None:
        status = (
            health_pb2.HealthCheckResponse.SERVING
            if serving
            else health_pb2.HealthCheckResponse.NOT_SERVING
        )
        for name in ("", self.spec.name):
            await self.health.set(name, status)

    async def stop(self, grace: float | None = None) -> None:
        grace = self.spec.settings.grace_seconds if grace is None else grace
        if self.interceptor is not None:
            # A health Watch never ends by itself: it held every shutdown for the whole grace
            # period. Its caller has seen NOT_SERVING by now.
            self.interceptor.end_open_writers()
        await self.server.stop(grace)
        self.spec.metrics.close()
        if self.spec.on_stop is not None:
            await self.spec.on_stop()


def server_interceptors(
    metrics: ServiceMetrics,
    tracer_provider: TracerProvider | None = None,
    services: Sequence[str] = (),
    limit: InFlightLimit | None = None,
    max_request_bytes: int = 0,
) -> list[grpc.aio.ServerInterceptor]:
    """Tracing outermost, metrics inside it: the metrics interceptor records each call's
    status on the span the tracing one opened, a shed call's too."""
    return [
        aio_server_interceptor(tracer_provider),  # type: ignore[no-untyped-call]
        MetricsInterceptor(metrics, services, limit, max_request_bytes),
    ]


async def start_service(spec: ServiceSpec) -> RunningService:
    """Start one service; returns once it is listening and SERVING.

    A service that cannot come up whole (a bad tracing setting, its gRPC or metrics port
    taken, a watcher that fails) does not go on listening, nor keep its metrics port, stores
    and data-dir lock: the caller never gets a handle to stop it with."""
    s = spec.settings
    server: grpc.aio.Server | None = None
    try:
        configure_tracing(spec.name)
        interceptors = server_interceptors(
            spec.metrics,
            services=[spec.name],
            limit=InFlightLimit(s.max_in_flight),
            max_request_bytes=s.max_message_bytes,
        )
        server = grpc.aio.server(
            interceptors=interceptors,
            options=[
                # The interceptor refuses a request over max_message_bytes itself, so it is
                # counted; the transport still bounds what a call may make this server buffer.
                (
                    "grpc.max_receive_message_length",
                    min(s.max_message_bytes * TRANSPORT_RECEIVE_FACTOR, MAX_GRPC_MESSAGE_BYTES),
                ),
                ("grpc.max_send_message_length", s.max_message_bytes),
                ("grpc.max_connection_age_ms", int(s.max_connection_age_seconds * 1000)),
                # Not grace_seconds (10 s for retrieval): an upsert still running when its
                # connection aged out was cut off with UNAVAILABLE after that long.
                (
                    "grpc.max_connection_age_grace_ms",
                    int(s.max_connection_age_grace_seconds * 1000),
                ),
                # grpc sets SO_REUSEPORT by default: a second server (another stack, another
                # config) bound the same port and the kernel split connections between them,
                # auth-enabled and not. A port in use must stop start-up instead.
                ("grpc.so_reuseport", 0),
            ],
        )
        spec.register(server)
        health_servicer = health.aio.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
        enable_reflection((spec.name, health.SERVICE_NAME), server)
        port = _bind(server, s.host, s.port, spec.name)
        await server.start()
        spec.metrics.serve(s.host, s.metrics_port)
        if spec.on_start is not None:
            await spec.on_start()
    except BaseException:
        spec.failed_start = True
        if server is not None:
            await server.stop(0)
        spec.metrics.close()
        if spec.on_stop is not None:
            await spec.on_stop()
        raise
    metered = next(i for i in interceptors if isinstance(i, MetricsInterceptor))
    running = RunningService(spec, server, health_servicer, port, metered)
    await running.set_serving(True)
    log.info(
        "service started",
        extra={"service": spec.name, "address": running.address, "metrics_port": s.metrics_port},
    )
    return running


def _bind(server: grpc.aio.Server, host: str, port: int, name: str) -> int:
    # grpcio raises a bare "Failed to bind ... GRPC_VERBOSITY=debug" RuntimeError (older
    # versions returned 0): say which service and address instead.
    why = f"cannot listen on {host}:{port} for {name}: port in use or address unavailable"
    try:
        bound = server.add_insecure_port(f"{host}:{port}")
    except RuntimeError as exc:
        raise OSError(why) from exc
    if bound == 0:
        raise OSError(why)
    return int(bound)


async def shutdown(services: Sequence[RunningService]) -> None:
    """NOT_SERVING first, give load balancers a moment, then drain in-flight calls."""
    for svc in services:
        await svc.set_serving(False)
    delay = max((svc.spec.settings.drain_delay_seconds for svc in services), default=0.0)
    log.info("shutting down: NOT_SERVING, draining", extra={"drain_delay_seconds": delay})
    await asyncio.sleep(delay)
    # In reverse start order (start_stack starts the gate last): a service's callers have drained
    # before it stops. Stopped together, the gate's in-flight Asks lost the generator mid-answer
    # (UNAVAILABLE) or the retrieval arms (a refusal that was never the gate's judgement).
    for svc in reversed(services):
        await svc.stop()
    log.info("shutdown complete")


async def serve_until_signal(
    services: Sequence[RunningService], stop_event: asyncio.Event | None = None
) -> None:
    """Block until SIGTERM/SIGINT (or ``stop_event``), then shut down gracefully."""
    stop = stop_event or asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
        await shutdown(services)
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)


def health_check(target: str, service: str = "", timeout: float = 2.0) -> str:
    """Blocking health probe used by the CLI; returns the status name."""
    with grpc.insecure_channel(target) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        try:
            reply = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=timeout)
        except grpc.RpcError as exc:
            return f"UNREACHABLE({exc.code().name})"
        return str(health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status))
