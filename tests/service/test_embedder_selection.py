"""The configured embedder builds the collection; another embedder is refused on the same data."""

from __future__ import annotations

import json
from pathlib import Path

import grpc
import pytest

from candor.cli.stack import start_stack
from candor.retrieval.v1 import retrieval_pb2, retrieval_pb2_grpc
from candor.settings import load_settings
from retrieval_svc import service
from retrieval_svc.knowledge_base import EmbedderMismatch
from retrieval_svc.stores.edge import EdgeDenseStore
from tests.helpers import Stack, stack_env


def test_multilingual_collection_answers_across_languages_and_refuses_another_model(
    tmp_path: Path,
) -> None:
    env = stack_env(str(tmp_path), CANDOR_RETRIEVAL__EMBEDDER="multilingual")
    stack = Stack(lambda: start_stack(load_settings(env=env), "retrieval"))
    try:
        with grpc.insecure_channel(stack.address("RetrievalService")) as ch:
            stub = retrieval_pb2_grpc.RetrievalServiceStub(ch)
            docs = [
                retrieval_pb2.Document(
                    document_id="rueckgabe",
                    title="Rücksendungen",
                    text="Sie können Artikel innerhalb von 30 Tagen zurücksenden.",
                ),
                retrieval_pb2.Document(
                    document_id="versand",
                    title="Versandkosten",
                    text="Der Versand innerhalb Deutschlands kostet 4,90 Euro.",
                ),
            ]
            stub.UpsertDocuments(retrieval_pb2.UpsertDocumentsRequest(tenant="t", documents=docs))
            reply = stub.Retrieve(
                retrieval_pb2.RetrieveRequest(
                    tenant="t",
                    query="How long do I have to return an item?",
                    mode=retrieval_pb2.RETRIEVAL_MODE_DENSE,
                )
            )
            assert reply.embedder.startswith("universal-sentence-encoder-multilingual")
            assert reply.candidates[0].document_id == "rueckgabe"
    finally:
        stack.stop()
    with pytest.raises(EmbedderMismatch, match="universal-sentence-encoder"):
        Stack(lambda: start_stack(load_settings(env=stack_env(str(tmp_path))), "retrieval"))


def test_a_start_the_stores_refuse_records_no_embedder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Stores built at 384 dimensions whose collection.json was lost.
    EdgeDenseStore(tmp_path / "dense", 384).close()

    class Wide:
        name, dim = "wide/512", 512

    monkeypatch.setattr(service, "open_embedders", lambda settings: (Wide(), Wide()))
    settings = load_settings(env=stack_env(str(tmp_path)))
    with pytest.raises(Exception, match="expected vector size 512"):  # Edge raises Exception
        service._open_knowledge_base(settings, tmp_path)
    # Not recorded: the original embedder still opens the stores.
    assert not (tmp_path / "collection.json").exists()
    monkeypatch.undo()
    service._open_knowledge_base(settings, tmp_path).close()
    assert json.loads((tmp_path / "collection.json").read_text())["dim"] == 384
