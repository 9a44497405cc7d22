"""Server reflection under both of its names.

grpcio-reflection serves ``grpc.reflection.v1alpha`` only. grpcurl and other current clients
ask for ``grpc.reflection.v1`` first: each call then logged "unimplemented method called" and
counted UNIMPLEMENTED before the client fell back. v1 is v1alpha renamed, message for message
and field for field, so the same servicer answers it.
"""

from __future__ import annotations

from collections.abc import Iterable

import grpc
from grpc_reflection.v1alpha import reflection, reflection_pb2, reflection_pb2_grpc

V1_SERVICE_NAME = "grpc.reflection.v1.ServerReflection"


def enable_reflection(service_names: Iterable[str], server: grpc.aio.Server) -> None:
    """Serve reflection for ``service_names`` (and the reflection service) as v1 and v1alpha."""
    servicer = reflection.aio.ReflectionServicer((*service_names, reflection.SERVICE_NAME))
    reflection_pb2_grpc.add_ServerReflectionServicer_to_server(servicer, server)  # type: ignore[no-untyped-call]
    v1 = grpc.method_handlers_generic_handler(
        V1_SERVICE_NAME,
        {
            "ServerReflectionInfo": grpc.stream_stream_rpc_method_handler(
                servicer.ServerReflectionInfo,
                request_deserializer=reflection_pb2.ServerReflectionRequest.FromString,
                response_serializer=reflection_pb2.ServerReflectionResponse.SerializeToString,
            )
        },
    )
    server.add_generic_rpc_handlers((v1,))
