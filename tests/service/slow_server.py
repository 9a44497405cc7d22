"""A tiny service booted by the shared runtime, with one slow RPC, for shutdown tests.

python -m tests.service.slow_server PORT METRICS_PORT
"""

from __future__ import annotations

import asyncio
import sys
import time

import grpc
from grpc_health.v1 import health_pb2

from candor.runtime.logs import configure_logging
from candor.runtime.server import ServiceSpec, serve_until_signal, start_service
from candor.settings import ServerSettings

SERVICE = "candor.test.v1.SlowService"


async def _slow(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
    await asyncio.sleep(float(request.decode() or "1"))
    return b"done"


async def _busy(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
    # Blocks the loop, as CPU-bound work does: nothing cancels it when the caller leaves.
    time.sleep(float(request.decode() or "1"))  # noqa: ASYNC251
    return b"done"


async def _echo(
    request: health_pb2.HealthCheckRequest, context: grpc.aio.ServicerContext
) -> health_pb2.HealthCheckRequest:
    return request


def _register(server: grpc.aio.Server) -> None:
    handler = grpc.method_handlers_generic_handler(
        SERVICE,
        {
            "Slow": grpc.unary_unary_rpc_method_handler(_slow, lambda b: b, lambda b: b),
            "Busy": grpc.unary_unary_rpc_method_handler(_busy, lambda b: b, lambda b: b),
            # Its requests must parse as a protobuf message: junk bytes fail to deserialize.
            "Echo": grpc.unary_unary_rpc_method_handler(
                _echo,
                health_pb2.HealthCheckRequest.FromString,
                health_pb2.HealthCheckRequest.SerializeToString,
            ),
        },
    )
    server.add_generic_rpc_handlers((handler,))


async def main(port: int, metrics_port: int) -> None:
    configure_logging("INFO")
    settings = ServerSettings(
        port=port, metrics_port=metrics_port, grace_seconds=10, drain_delay_seconds=1.0
    )
    running = await start_service(ServiceSpec(SERVICE, _register, settings))
    print("ready", flush=True)
    await serve_until_signal([running])


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]), int(sys.argv[2])))
