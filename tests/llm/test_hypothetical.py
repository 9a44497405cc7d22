"""retrieval_svc.hypothetical: question generation, its parsing, and the chunks it adds."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import httpx
import pytest

from candor.chat import MALFORMED_RESPONSE, ChatClient, UpstreamError
from retrieval_svc.hypothetical import (
    LLMQuestionGenerator,
    generate_questions,
    parse_questions,
    questions_for_documents,
    with_questions,
)
from retrieval_svc.ingest import Passage, SourceDocument, chunk_document, passages
from retrieval_svc.stores.base import HYPOTHETICAL_QUESTION
from tests.rerank.fakes import Recorder, oa_completion, oa_error

DOC = SourceDocument(
    "acme",
    "refunds",
    "Refunds",
    "## Voiding\n\nVoid an unused label within 30 days.\n\n## Timing\n\nRefunds take 5 days.",
    1,
)


def generator(rec: Recorder, **kw: Any) -> LLMQuestionGenerator:
    chat = ChatClient("http://llm.test/v1", "small", transport=httpx.MockTransport(rec))
    return LLMQuestionGenerator(chat, **kw)


def questions(*qs: str) -> httpx.Response:
    return oa_completion(json.dumps({"questions": list(qs)}))


async def test_one_json_mode_request_per_passage_with_the_passage_in_it() -> None:
    rec = Recorder(questions("How long can I void a label?", "Can I void a used label?"))
    passage = passages(DOC)[0]
    found = await generator(rec, per_passage=2).questions(DOC.title, passage, 2.0)
    assert found == ["How long can I void a label?", "Can I void a used label?"]
    body = rec.json()
    assert body["response_format"] == {"type": "json_object"} and body["max_tokens"] == 256
    system, user = body["messages"]
    assert "at most 2 questions" in system["content"] and '"questions"' in system["content"]
    assert user["content"] == (
        "Title: Refunds / Voiding\n\nPassage:\nVoid an unused label within 30 days."
    )


async def test_a_long_passage_is_cut_before_it_is_sent() -> None:
    rec = Recorder(questions("Q?"))
    long = Passage("d#p0", "", "word " * 5000)
    await generator(rec, max_passage_chars=100).questions("", long, 2.0)
    assert len(rec.json()["messages"][1]["content"]) < 100 + 40


def test_parse_questions_cleans_dedupes_and_caps() -> None:
    reply = json.dumps(
        {"questions": ["  How\nlong? ", "how long?", "", "Why?", "When?", "x" * 900]}
    )
    assert parse_questions(reply, 3) == ["How long?", "Why?", "When?"]
    assert parse_questions("```json\n" + json.dumps({"questions": ["A?"]}) + "\n```", 3) == ["A?"]
    assert parse_questions('{"questions": []}', 3) == []


@pytest.mark.parametrize(
    "reply", ["not json", '["A?"]', '{"questions": "A?"}', '{"questions": [1, 2]}', "{}"]
)
def test_parse_questions_rejects_the_wrong_shape(reply: str) -> None:
    with pytest.raises(UpstreamError) as err:
        parse_questions(reply, 3)
    assert err.value.reason == MALFORMED_RESPONSE


async def test_a_failing_passage_does_not_fail_the_others() -> None:
    class Flaky:
        name = "flaky"

        async def questions(
            self, title: str, passage: Passage, timeout_seconds: float
        ) -> list[str]:
            if passage.parent_id.endswith("#p1"):
                raise UpstreamError("UPSTREAM_UNAVAILABLE", "HTTP 503")
            if passage.parent_id.endswith("#p2"):
                await asyncio.sleep(30)
            return [f"What about {passage.heading}?"]

        async def aclose(self) -> None:
            pass

    work = [("T", Passage(f"d#p{i}", f"h{i}", "text")) for i in range(3)]
    started = time.perf_counter()
    results = await generate_questions(Flaky(), work, timeout_seconds=lambda: 0.2, concurrency=3)
    assert time.perf_counter() - started < 0.6
    assert [r.parent_id for r in results] == ["d#p0", "d#p1", "d#p2"]
    assert results[0].questions == ("What about h0?",) and results[0].error == ""
    assert results[1].questions == () and "HTTP 503" in results[1].error
    assert results[2].questions == () and results[2].error.startswith("TIMEOUT")


async def test_documents_are_grouped_and_curated_answers_get_no_questions() -> None:
    rec = Recorder(questions("Q1?"), oa_error(500, "boom"), questions("Q3?"))
    curated = SourceDocument("acme", "faq", "FAQ", "30 days.", 2, question="How long?")
    report = await questions_for_documents(
        generator(rec), [DOC, curated], timeout_seconds=lambda: 2.0, concurrency=1
    )
    assert len(rec.requests) == 2  # the two passages of DOC, none for the curated answer
    assert report.questions == {"refunds": {"refunds#p0": ("Q1?",)}}
    assert report.errors["refunds"].startswith("1 of 2 passages have no questions: ")
    assert "HTTP 500" in report.errors["refunds"]
    assert [p.parent_id for p in report.passages] == ["refunds#p0", "refunds#p1"]


async def test_no_time_left_fails_the_passage_without_a_request() -> None:
    rec = Recorder(questions("Q?"))
    [result] = await generate_questions(
        generator(rec), [("", passages(DOC)[0])], timeout_seconds=lambda: 0.0, concurrency=1
    )
    assert rec.requests == [] and result.error.startswith("TIMEOUT")


def test_question_chunks_point_at_their_parent_and_share_a_new_generation() -> None:
    chunks = chunk_document(DOC, 80, 20)
    out = with_questions(chunks, {"refunds#p1": ["How long do refunds take?", "Why 5 days?"]})
    assert [c.chunk_id for c in out] == [
        "refunds#p0c0",
        "refunds#p1c0",
        "refunds#p1q0",
        "refunds#p1q1",
    ]
    q = out[2]
    assert (q.parent_id, q.document_id, q.tenant, q.title) == (
        "refunds#p1",
        "refunds",
        "acme",
        "Refunds",
    )
    assert q.text == "How long do refunds take?" and q.source_kind == HYPOTHETICAL_QUESTION
    assert q.is_question and not out[0].is_question
    [generation] = {c.generation for c in out}
    assert generation != chunks[0].generation  # a write without questions replaces these
    other = with_questions(chunks, {"refunds#p1": ["How long do refunds take?", "Why?"]})
    assert other[0].generation != generation  # other questions: another version
    assert (
        with_questions(chunks, {"refunds#p1": ["How long do refunds take?", "Why 5 days?"]}) == out
    )


def test_no_questions_leave_the_chunks_as_they_are() -> None:
    chunks = chunk_document(DOC, 80, 20)
    assert with_questions(chunks, {}) == chunks
    assert with_questions(chunks, {"refunds#p0": []}) == chunks
    assert with_questions(chunks, {"elsewhere#p0": ["Q?"]}) == chunks
