"""The shared runtime: health, graceful SIGTERM with in-flight calls, metrics with code names."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tests.helpers import free_ports, metric_value, scrape, settled_metric
from tests.service.slow_server import SERVICE

ROOT = Path(__file__).resolve().parents[2]


def _health(target: str, service: str = "") -> str:
    with grpc.insecure_channel(target) as ch:
        reply = health_pb2_grpc.HealthStub(ch).Check(
            health_pb2.HealthCheckRequest(service=service), timeout=2
        )
        return str(health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status))


def _slow_call(target: str, seconds: float, timeout: float = 10) -> bytes:
    with grpc.insecure_channel(target) as ch:
        call = ch.unary_unary(f"/{SERVICE}/Slow")
        return call(str(seconds).encode(), timeout=timeout)  # type: ignore[no-any-return]


@pytest.fixture
def slow_server():  # type: ignore[no-untyped-def]
    port, metrics_port = free_ports(2)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.service.slow_server", str(port), str(metrics_port)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    target = f"127.0.0.1:{port}"
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            if _health(target) == "SERVING":
                break
        except grpc.RpcError:
            time.sleep(0.1)
    else:
        proc.kill()
        pytest.fail(f"server did not start: {proc.communicate()[1][-2000:]}")
    yield proc, target, metrics_port
    if proc.poll() is None:
        proc.kill()
        proc.wait()


def test_health_serving_then_not_serving_after_sigterm_while_inflight_calls_finish(slow_server):  # type: ignore[no-untyped-def]
    proc, target, _ = slow_server
    assert _health(target) == "SERVING"
    assert _health(target, SERVICE) == "SERVING"
    result: dict[str, object] = {}

    def run() -> None:
        try:
            result["reply"] = _slow_call(target, 1.5)
        except grpc.RpcError as exc:  # pragma: no cover - reported by the assert below
            result["error"] = exc

    worker = threading.Thread(target=run)
    worker.start()
    time.sleep(0.3)  # the slow call is in flight
    proc.send_signal(signal.SIGTERM)
    time.sleep(0.3)
    assert _health(target) == "NOT_SERVING"
    assert _health(target, SERVICE) == "NOT_SERVING"
    worker.join(10)
    assert result.get("reply") == b"done", result
    assert proc.wait(15) == 0
    _, err = proc.communicate()
    assert "shutdown complete" in err


def test_metrics_expose_standard_grpc_series_with_code_names(slow_server):  # type: ignore[no-untyped-def]
    _, target, metrics_port = slow_server
    assert _slow_call(target, 0.01) == b"done"
    with pytest.raises(grpc.RpcError) as err:
        _slow_call(target, 2, timeout=0.2)
    assert err.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    time.sleep(2.2)  # whatever the server-side handler still does has ended
    text = scrape(metrics_port)
    labels = {"grpc_service": SERVICE, "grpc_method": "Slow", "grpc_type": "unary"}
    assert metric_value(text, "grpc_server_started_total", labels) == 2
    # The call the client gave up on is cancelled on the server: counted as its caller saw it.
    assert metric_value(text, "grpc_server_handled_total", {**labels, "grpc_code": "OK"}) == 1
    deadline = {**labels, "grpc_code": "DEADLINE_EXCEEDED"}
    assert metric_value(text, "grpc_server_handled_total", deadline) == 1
    assert metric_value(text, "grpc_server_handling_seconds_count", labels) == 2
    assert "grpc_server_handling_seconds_bucket{" in text


def test_a_reply_finished_after_the_callers_deadline_is_counted_as_the_caller_saw_it(slow_server):  # type: ignore[no-untyped-def]
    # A handler busy past the deadline (a cold gate's first Evaluate) returned normally and
    # was counted OK, while its caller got DEADLINE_EXCEEDED.
    _, target, metrics_port = slow_server
    with grpc.insecure_channel(target) as ch:
        busy = ch.unary_unary(f"/{SERVICE}/Busy")
        with pytest.raises(grpc.RpcError) as err:
            busy(b"0.5", timeout=0.1)
    assert err.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    time.sleep(0.8)
    labels = {"grpc_service": SERVICE, "grpc_method": "Busy", "grpc_type": "unary"}
    text = scrape(metrics_port)
    assert (
        metric_value(text, "grpc_server_handled_total", {**labels, "grpc_code": "OK"}) or 0
    ) == 0
    deadline = {**labels, "grpc_code": "DEADLINE_EXCEEDED"}
    assert metric_value(text, "grpc_server_handled_total", deadline) == 1


def test_health_watch_streams_the_serving_status(slow_server):  # type: ignore[no-untyped-def]
    # grpc's Watch writes with context.write(): the metrics wrapper iterated it and failed
    # every call with UNKNOWN.
    _, target, metrics_port = slow_server
    with grpc.insecure_channel(target) as ch:
        call = health_pb2_grpc.HealthStub(ch).Watch(
            health_pb2.HealthCheckRequest(service=SERVICE), timeout=5
        )
        first = next(call)
        call.cancel()
    assert first.status == health_pb2.HealthCheckResponse.SERVING
    labels = {"grpc_service": "grpc.health.v1.Health", "grpc_method": "Watch"}
    assert metric_value(scrape(metrics_port), "grpc_server_started_total", labels) == 1


def test_an_undecodable_request_is_invalid_argument_and_counted(slow_server):  # type: ignore[no-untyped-def]
    _, target, metrics_port = slow_server
    with grpc.insecure_channel(target) as ch:
        echo = ch.unary_unary(f"/{SERVICE}/Echo")
        good = health_pb2.HealthCheckRequest(service="x").SerializeToString()
        assert echo(good, timeout=5) == good
        with pytest.raises(grpc.RpcError) as err:
            echo(b"\xff\xfe not a message", timeout=5)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "not a valid message" in (err.value.details() or "")
    assert "Error" not in (err.value.details() or "")  # no Python class names
    labels = {"grpc_service": SERVICE, "grpc_method": "Echo", "grpc_code": "INVALID_ARGUMENT"}
    # Counted as its handler ends, which may be just after the caller has its status (CI).
    assert settled_metric(metrics_port, "grpc_server_handled_total", labels, 1) == 1


def test_a_method_the_server_does_not_have_is_counted_unimplemented(slow_server):  # type: ignore[no-untyped-def]
    _, target, metrics_port = slow_server
    with grpc.insecure_channel(target) as ch, pytest.raises(grpc.RpcError) as err:
        ch.unary_unary(f"/{SERVICE}/Missing")(b"", timeout=5)
    assert err.value.code() == grpc.StatusCode.UNIMPLEMENTED
    labels = {"grpc_service": SERVICE, "grpc_method": "unknown", "grpc_code": "UNIMPLEMENTED"}
    assert metric_value(scrape(metrics_port), "grpc_server_handled_total", labels) == 1


def test_made_up_methods_and_services_add_no_series(slow_server):  # type: ignore[no-untyped-def]
    # The path is the caller's to choose: each made-up name was a series of its own.
    _, target, metrics_port = slow_server
    with grpc.insecure_channel(target) as ch:
        for path in [f"/{SERVICE}/Junk{i}" for i in range(20)] + [f"/x{i}.Y/Z" for i in range(20)]:
            with pytest.raises(grpc.RpcError):
                ch.unary_unary(path)(b"", timeout=5)
    text = scrape(metrics_port)
    handled = [
        line
        for line in text.splitlines()
        if line.startswith("grpc_server_handled_total{") and "UNIMPLEMENTED" in line
    ]
    assert len(handled) == 2, handled
    assert metric_value(text, "grpc_server_handled_total", {"grpc_service": "unknown"}) == 20
    assert "Junk" not in text and "x1.Y" not in text


def test_a_service_that_cannot_serve_metrics_stops_listening_and_releases_what_it_holds() -> None:
    import asyncio
    import socket

    from candor.runtime.server import ServiceSpec, start_service
    from candor.settings import ServerSettings
    from tests.helpers import LoopThread
    from tests.service.slow_server import _register

    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    grpc_port = free_ports(1)[0]
    closed: list[bool] = []

    async def on_stop() -> None:
        closed.append(True)

    spec = ServiceSpec(
        SERVICE,
        _register,
        ServerSettings(host="127.0.0.1", port=grpc_port, metrics_port=taken.getsockname()[1]),
        on_stop=on_stop,
    )
    loop = LoopThread()
    try:
        with pytest.raises(OSError):
            loop.run(start_service(spec))
        assert closed == [True], "the stores and data-dir lock stayed held"
        with (
            grpc.insecure_channel(f"127.0.0.1:{grpc_port}") as ch,
            pytest.raises(grpc.FutureTimeoutError),
        ):
            grpc.channel_ready_future(ch).result(timeout=0.5)
    finally:
        taken.close()
        loop.run(asyncio.sleep(0))
        loop.close()


@pytest.mark.parametrize("taken", ["grpc", "on_start"])
def test_a_service_that_cannot_come_up_releases_its_ports_and_what_it_holds(taken: str) -> None:
    # grpcio raises on a taken port (it no longer returns 0), past the clean-up that covered
    # only the metrics port and on_start; a failed on_start left the metrics port bound.
    import asyncio
    import socket

    from candor.runtime.server import ServiceSpec, start_service
    from candor.settings import ServerSettings
    from tests.helpers import LoopThread
    from tests.service.slow_server import _register

    grpc_port, metrics_port = free_ports(2)
    holder = socket.socket()
    if taken == "grpc":
        holder.bind(("127.0.0.1", grpc_port))
        holder.listen()
    closed: list[bool] = []

    async def on_stop() -> None:
        closed.append(True)

    async def on_start() -> None:
        raise RuntimeError("a watcher failed")

    spec = ServiceSpec(
        SERVICE,
        _register,
        ServerSettings(host="127.0.0.1", port=grpc_port, metrics_port=metrics_port),
        on_stop=on_stop,
        on_start=on_start if taken == "on_start" else None,
    )
    loop = LoopThread()
    try:
        with pytest.raises(OSError if taken == "grpc" else RuntimeError) as err:
            loop.run(start_service(spec))
        if taken == "grpc":
            assert f"cannot listen on 127.0.0.1:{grpc_port} for {SERVICE}" in str(err.value)
        assert closed == [True], "the stores and data-dir lock stayed held"
        with socket.socket() as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind(("127.0.0.1", metrics_port))  # the metrics port was released
    finally:
        holder.close()
        loop.run(asyncio.sleep(0))
        loop.close()


def test_a_second_server_cannot_share_a_port_another_candor_server_listens_on() -> None:
    # With grpc's default SO_REUSEPORT both bound it, and the kernel split the callers between
    # them (an auth-enabled gate's callers answered by a no-auth one).
    from candor.runtime.server import ServiceSpec, start_service
    from candor.settings import ServerSettings
    from tests.helpers import LoopThread
    from tests.service.slow_server import _register

    port = free_ports(1)[0]
    loop = LoopThread()
    try:
        first = loop.run(
            start_service(
                ServiceSpec(SERVICE, _register, ServerSettings(host="127.0.0.1", port=port))
            )
        )
        with pytest.raises(OSError, match="cannot listen"):
            loop.run(
                start_service(
                    ServiceSpec(SERVICE, _register, ServerSettings(host="127.0.0.1", port=port))
                )
            )
        loop.run(first.stop(0))
    finally:
        loop.close()


def test_an_open_health_watch_does_not_hold_up_shutdown(slow_server):  # type: ignore[no-untyped-def]
    # grpc's Watch never ends by itself: the server waited out its whole grace period (10 s
    # here, 35 s for the gate) for it on every shutdown.
    proc, target, _ = slow_server
    with grpc.insecure_channel(target) as ch:
        watch = health_pb2_grpc.HealthStub(ch).Watch(
            health_pb2.HealthCheckRequest(service=SERVICE), timeout=30
        )
        assert next(watch).status == health_pb2.HealthCheckResponse.SERVING
        started = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        assert next(watch).status == health_pb2.HealthCheckResponse.NOT_SERVING
        assert proc.wait(15) == 0
        assert time.monotonic() - started < 5  # the drain delay (1 s), not the grace (10 s)


@pytest.mark.parametrize(("age_grace", "finishes"), [(None, True), (0.3, False)])
def test_a_call_running_when_its_connection_ages_out_may_finish(
    age_grace: float | None, finishes: bool
) -> None:
    # The age grace was grace_seconds (10 s for retrieval): an upsert that ran on past its
    # connection's age was cut off with UNAVAILABLE, and `candor ingest` stopped. The 0.3 s
    # case shows this test would see that.
    from candor.runtime.server import ServiceSpec, start_service
    from candor.settings import ServerSettings
    from tests.helpers import LoopThread
    from tests.service.slow_server import _register

    port = free_ports(1)[0]
    settings = ServerSettings(port=port, max_connection_age_seconds=0.5)
    if age_grace is not None:
        settings = replace(settings, max_connection_age_grace_seconds=age_grace)
    loop = LoopThread()
    running = loop.run(start_service(ServiceSpec(SERVICE, _register, settings)))
    try:
        target = f"127.0.0.1:{port}"
        if finishes:
            assert _slow_call(target, 2.0) == b"done"
        else:
            with pytest.raises(grpc.RpcError) as err:
                _slow_call(target, 2.0)
            assert err.value.code() == grpc.StatusCode.UNAVAILABLE  # type: ignore[attr-defined]
    finally:
        loop.run(running.stop(0))
        loop.close()
