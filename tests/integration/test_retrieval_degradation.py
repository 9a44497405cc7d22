"""The retrieval service on OpenSearch: the node dies mid-run, retrieval degrades, stays up."""

from __future__ import annotations

import contextlib
import dataclasses
import socket
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from candor.cli.stack import start_stack
from candor.retrieval.v1 import retrieval_pb2, retrieval_pb2_grpc
from candor.settings import OpenSearchSettings, load_settings
from tests.helpers import Stack, free_ports, stack_env
from tests.opensearch_node_fixture import OpenSearchNode

pytestmark = pytest.mark.opensearch


def test_opensearch_stopped_mid_run_gives_dense_only_degraded_results(
    opensearch_node_factory: Callable[[], OpenSearchNode],
) -> None:
    node = opensearch_node_factory()
    with tempfile.TemporaryDirectory() as tmp:
        settings = load_settings(
            env=stack_env(str(Path(tmp)), CANDOR_RETRIEVAL__KEYWORD_BACKEND="opensearch")
        )
        retrieval = dataclasses.replace(
            settings.retrieval,
            opensearch=OpenSearchSettings(hosts=(node.url,), index="degrade", timeout_seconds=1.0),
        )
        stack = Stack(
            lambda: start_stack(dataclasses.replace(settings, retrieval=retrieval), "retrieval")
        )
        try:
            with grpc.insecure_channel(stack.address("RetrievalService")) as ch:
                stub = retrieval_pb2_grpc.RetrievalServiceStub(ch)
                docs = [
                    retrieval_pb2.Document(
                        document_id="tides",
                        title="Tides",
                        text="The Moon's gravity causes two high tides a day.",
                    ),
                    retrieval_pb2.Document(
                        document_id="bread",
                        title="Bread",
                        text="Sourdough starter is flour and water.",
                    ),
                ]
                reply = stub.UpsertDocuments(
                    retrieval_pb2.UpsertDocumentsRequest(tenant="t", documents=docs)
                )
                assert all(
                    r.outcome == retrieval_pb2.DOCUMENT_OUTCOME_WRITTEN for r in reply.results
                )
                query = retrieval_pb2.RetrieveRequest(tenant="t", query="why two high tides")
                healthy = stub.Retrieve(query, timeout=10)
                assert not healthy.degraded and healthy.candidates[0].in_both

                node.stop()
                degraded = stub.Retrieve(query, timeout=10)
                assert degraded.degraded
                states = {a.arm: a.state for a in degraded.arms}
                assert states[retrieval_pb2.ARM_DENSE] == retrieval_pb2.ARM_STATE_OK
                assert states[retrieval_pb2.ARM_KEYWORD] in (
                    retrieval_pb2.ARM_STATE_ERROR,
                    retrieval_pb2.ARM_STATE_TIMEOUT,
                )
                top = degraded.candidates[0]
                assert top.document_id == "tides" and not top.in_both and top.keyword.rank == 0
                status = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest())
                assert status.status == health_pb2.HealthCheckResponse.SERVING
        finally:
            stack.stop()


class _Forwarder:
    """A TCP port that refuses connections until ``open_to(url)``, then forwards them there:
    a store that is down when a pod starts and comes back later."""

    def __init__(self) -> None:
        self.port = free_ports(1)[0]
        self._server: socket.socket | None = None
        self._threads: list[threading.Thread] = []

    def open_to(self, url: str) -> None:
        host, port = url.removeprefix("http://").rstrip("/").split(":")
        server = socket.create_server(("127.0.0.1", self.port))
        self._server = server

        def pipe(src: socket.socket, dst: socket.socket) -> None:
            with contextlib.suppress(OSError):
                while data := src.recv(65536):
                    dst.sendall(data)
            with contextlib.suppress(OSError):
                dst.shutdown(socket.SHUT_WR)

        def accept() -> None:
            with contextlib.suppress(OSError):
                while True:
                    client, _ = server.accept()
                    upstream = socket.create_connection((host, int(port)))
                    for a, b in ((client, upstream), (upstream, client)):
                        threading.Thread(target=pipe, args=(a, b), daemon=True).start()

        thread = threading.Thread(target=accept, daemon=True)
        thread.start()
        self._threads.append(thread)

    def close(self) -> None:
        if self._server is not None:
            self._server.close()


def test_a_store_unreachable_at_start_up_is_served_without_then_opened_when_it_returns(
    opensearch_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A pod that starts during a keyword-store outage used to exit ("cannot open the data
    # dir"): every new or restarted pod crash-looped and a one-arm outage took capacity down.
    from retrieval_svc.stores import deferred

    monkeypatch.setattr(deferred, "FIRST_RETRY_SECONDS", 0.2)
    monkeypatch.setattr(deferred, "MAX_RETRY_SECONDS", 0.5)
    store = _Forwarder()
    with tempfile.TemporaryDirectory() as tmp:
        settings = load_settings(
            env=stack_env(str(Path(tmp)), CANDOR_RETRIEVAL__KEYWORD_BACKEND="opensearch")
        )
        retrieval = dataclasses.replace(
            settings.retrieval,
            opensearch=OpenSearchSettings(
                hosts=(f"http://127.0.0.1:{store.port}",), index="late", timeout_seconds=1.0
            ),
        )
        stack = Stack(
            lambda: start_stack(dataclasses.replace(settings, retrieval=retrieval), "retrieval")
        )
        try:
            with grpc.insecure_channel(stack.address("RetrievalService")) as ch:
                stub = retrieval_pb2_grpc.RetrievalServiceStub(ch)
                status = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest())
                assert status.status == health_pb2.HealthCheckResponse.SERVING
                doc = retrieval_pb2.Document(
                    document_id="tides", title="Tides", text="The Moon causes two high tides."
                )
                request = retrieval_pb2.UpsertDocumentsRequest(tenant="t", documents=[doc])
                [down] = stub.UpsertDocuments(request).results
                assert down.outcome == retrieval_pb2.DOCUMENT_OUTCOME_FAILED
                assert "keyword store is not reachable yet" in down.error
                query = retrieval_pb2.RetrieveRequest(tenant="t", query="why two high tides")
                degraded = stub.Retrieve(query, timeout=10)
                states = {a.arm: a.state for a in degraded.arms}
                assert degraded.degraded
                assert states[retrieval_pb2.ARM_KEYWORD] == retrieval_pb2.ARM_STATE_ERROR

                store.open_to(opensearch_url)
                deadline = time.monotonic() + 20
                while True:
                    [written] = stub.UpsertDocuments(request).results
                    if written.outcome == retrieval_pb2.DOCUMENT_OUTCOME_WRITTEN:
                        break
                    assert time.monotonic() < deadline, written.error
                    time.sleep(0.2)
                healthy = stub.Retrieve(query, timeout=10)
                assert not healthy.degraded and healthy.candidates[0].in_both
        finally:
            stack.stop()
            store.close()
