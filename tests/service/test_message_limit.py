"""A Retrieve or a decision within the documented bounds never fails at the transport for its
size: the lowest-ranked candidates or evidence that do not fit the send limit are left out and
counted."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest

from candor.cli.stack import start_stack
from candor.common.v1 import evidence_pb2
from candor.gate.v1 import gate_pb2
from candor.retrieval.v1 import retrieval_pb2 as pb
from candor.retrieval.v1 import retrieval_pb2_grpc as pb_grpc
from candor.runtime.message_size import TRAILER_BYTES, trim_to_fit
from candor.runtime.validation import MAX_CURATED_CHARS, MAX_TITLE_CHARS, MAX_URI_CHARS
from candor.settings import load_settings
from tests.helpers import Stack, ask, stack_env

LIMIT = 256 * 1024
DOCS = 20


def _curated(i: int) -> pb.Document:
    # Each one as large as a curated answer may be: ~25 KB on the wire, so 20 exceed LIMIT.
    return pb.Document(
        document_id=f"faq-{i}",
        title=f"Tyres {i} " + "t" * (MAX_TITLE_CHARS - 10),
        text=f"Tyre answer {i}. " + "Road tyres run at 80 to 100 psi. " * 600,
        uri="https://example.com/" + "u" * (MAX_URI_CHARS - 20),
        source_kind=evidence_pb2.SOURCE_KIND_CURATED_ANSWER,
        # One question for all: each is then a curated answer to the question the test asks.
        question="What pressure for tyres?",
    )


def test_candidates_over_the_send_limit_are_trimmed_and_counted(tmp_path: Path) -> None:
    assert len(_curated(0).text) <= MAX_CURATED_CHARS
    env = stack_env(str(tmp_path / "data"), CANDOR_RETRIEVAL__SERVER__MAX_MESSAGE_BYTES=LIMIT)
    stack = Stack(lambda: start_stack(load_settings(env=env), "retrieval"))
    try:
        with grpc.insecure_channel(stack.address("RetrievalService")) as ch:
            stub = pb_grpc.RetrievalServiceStub(ch)
            for first in range(0, DOCS, 5):  # each call within the receive limit too
                stub.UpsertDocuments(
                    pb.UpsertDocumentsRequest(
                        tenant="t", documents=[_curated(i) for i in range(first, first + 5)]
                    )
                )
            reply = stub.Retrieve(
                pb.RetrieveRequest(
                    tenant="t", query="tyre pressure", top_k=DOCS, candidate_pool=DOCS
                )
            )
    finally:
        stack.stop()
    assert reply.candidates_trimmed > 0
    assert len(reply.candidates) + reply.candidates_trimmed == DOCS
    assert [c.fused_rank for c in reply.candidates] == list(range(1, len(reply.candidates) + 1))
    assert reply.ByteSize() <= LIMIT


def test_trim_to_fit_keeps_as_many_leading_items_as_fit() -> None:
    reply = pb.RetrieveResponse(
        candidates=[pb.Candidate(chunk_id=f"c{i}", text="x" * (100 + i)) for i in range(50)]
    )
    full = reply.ByteSize()
    assert trim_to_fit(reply, "candidates", full + TRAILER_BYTES) == 0
    limit = full // 2
    dropped = trim_to_fit(reply, "candidates", limit)
    assert len(reply.candidates) == 50 - dropped
    assert reply.ByteSize() <= limit - TRAILER_BYTES
    reply.candidates.add(chunk_id="extra", text="x" * (100 + len(reply.candidates)))
    assert reply.ByteSize() > limit - TRAILER_BYTES


@pytest.mark.parametrize("service", ["GATE", "GENERATOR"])
def test_gate_evidence_over_the_send_limit_is_trimmed_before_the_token_is_signed(
    tmp_path: Path, service: str
) -> None:
    # The gate's own send limit, or the generator's receive limit (the evidence is sent on
    # to it): a decision that fits one but not the other failed the answer.
    policy = tmp_path / "policy.yaml"
    # Every curated answer admitted (a bound of 0), so that 20 of them outgrow the limit.
    policy.write_text(
        'version: "wide-1"\npolicy: seed000\nmax_evidence: 20\ncurated_min_cosine: 0\n'
    )
    limit = {f"CANDOR_{service}__SERVER__MAX_MESSAGE_BYTES": LIMIT}
    env = stack_env(
        str(tmp_path / "data"),
        **limit,
        CANDOR_GATE__POLICY_PATH=str(policy),
        CANDOR_RETRIEVAL__TOP_K=DOCS,
    )
    stack = Stack(lambda: start_stack(load_settings(env=env)))
    try:
        with grpc.insecure_channel(stack.address("RetrievalService")) as ch:
            stub = pb_grpc.RetrievalServiceStub(ch)
            for first in range(0, DOCS, 5):
                stub.UpsertDocuments(
                    pb.UpsertDocumentsRequest(
                        tenant="t", documents=[_curated(i) for i in range(first, first + 5)]
                    )
                )
        events = ask(stack, "What pressure for tyres?", timeout=30)
    finally:
        stack.stop()
    decision = events[0].decision
    assert decision.outcome == gate_pb2.OUTCOME_PASS, decision.reason_detail
    assert decision.evidence_trimmed > 0
    assert len(decision.evidence) + decision.evidence_trimmed == DOCS
    assert decision.ByteSize() <= LIMIT
    # The token was signed over the evidence sent: the generator accepts it.
    assert events[-1].HasField("final")
