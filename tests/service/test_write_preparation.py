"""A write's chunking and embedding (``KnowledgeBase.prepare``) holds no thread while it waits
for its batches, and stops sending batches once its caller gives up; the stores are written
on a thread of their own."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import numpy as np
import numpy.typing as npt
import pytest

from candor.cli.stack import start_stack
from candor.retrieval.v1 import retrieval_pb2 as pb
from candor.retrieval.v1 import retrieval_pb2_grpc as pb_grpc
from candor.settings import load_settings
from retrieval_svc.ingest import SourceDocument
from retrieval_svc.knowledge_base import KnowledgeBase
from retrieval_svc.stores.edge import EdgeDenseStore
from retrieval_svc.stores.tantivy_store import TantivyKeywordStore
from tests.helpers import Stack, stack_env

DIM = 8
# Forty sections, each its own chunk: batches of 4 make ten of them.
LONG = "\n\n".join(
    f"## Part {i}\n\nClause {i} covers parcels shipped on day {i}." for i in range(40)
)


class GatedEmbedder:
    """Embeds nothing until ``go`` is set; counts the batches it was asked for."""

    name, dim = "gated/8", DIM

    def __init__(self) -> None:
        self.go = threading.Event()
        self.started = threading.Event()
        self.batches = 0

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        self.batches += 1
        self.started.set()
        assert self.go.wait(30)
        return np.ones((len(texts), DIM), np.float32) / np.sqrt(DIM)


@pytest.fixture
def gated(tmp_path: Path) -> Iterator[tuple[KnowledgeBase, GatedEmbedder]]:
    embedder = GatedEmbedder()
    kb = KnowledgeBase(
        embedder,
        EdgeDenseStore(tmp_path / "dense", DIM),
        TantivyKeywordStore(tmp_path / "keyword"),
        chunk_tokens=40,
        overlap_tokens=0,
        batch_size=4,
    )
    try:
        yield kb, embedder
    finally:
        embedder.go.set()
        kb.close()


def _doc(text: str) -> SourceDocument:
    return SourceDocument("t", "manual", "Manual", text, 1)


def test_a_write_waiting_for_its_embeddings_holds_none_of_the_loops_threads(
    gated: tuple[KnowledgeBase, GatedEmbedder],
) -> None:
    kb, embedder = gated

    async def run() -> int:
        loop = asyncio.get_running_loop()
        # One default thread, taken for the whole write: a prepare that needed it would hang.
        loop.set_default_executor(ThreadPoolExecutor(max_workers=1))
        taken = threading.Event()
        blocker = loop.run_in_executor(None, taken.wait, 30)
        try:
            embedder.go.set()
            done = await asyncio.wait_for(kb.prepare([_doc(LONG)]), 30)
            return sum(len(p.chunks) for p in done.planned)
        finally:
            taken.set()
            await blocker

    chunks = asyncio.run(run())
    assert chunks >= 10 and embedder.batches == -(-chunks // 4)


def test_a_cancelled_write_stops_sending_batches(
    gated: tuple[KnowledgeBase, GatedEmbedder],
) -> None:
    kb, embedder = gated

    async def run() -> None:
        task = asyncio.ensure_future(kb.prepare([_doc(LONG)]))
        assert await asyncio.to_thread(embedder.started.wait, 30)
        task.cancel()
        embedder.go.set()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(run())
    kb._ingest_pool.shutdown(wait=True)  # whatever was handed to the pool has now run
    # The two batches in flight when it was cancelled, of ten or more.
    assert embedder.batches == 2


def test_the_stores_are_written_on_a_thread_of_their_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    threads: list[str] = []
    real = KnowledgeBase.write

    def write(self: KnowledgeBase, prepared: object) -> object:
        threads.append(threading.current_thread().name)
        return real(self, prepared)  # type: ignore[arg-type]

    monkeypatch.setattr(KnowledgeBase, "write", write)
    stack = Stack(
        lambda: start_stack(load_settings(env=stack_env(str(tmp_path / "data"))), "retrieval")
    )
    try:
        with grpc.insecure_channel(stack.address("RetrievalService")) as ch:
            reply = pb_grpc.RetrievalServiceStub(ch).UpsertDocuments(
                pb.UpsertDocumentsRequest(
                    tenant="t", documents=[pb.Document(document_id="note", text="Parcels ship.")]
                ),
                timeout=60,
            )
    finally:
        stack.stop()
    assert [r.outcome for r in reply.results] == [pb.DOCUMENT_OUTCOME_WRITTEN]
    assert len(threads) == 1 and threads[0].startswith("store-write")
