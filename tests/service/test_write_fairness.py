"""Writes embed side by side and hold the write lock only while the stores are written: one
tenant's large upload does not keep another's small upsert waiting (an outside probe: 77 s)."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc

from candor.cli.stack import start_stack
from candor.retrieval.v1 import retrieval_pb2 as pb
from candor.retrieval.v1 import retrieval_pb2_grpc as pb_grpc
from candor.settings import load_settings
from tests.helpers import Stack, stack_env

# About 1,200 chunks: seconds of embedding on 2 cores.
LARGE = "\n\n".join(
    f"## Section {i}\n\n" + " ".join(f"Clause {i}.{j} covers shipment rule {j}." for j in range(40))
    for i in range(120)
)


def test_a_small_upsert_lands_while_a_large_one_is_still_embedding(tmp_path: Path) -> None:
    stack = Stack(
        lambda: start_stack(load_settings(env=stack_env(str(tmp_path / "data"))), "retrieval")
    )
    try:
        with (
            grpc.insecure_channel(stack.address("RetrievalService")) as ch,
            ThreadPoolExecutor(2) as pool,
        ):
            stub = pb_grpc.RetrievalServiceStub(ch)
            large = pool.submit(
                stub.UpsertDocuments,
                pb.UpsertDocumentsRequest(
                    tenant="big", documents=[pb.Document(document_id="manual", text=LARGE)]
                ),
                timeout=300,
            )
            time.sleep(0.5)  # the large one is embedding
            small = stub.UpsertDocuments(
                pb.UpsertDocumentsRequest(
                    tenant="small",
                    documents=[pb.Document(document_id="note", text="Parcels ship on Mondays.")],
                ),
                timeout=300,
            )
            assert [r.outcome for r in small.results] == [pb.DOCUMENT_OUTCOME_WRITTEN]
            assert not large.done(), "the small upsert waited for the large one"
            (result,) = large.result().results
            assert result.outcome == pb.DOCUMENT_OUTCOME_WRITTEN and result.chunks > 600
    finally:
        stack.stop()
