"""A write whose caller gives up still lands before the next write: no lost update, no deleted
document coming back."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import grpc
import pytest

from candor.cli.stack import start_stack
from candor.retrieval.v1 import retrieval_pb2 as pb
from candor.retrieval.v1 import retrieval_pb2_grpc as pb_grpc
from candor.settings import load_settings
from retrieval_svc.knowledge_base import KnowledgeBase
from tests.helpers import Stack, metric_value, scrape, stack_env

TENANT = "t"
RELEASE_AFTER_SECONDS = 1.0
"""How long the next call may run before the held write is let through; it only has to be
long enough for a next call that does not wait for the lock to finish."""


class Held(NamedTuple):
    release: threading.Event
    """Lets the first version's write through."""
    landed: threading.Event
    """Set once the write has run."""
    outcomes: list[str]
    """How it went for each document ("written", or "failed" with an exception)."""


@pytest.fixture
def held(monkeypatch: pytest.MonkeyPatch) -> Held:
    """The first version's write (to the stores, under the write lock) blocks in its thread
    until released."""
    h = Held(threading.Event(), threading.Event(), [])
    real = KnowledgeBase.write

    def write(self: KnowledgeBase, prepared: Any) -> Any:
        if not any(d.text.startswith("first") for d in prepared.documents):
            return real(self, prepared)
        h.release.wait(30)
        try:
            results = real(self, prepared)
        except BaseException as exc:
            h.outcomes.append(repr(exc))
            raise
        finally:
            h.landed.set()
        h.outcomes.extend(r.outcome for r in results)
        return results

    monkeypatch.setattr(KnowledgeBase, "write", write)
    return h


def _stack(tmp_path: Path, **env: str) -> Stack:
    return Stack(lambda: start_stack(load_settings(env=stack_env(str(tmp_path / "data"), **env))))


@pytest.fixture
def stub(tmp_path: Path) -> Iterator[pb_grpc.RetrievalServiceStub]:
    stack = _stack(tmp_path)
    try:
        with grpc.insecure_channel(stack.address("RetrievalService")) as ch:
            yield pb_grpc.RetrievalServiceStub(ch)
    finally:
        stack.stop()


def _upsert(stub: pb_grpc.RetrievalServiceStub, text: str, timeout: float) -> object:
    doc = pb.Document(document_id="doc", title="Policy", text=text)
    return stub.UpsertDocuments(
        pb.UpsertDocumentsRequest(tenant=TENANT, documents=[doc]), timeout=timeout
    )


def _texts(stub: pb_grpc.RetrievalServiceStub) -> list[str]:
    reply = stub.Retrieve(
        pb.RetrieveRequest(tenant=TENANT, query="version", mode=pb.RETRIEVAL_MODE_KEYWORD)
    )
    return [c.text for c in reply.candidates]


def _after_a_cancelled_upsert(stub: pb_grpc.RetrievalServiceStub, held: Held, then: Any) -> None:
    with pytest.raises(grpc.RpcError) as info:
        _upsert(stub, "first version of the policy", timeout=0.3)
    assert info.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    done = threading.Event()
    errors: list[BaseException] = []

    def run() -> None:
        try:
            then()
        except BaseException as exc:  # reported on the test's thread below
            errors.append(exc)
        finally:
            done.set()

    worker = threading.Thread(target=run)
    worker.start()
    done.wait(RELEASE_AFTER_SECONDS)
    held.release.set()
    worker.join(30)
    assert not errors, errors
    assert held.landed.wait(30), "the cancelled call's write never ran"


def test_a_later_upsert_is_not_overwritten_by_a_cancelled_one(
    stub: pb_grpc.RetrievalServiceStub, held: Held
) -> None:
    _after_a_cancelled_upsert(stub, held, lambda: _upsert(stub, "second version", 30))
    assert _texts(stub) == ["second version"]


def test_a_delete_after_a_cancelled_upsert_stays_deleted(
    stub: pb_grpc.RetrievalServiceStub, held: Held
) -> None:
    def delete() -> None:
        stub.DeleteDocuments(
            pb.DeleteDocumentsRequest(tenant=TENANT, document_ids=["doc"]), timeout=30
        )

    _after_a_cancelled_upsert(stub, held, delete)
    assert _texts(stub) == []


def test_shutdown_waits_for_a_write_still_landing_before_closing_the_stores(
    tmp_path: Path, held: Held
) -> None:
    # The grace runs out long before the write is let through.
    stack = _stack(tmp_path, CANDOR_RETRIEVAL__SERVER__GRACE_SECONDS="0.1")
    with (
        grpc.insecure_channel(stack.address("RetrievalService")) as ch,
        pytest.raises(grpc.RpcError),
    ):
        _upsert(pb_grpc.RetrievalServiceStub(ch), "first version of the policy", timeout=0.3)
    stopping = threading.Thread(target=stack.stop)
    stopping.start()
    stopping.join(RELEASE_AFTER_SECONDS)
    held.release.set()
    stopping.join(30)
    assert held.landed.wait(30)
    assert held.outcomes == ["written"]
    assert not stopping.is_alive()


def test_an_upsert_landing_after_the_deadline_is_counted_as_written_and_deadline_exceeded(
    tmp_path: Path, held: Held
) -> None:
    stack = _stack(tmp_path)
    try:
        with grpc.insecure_channel(stack.address("RetrievalService")) as ch:
            with pytest.raises(grpc.RpcError) as info:
                _upsert(pb_grpc.RetrievalServiceStub(ch), "first version of the policy", 0.3)
            assert info.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
            held.release.set()
            assert held.landed.wait(30)
            call = {"grpc_method": "UpsertDocuments"}
            deadline = time.monotonic() + 10
            while True:  # the handler ends on the server once the write has landed
                text = scrape(stack.metrics_port("RetrievalService"))
                if metric_value(text, "grpc_server_handled_total", call) or (
                    time.monotonic() > deadline
                ):
                    break
                time.sleep(0.05)
    finally:
        stack.stop()
    handled = {"grpc_method": "UpsertDocuments", "grpc_code": "DEADLINE_EXCEEDED"}
    assert metric_value(text, "grpc_server_handled_total", handled) == 1
    assert metric_value(text, "grpc_server_handled_total", {"grpc_code": "CANCELLED"}) == 0
    written = {"op": "upsert", "outcome": "written"}
    assert metric_value(text, "candor_retrieval_documents_total", written) == 1
    assert metric_value(text, "candor_retrieval_chunks_written_total") >= 1
    assert metric_value(text, "candor_retrieval_ingest_seconds_count") == 1
