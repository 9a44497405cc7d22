"""Writes sent on to the one retrieval pod that writes (``retrieval.writer_target``).

A write's order is kept by its pod: one write lock, and arrival order per document. With several
pods on one Qdrant and one OpenSearch, two pods writing one document raced: each pod's publish
drops every generation but its own, so two updates landing together left the document in the
keyword store only, both reported WRITTEN (an outside probe). Reading pods send writes here
unchanged (with the caller's key and what is left of its deadline) and relay the writer's reply
or status, so callers keep one address and one writer orders every write.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

import grpc
from opentelemetry.instrumentation.grpc import aio_client_interceptors

from candor.retrieval.v1 import retrieval_pb2 as pb
from candor.retrieval.v1 import retrieval_pb2_grpc as pb_grpc
from candor.runtime.admission import mark_shed, passed_on, retry_delay_of
from candor.runtime.auth import forwarded_metadata
from candor.runtime.errors import abort_with, relay

Reply = TypeVar("Reply")


class WriteForwarder:
    """UpsertDocuments and DeleteDocuments, sent to ``target`` instead of written here."""

    def __init__(self, target: str, max_message_bytes: int) -> None:
        self._channel = grpc.aio.insecure_channel(
            target,
            # A write may be as large as this pod accepts; the writer's limit is the same
            # setting in the same config.
            options=[
                ("grpc.max_send_message_length", max_message_bytes),
                ("grpc.max_receive_message_length", max_message_bytes),
            ],
            interceptors=aio_client_interceptors(),  # type: ignore[no-untyped-call]
        )
        self._stub = pb_grpc.RetrievalServiceStub(self._channel)

    async def upsert(
        self, request: pb.UpsertDocumentsRequest, context: grpc.aio.ServicerContext
    ) -> pb.UpsertDocumentsResponse:
        return await self._send(self._stub.UpsertDocuments, request, context)

    async def delete(
        self, request: pb.DeleteDocumentsRequest, context: grpc.aio.ServicerContext
    ) -> pb.DeleteDocumentsResponse:
        return await self._send(self._stub.DeleteDocuments, request, context)

    async def _send(
        self,
        method: Callable[..., Awaitable[Reply]],
        request: object,
        context: grpc.aio.ServicerContext,
    ) -> Reply:
        try:
            return await method(
                request, metadata=forwarded_metadata(context), timeout=context.time_remaining()
            )
        except grpc.aio.AioRpcError as exc:
            if retry_delay_of(exc) is not None:
                # The writer shed it before any work: this pod did none either, so the call is
                # not timed here (a fast "good" call in the latency SLO), and it keeps the
                # writer's retry hint for callers whose channel retries on it.
                mark_shed()
                await abort_with(context, passed_on(exc))
            await relay(context, exc)

    async def close(self) -> None:
        await self._channel.close()
