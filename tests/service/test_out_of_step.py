"""A document the two stores hold at two versions (a publish that failed) is served at one,
counted in candor_retrieval_out_of_step_total and logged once a minute per document."""

from __future__ import annotations

import logging
from pathlib import Path

import grpc
import pytest

from candor.cli.stack import start_stack
from candor.retrieval.v1 import retrieval_pb2 as pb
from candor.retrieval.v1 import retrieval_pb2_grpc as pb_grpc
from candor.settings import load_settings
from retrieval_svc.embed.minilm import MiniLMEmbedder
from retrieval_svc.ingest import SourceDocument
from retrieval_svc.knowledge_base import KnowledgeBase
from retrieval_svc.stores.data_dir import DENSE_DIR, KEYWORD_DIR
from retrieval_svc.stores.edge import EdgeDenseStore
from retrieval_svc.stores.tantivy_store import TantivyKeywordStore
from tests.helpers import Stack, metric_value, scrape, stack_env

OLD = "Road bicycle tyres run at 80 to 100 psi."
NEW = "Road bicycle tyres now run at 60 to 70 psi, wider and softer."


def _publish_fails_for_the_new_version(data_dir: Path) -> None:
    embedder = MiniLMEmbedder()
    kb = KnowledgeBase(
        embedder,
        EdgeDenseStore(data_dir / DENSE_DIR, embedder.dim),
        TantivyKeywordStore(data_dir / KEYWORD_DIR),
    )
    try:
        assert kb.upsert([SourceDocument("t", "bikes", "Bicycles", OLD, 1)])[0].outcome == "written"

        def unpublishable(*args: object) -> None:
            raise ConnectionError("dense store went away before publishing")

        kb._dense.publish_many = unpublishable  # type: ignore[method-assign]
        assert kb.upsert([SourceDocument("t", "bikes", "Bicycles", NEW, 1)])[0].outcome == "failed"
    finally:
        kb.close()


def test_a_document_at_two_versions_is_served_at_one_counted_and_logged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    _publish_fails_for_the_new_version(data_dir)
    stack = Stack(lambda: start_stack(load_settings(env=stack_env(str(data_dir))), "retrieval"))
    try:
        with (
            caplog.at_level(logging.WARNING, logger="candor.retrieval"),
            grpc.insecure_channel(stack.address("RetrievalService")) as ch,
        ):
            stub = pb_grpc.RetrievalServiceStub(ch)
            for _ in range(2):
                reply = stub.Retrieve(pb.RetrieveRequest(tenant="t", query="bicycle tyre psi"))
                assert [c.text for c in reply.candidates] == [NEW]
                assert not reply.degraded
        text = scrape(stack.metrics_port("RetrievalService"))
        assert metric_value(text, "candor_retrieval_out_of_step_total") == 2
        logged = [r for r in caplog.records if "out of step between the stores" in r.getMessage()]
        assert [(r.tenant, r.document_id) for r in logged] == [("t", "bikes")]  # type: ignore[attr-defined]
    finally:
        stack.stop()
