"""A request over server.max_message_bytes is refused RESOURCE_EXHAUSTED and counted.

grpc's transport refused it before any interceptor ran, so no metric showed a caller whose
every batch was too large."""

from __future__ import annotations

import grpc
import pytest

from candor.runtime.server import TRANSPORT_RECEIVE_FACTOR, ServiceSpec, start_service
from candor.settings import ServerSettings
from tests.helpers import free_ports, metric_value, scrape

SERVICE = "candor.test.v1.EchoService"
LIMIT = 64 * 1024


async def test_a_request_over_the_limit_is_refused_and_counted_and_one_at_it_runs() -> None:
    reached: list[int] = []

    async def echo(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        reached.append(len(request))
        return b"ok"

    def register(server: grpc.aio.Server) -> None:
        method = grpc.unary_unary_rpc_method_handler(echo, lambda b: b, lambda b: b)
        server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler(SERVICE, {"Echo": method}),)
        )

    port, metrics_port = free_ports(2)
    settings = ServerSettings(
        port=port, metrics_port=metrics_port, drain_delay_seconds=0, max_message_bytes=LIMIT
    )
    svc = await start_service(ServiceSpec(SERVICE, register, settings))
    options = [("grpc.max_send_message_length", 16 * LIMIT)]
    try:
        async with grpc.aio.insecure_channel(svc.address, options=options) as ch:
            call = ch.unary_unary(f"/{SERVICE}/Echo")
            assert await call(b"x" * LIMIT, timeout=10) == b"ok"
            with pytest.raises(grpc.aio.AioRpcError) as over:
                await call(b"x" * (LIMIT + 1), timeout=10)
            assert over.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert "server.max_message_bytes" in (over.value.details() or "")
            assert f"{LIMIT + 1:,} bytes" in (over.value.details() or "")
            assert reached == [LIMIT], "an oversized request must not reach the handler"

            # Past what the transport takes, grpc itself refuses it: same code, not counted.
            with pytest.raises(grpc.aio.AioRpcError) as far:
                await call(b"x" * (TRANSPORT_RECEIVE_FACTOR * LIMIT + 1), timeout=10)
            assert far.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED

        text = scrape(metrics_port)
        labels = {"grpc_service": SERVICE}
        assert metric_value(text, "candor_server_oversized_requests_total", labels) == 1
        exhausted = {**labels, "grpc_method": "Echo", "grpc_code": "RESOURCE_EXHAUSTED"}
        assert metric_value(text, "grpc_server_handled_total", exhausted) == 1
        assert metric_value(text, "grpc_server_handled_total", {**labels, "grpc_code": "OK"}) == 1
    finally:
        await svc.stop(0)


async def test_the_largest_limit_grpc_takes_still_starts_a_server() -> None:
    # Twice a limit over 1 GiB overflowed grpc's C int and the server never started.
    port, metrics_port = free_ports(2)
    settings = ServerSettings(
        port=port, metrics_port=metrics_port, drain_delay_seconds=0, max_message_bytes=2**31 - 1
    )
    svc = await start_service(ServiceSpec(SERVICE, lambda server: None, settings))
    await svc.stop(0)
