"""candor_retrieval_index_chunks says what the stores hold: after a restart and after deletes."""

from __future__ import annotations

from pathlib import Path

import grpc

from candor.cli.stack import start_stack
from candor.retrieval.v1 import retrieval_pb2 as pb
from candor.retrieval.v1 import retrieval_pb2_grpc as pb_grpc
from candor.settings import load_settings
from tests.helpers import BIKES, Stack, metric_value, scrape, stack_env


def _retrieval(data_dir: Path) -> Stack:
    settings = load_settings(env=stack_env(str(data_dir)))
    return Stack(lambda: start_stack(settings, "retrieval"))


def _index_chunks(stack: Stack) -> dict[str, float]:
    text = scrape(stack.metrics_port("RetrievalService"))
    return {
        arm: metric_value(text, "candor_retrieval_index_chunks", {"arm": arm})
        for arm in ("dense", "keyword")
    }


def test_index_size_is_reported_after_a_restart_and_drops_on_delete(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    stack = _retrieval(data_dir)
    try:
        with grpc.insecure_channel(stack.address("RetrievalService")) as ch:
            reply = pb_grpc.RetrievalServiceStub(ch).UpsertDocuments(
                pb.UpsertDocumentsRequest(
                    tenant="t", documents=[pb.Document(document_id="bikes", text=BIKES)]
                )
            )
        chunks = reply.results[0].chunks
        assert chunks >= 1
    finally:
        stack.stop()
    stack = _retrieval(data_dir)
    try:
        assert _index_chunks(stack) == {"dense": chunks, "keyword": chunks}
        with grpc.insecure_channel(stack.address("RetrievalService")) as ch:
            pb_grpc.RetrievalServiceStub(ch).DeleteDocuments(
                pb.DeleteDocumentsRequest(tenant="t", document_ids=["bikes"])
            )
        assert _index_chunks(stack) == {"dense": 0, "keyword": 0}
    finally:
        stack.stop()
