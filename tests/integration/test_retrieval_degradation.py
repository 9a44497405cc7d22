"""The retrieval service on OpenSearch: the node dies mid-run, retrieval degrades, stays up."""

from __future__ import annotations

import dataclasses
import tempfile
from collections.abc import Callable
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from candor.cli.stack import start_stack
from candor.retrieval.v1 import retrieval_pb2, retrieval_pb2_grpc
from candor.settings import OpenSearchSettings, load_settings
from tests.helpers import Stack, stack_env
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
