"""Production stores that cannot be reached at start-up are opened later, not fatal; one that
answers and refuses still stops start-up."""

from __future__ import annotations

import dataclasses
import socket

import grpc
import httpx
import pytest
from opensearchpy.exceptions import TransportError
from qdrant_client.http.exceptions import UnexpectedResponse

from candor.settings import QdrantSettings, RetrievalSettings
from retrieval_svc.stores.deferred import DeferredDense, StoreUnavailable, unreachable
from retrieval_svc.stores.factory import open_dense
from tests.helpers import free_ports


class _Rpc(grpc.RpcError):
    def __init__(self, code: grpc.StatusCode) -> None:
        self._code = code

    def code(self) -> grpc.StatusCode:
        return self._code


def _raised_from(cause: BaseException) -> BaseException:
    try:
        try:
            raise cause
        except BaseException as inner:
            raise RuntimeError("client wrapper") from inner
    except RuntimeError as outer:
        return outer


@pytest.mark.parametrize(
    "error",
    [
        ConnectionRefusedError(),
        TimeoutError(),
        _raised_from(httpx.ConnectError("refused")),
        _raised_from(socket.gaierror(-2, "Name or service not known")),  # DNS not ready yet
        _Rpc(grpc.StatusCode.UNAVAILABLE),
        # A proxy with no backend, or an OpenSearch cluster still recovering its state.
        _raised_from(TransportError(503, "cluster_block_exception", {})),
        UnexpectedResponse(502, "Bad Gateway", b"", httpx.Headers()),
    ],
)
def test_what_counts_as_unreachable(error: BaseException) -> None:
    assert unreachable(error)


@pytest.mark.parametrize(
    "error",
    [
        ValueError("vector size 384, collection has 768"),
        _Rpc(grpc.StatusCode.PERMISSION_DENIED),
        OSError(13, "Permission denied"),
    ],
)
def test_a_store_that_answers_and_refuses_is_not_unreachable(error: BaseException) -> None:
    assert not unreachable(error)


def test_an_unreachable_qdrant_is_deferred_and_each_call_says_so() -> None:
    port = free_ports(1)[0]
    settings = dataclasses.replace(
        RetrievalSettings(),
        dense_backend="qdrant",
        qdrant=dataclasses.replace(
            QdrantSettings(), url=f"http://127.0.0.1:{port}", prefer_grpc=False, timeout_seconds=1
        ),
    )
    with pytest.raises(Exception) as err:
        open_dense(settings, 8)
    assert unreachable(err.value)
    store = open_dense(settings, 8, defer=True)
    try:
        assert isinstance(store, DeferredDense)
        with pytest.raises(StoreUnavailable, match="dense store is not reachable yet"):
            store.count()
    finally:
        store.close()
