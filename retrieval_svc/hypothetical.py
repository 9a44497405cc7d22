"""Hypothetical questions: an LLM writes the questions a passage answers, indexed beside it.

A user's wording often matches a question better than the passage that answers it, so each
question becomes a chunk of its own (source kind HYPOTHETICAL_QUESTION) with its passage's
parent id: fusion's collapse-to-parent folds a question hit onto its passage, and a question is
never returned as evidence (``fusion.collapse_by_parent`` and ``KnowledgeBase.retrieve``).

Ids are deterministic (``<parent>q<n>``) and every chunk of the write carries one generation
that covers the document *and* its questions (:func:`with_questions`). So the questions are
staged and published with the rest of the document, a re-ingest replaces them, and questions
of an older version (or of a version written without questions) never outlive it.

Best-effort: a passage whose questions cannot be generated is written without them and
:func:`generate_questions` reports the error; the document itself is still ingested.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final, Protocol

from candor.chat import (
    INTERNAL,
    MALFORMED_RESPONSE,
    TIMEOUT,
    ChatClient,
    UpstreamError,
    clean_reply,
    client_for,
)
from candor.common.v1 import evidence_pb2
from candor.settings import HypotheticalSettings
from retrieval_svc.ingest import Passage, SourceDocument, passages
from retrieval_svc.stores.base import HYPOTHETICAL_QUESTION, Chunk

log = logging.getLogger("candor.retrieval.hypothetical")

CURATED_ANSWER: Final = int(evidence_pb2.SOURCE_KIND_CURATED_ANSWER)
MAX_QUESTION_CHARS: Final = 300
SYSTEM_PROMPT: Final = (
    "You write the questions a knowledge-base passage answers, as its readers would ask them.\n"
    "- Write at most {count} questions, each answered by the passage alone.\n"
    "- Write in the passage's language; keep names, numbers and product terms as written.\n"
    "- One question per entry, no numbering, no answers.\n"
    'Reply with JSON only: {{"questions": ["...", "..."]}}'
)


class QuestionGenerator(Protocol):
    """Writes questions for one passage within ``timeout_seconds``; raises UpstreamError."""

    @property
    def name(self) -> str: ...

    async def questions(
        self, title: str, passage: Passage, timeout_seconds: float
    ) -> list[str]: ...

    async def aclose(self) -> None: ...


@dataclass(frozen=True)
class PassageQuestions:
    """One passage's questions, or why it has none."""

    parent_id: str
    questions: tuple[str, ...]
    error: str = ""
    """Empty when generation worked (even if it found no question)."""
    latency_seconds: float = 0.0


def parse_questions(reply: str, limit: int) -> list[str]:
    """``{"questions": [...]}`` as at most ``limit`` distinct one-line questions."""
    try:
        data = json.loads(clean_reply(reply))
    except ValueError as exc:
        raise UpstreamError(MALFORMED_RESPONSE, f"questions reply is not JSON: {exc}") from exc
    items = data.get("questions") if isinstance(data, dict) else None
    if not isinstance(items, list) or not all(isinstance(q, str) for q in items):
        raise UpstreamError(MALFORMED_RESPONSE, 'questions reply has no "questions" string list')
    out: list[str] = []
    for item in items:
        question = " ".join(item.split())[:MAX_QUESTION_CHARS]
        if question and question.casefold() not in {q.casefold() for q in out}:
            out.append(question)
    return out[:limit]


class LLMQuestionGenerator:
    """The question prompt over an OpenAI-compatible ``/chat/completions`` (JSON mode)."""

    name = "openai_compat"

    def __init__(
        self,
        chat: ChatClient,
        *,
        per_passage: int = 3,
        max_output_tokens: int = 256,
        max_passage_chars: int = 6000,
    ) -> None:
        self._chat = chat
        self.per_passage = per_passage
        self._max_tokens, self._max_chars = max_output_tokens, max_passage_chars

    async def aclose(self) -> None:
        await self._chat.aclose()

    def messages(self, title: str, passage: Passage) -> list[dict[str, str]]:
        text = passage.text[: self._max_chars]
        heading = " / ".join(part for part in (title, passage.heading) if part)
        return [
            {"role": "system", "content": SYSTEM_PROMPT.format(count=self.per_passage)},
            {"role": "user", "content": f"Title: {heading}\n\nPassage:\n{text}"},
        ]

    async def questions(self, title: str, passage: Passage, timeout_seconds: float) -> list[str]:
        reply = await self._chat.complete(
            self.messages(title, passage),
            timeout_seconds=timeout_seconds,
            max_tokens=self._max_tokens,
            json_mode=True,
        )
        return parse_questions(reply, self.per_passage)


async def generate_questions(
    generator: QuestionGenerator,
    work: Sequence[tuple[str, Passage]],
    *,
    timeout_seconds: Callable[[], float],
    concurrency: int,
) -> list[PassageQuestions]:
    """Questions for each ``(title, passage)``, in order; never raises for a passage.

    ``timeout_seconds`` is asked as each passage starts, so a shrinking caller deadline is
    honoured (0 or less: the passage fails with TIMEOUT without a request).
    """
    gate = asyncio.Semaphore(concurrency)

    async def one(title: str, passage: Passage) -> PassageQuestions:
        async with gate:
            started = time.perf_counter()
            budget = timeout_seconds()
            try:
                if budget <= 0:
                    raise UpstreamError(TIMEOUT, "no time left for question generation")
                async with asyncio.timeout(budget):
                    found = await generator.questions(title, passage, budget)
            except UpstreamError as exc:
                error = str(exc)
            except TimeoutError:
                error = f"{TIMEOUT}: no questions within {budget:.3g} s"
            except Exception as exc:  # one passage must not fail the document
                log.exception("question generator raised")
                error = f"{INTERNAL}: {type(exc).__name__}: {exc}"
            else:
                latency = time.perf_counter() - started
                return PassageQuestions(passage.parent_id, tuple(found), "", latency)
            latency = time.perf_counter() - started
            log.warning(
                "no hypothetical questions for a passage",
                extra={"parent_id": passage.parent_id, "error": error},
            )
            return PassageQuestions(passage.parent_id, (), error, latency)

    return list(await asyncio.gather(*(one(title, p) for title, p in work)))


@dataclass(frozen=True)
class DocumentQuestions:
    """Questions for a batch of documents, in the shape ``KnowledgeBase.upsert`` takes."""

    questions: dict[str, dict[str, tuple[str, ...]]]
    """Document id -> parent id -> questions."""
    errors: dict[str, str]
    """Document id -> why some of its passages have no questions."""
    passages: list[PassageQuestions]
    """Every passage's result, for metrics."""


def wants_questions(doc: SourceDocument) -> bool:
    """Curated answers are a question and its answer already: they get none."""
    return not doc.question and doc.source_kind != CURATED_ANSWER


async def questions_for_documents(
    generator: QuestionGenerator,
    documents: Sequence[SourceDocument],
    *,
    timeout_seconds: Callable[[], float],
    concurrency: int,
) -> DocumentQuestions:
    """:func:`generate_questions` over every passage of the documents that want questions."""
    work = [
        (doc.document_id, doc.title, passage)
        for doc in documents
        if wants_questions(doc)
        for passage in passages(doc)
    ]
    results = await generate_questions(
        generator,
        [(title, passage) for _, title, passage in work],
        timeout_seconds=timeout_seconds,
        concurrency=concurrency,
    )
    questions: dict[str, dict[str, tuple[str, ...]]] = {}
    failed: dict[str, list[str]] = {}
    for (doc_id, _, _), result in zip(work, results, strict=True):
        if result.error:
            failed.setdefault(doc_id, []).append(result.error)
        elif result.questions:
            questions.setdefault(doc_id, {})[result.parent_id] = result.questions
    total = {doc_id: sum(1 for d, _, _ in work if d == doc_id) for doc_id in failed}
    errors = {
        doc_id: f"{len(errs)} of {total[doc_id]} passages have no questions: {errs[0]}"
        for doc_id, errs in failed.items()
    }
    return DocumentQuestions(questions, errors, results)


def question_id(parent_id: str, n: int) -> str:
    return f"{parent_id}q{n}"


def with_questions(chunks: Sequence[Chunk], questions: Mapping[str, Sequence[str]]) -> list[Chunk]:
    """The document's chunks plus one chunk per question of each parent, all of them stamped
    with one generation derived from the document's and the questions' text.

    ``chunks`` are one document's, as ``chunk_document`` made them; parents missing from
    ``chunks`` are ignored. Without questions the chunks are returned unchanged.
    """
    if not chunks:
        return []
    first = chunks[0]
    parents = {c.parent_id for c in chunks}
    extra = [
        dataclasses.replace(
            first,
            chunk_id=question_id(parent, n),
            parent_id=parent,
            text=question,
            source_kind=HYPOTHETICAL_QUESTION,
        )
        for parent, texts in sorted(questions.items())
        if parent in parents
        for n, question in enumerate(texts)
    ]
    if not extra:
        return list(chunks)
    h = hashlib.sha256(first.generation.encode())
    for c in extra:
        h.update(f"\x00{c.chunk_id}\x00{c.text}".encode())
    generation = h.hexdigest()[:16]
    return [dataclasses.replace(c, generation=generation) for c in [*chunks, *extra]]


def build_question_generator(settings: HypotheticalSettings) -> LLMQuestionGenerator | None:
    """The configured generator, or None when ``retrieval.hypothetical.backend`` is none."""
    chat = client_for(settings, what="question generation endpoint")
    if chat is None:
        return None
    return LLMQuestionGenerator(
        chat,
        per_passage=settings.questions_per_passage,
        max_output_tokens=settings.max_output_tokens,
        max_passage_chars=settings.max_passage_chars,
    )
