"""retrieval.writer_target: a reading pod sends writes to the one pod that writes and relays
its reply or status unchanged, with the caller's key and deadline."""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from candor.cli.stack import start_stack
from candor.retrieval.v1 import retrieval_pb2 as pb
from candor.retrieval.v1 import retrieval_pb2_grpc as pb_grpc
from candor.runtime.auth import API_KEY_HEADER
from candor.settings import Settings, SettingsError, load_settings
from tests.helpers import BIKES, Stack, metric_value, scrape, stack_env

KEY = "writer-test-key"


def _settings(tmp_path: Path, name: str) -> Settings:
    config = tmp_path / f"{name}.yaml"
    digest = hashlib.sha256(KEY.encode()).hexdigest()
    config.write_text(
        f"auth:\n  enabled: true\n  keys:\n    - {{name: k, sha256: '{digest}', tenants: ['t']}}\n"
    )
    return load_settings(str(config), env=stack_env(str(tmp_path / name)))


@pytest.fixture
def pods(tmp_path: Path) -> Iterator[tuple[Stack, Stack]]:
    writer = Stack(lambda: start_stack(_settings(tmp_path, "writer"), "retrieval"))
    # Its own (embedded, empty) stores show that nothing was written here. Settings allow
    # writer_target only with shared stores, so the test sets it past their check.
    settings = _settings(tmp_path, "reader")
    settings = dataclasses.replace(
        settings,
        retrieval=dataclasses.replace(
            settings.retrieval, writer_target=writer.address("RetrievalService")
        ),
    )
    reader = Stack(lambda: start_stack(settings, "retrieval"))
    try:
        yield writer, reader
    finally:
        reader.stop()
        writer.stop()


def _stub(stack: Stack) -> tuple[grpc.Channel, pb_grpc.RetrievalServiceStub]:
    channel = grpc.insecure_channel(stack.address("RetrievalService"))
    return channel, pb_grpc.RetrievalServiceStub(channel)


AUTH = ((API_KEY_HEADER, KEY),)


def test_writes_sent_to_a_reading_pod_land_on_the_writer(pods: tuple[Stack, Stack]) -> None:
    writer, reader = pods
    upsert = pb.UpsertDocumentsRequest(
        tenant="t", documents=[pb.Document(document_id="bikes", title="Bicycles", text=BIKES)]
    )
    query = pb.RetrieveRequest(tenant="t", query="road bicycle tyre pressure")
    (rc, to_reader), (wc, to_writer) = _stub(reader), _stub(writer)
    with rc, wc:
        reply = to_reader.UpsertDocuments(upsert, metadata=AUTH, timeout=60)
        assert [r.outcome for r in reply.results] == [pb.DOCUMENT_OUTCOME_WRITTEN]
        assert [c.document_id for c in to_writer.Retrieve(query, metadata=AUTH).candidates] == [
            "bikes"
        ]
        assert not to_reader.Retrieve(query, metadata=AUTH).candidates  # its own stores

        deleted = to_reader.DeleteDocuments(
            pb.DeleteDocumentsRequest(tenant="t", document_ids=["bikes"]), metadata=AUTH
        )
        assert [r.outcome for r in deleted.results] == [pb.DOCUMENT_OUTCOME_DELETED]
        assert not to_writer.Retrieve(query, metadata=AUTH).candidates

        # The writer's refusals reach the caller as the writer sent them.
        with pytest.raises(grpc.RpcError) as invalid:
            to_reader.UpsertDocuments(
                pb.UpsertDocumentsRequest(tenant="t", documents=[pb.Document(document_id="x")]),
                metadata=AUTH,
            )
        assert invalid.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        status = rpc_status.from_call(invalid.value)  # type: ignore[arg-type]
        assert status is not None
        violations = error_details_pb2.BadRequest()
        status.details[0].Unpack(violations)
        assert [v.field for v in violations.field_violations] == ["documents[0].text"]
        with pytest.raises(grpc.RpcError) as unauthenticated:
            to_reader.UpsertDocuments(upsert)  # no key: the writer checks it
        assert unauthenticated.value.code() == grpc.StatusCode.UNAUTHENTICATED
        with pytest.raises(grpc.RpcError) as denied:
            to_reader.DeleteDocuments(
                pb.DeleteDocumentsRequest(tenant="other", document_ids=["bikes"]), metadata=AUTH
            )
        assert denied.value.code() == grpc.StatusCode.PERMISSION_DENIED

    # Counted where they were written.
    written = {"op": "upsert", "outcome": "written"}
    wrote = scrape(writer.metrics_port("RetrievalService"))
    assert metric_value(wrote, "candor_retrieval_documents_total", written) == 1
    relayed = scrape(reader.metrics_port("RetrievalService"))
    assert "candor_retrieval_documents_total{" not in relayed
    # Only the writer knows when the stores change; a reader's start-up count would go stale.
    assert metric_value(wrote, "candor_retrieval_index_chunks", {"arm": "keyword"}) == 0
    assert "candor_retrieval_index_chunks{" in wrote
    assert "candor_retrieval_index_chunks{" not in relayed


def test_a_writer_that_cannot_be_reached_is_unavailable(tmp_path: Path) -> None:
    settings = _settings(tmp_path, "reader")
    settings = dataclasses.replace(
        settings,
        retrieval=dataclasses.replace(settings.retrieval, writer_target="127.0.0.1:9"),
    )
    reader = Stack(lambda: start_stack(settings, "retrieval"))
    channel, stub = _stub(reader)
    try:
        with channel, pytest.raises(grpc.RpcError) as down:
            stub.DeleteDocuments(
                pb.DeleteDocumentsRequest(tenant="t", document_ids=["bikes"]),
                metadata=AUTH,
                timeout=5,
            )
        assert down.value.code() == grpc.StatusCode.UNAVAILABLE
    finally:
        reader.stop()


def test_a_writer_target_needs_stores_the_pods_share() -> None:
    with pytest.raises(SettingsError, match="writer_target needs dense_backend qdrant"):
        load_settings(
            env={"CANDOR_RETRIEVAL__WRITER_TARGET": "dns:///candor-retrieval-writer:50051"}
        )
