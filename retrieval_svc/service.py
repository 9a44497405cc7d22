"""RetrievalService: a thin gRPC adapter over the knowledge base."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

import grpc
import numpy as np
import numpy.typing as npt
from google.protobuf.duration_pb2 import Duration
from prometheus_client import Counter, Gauge, Histogram

from candor.common.v1 import evidence_pb2
from candor.retrieval.v1 import retrieval_pb2 as pb
from candor.retrieval.v1 import retrieval_pb2_grpc as pb_grpc
from candor.runtime.auth import Authenticator
from candor.runtime.deadline import DeadlineExhausted, caller_bound, downstream_timeout
from candor.runtime.errors import FieldViolations, abort_info, abort_invalid
from candor.runtime.message_size import trim_to_fit
from candor.runtime.metrics import LATENCY_BUCKETS, ServiceMetrics
from candor.runtime.server import ServiceSpec
from candor.runtime.validation import (
    MAX_CURATED_CHARS,
    MAX_TITLE_CHARS,
    MAX_URI_CHARS,
    check_document_ids,
    check_enum,
    check_length,
    check_one_line,
    check_query,
    check_tenant,
    check_weight,
)
from candor.settings import Settings
from candor.text import is_blank
from candor.throttle import Throttle
from retrieval_svc.embed.factory import open_embedders
from retrieval_svc.forward import WriteForwarder
from retrieval_svc.hypothetical import (
    DocumentQuestions,
    QuestionGenerator,
    build_question_generator,
    questions_for_documents,
)
from retrieval_svc.ingest import SourceDocument, passages, sections
from retrieval_svc.knowledge_base import (
    ArmOutcome,
    DocumentWrite,
    KnowledgeBase,
    PreparedWrite,
    RetrieveParams,
    check_collection,
    record_collection,
)
from retrieval_svc.rewrite import (
    FALLBACK_ERROR,
    FALLBACK_REJECTED,
    FALLBACK_TIMEOUT,
    REWRITTEN,
    QueryRewriter,
    Rewrite,
    build_rewriter,
    rewrite_query,
)
from retrieval_svc.stores.base import DENSE
from retrieval_svc.stores.data_dir import check_start_space, lock_embedded, opening_data_dir
from retrieval_svc.stores.edge import EdgeDenseStore
from retrieval_svc.stores.factory import open_dense, open_keyword
from retrieval_svc.write_order import ArrivalOrder

log = logging.getLogger("candor.retrieval")
_T = TypeVar("_T")
SERVICE_NAME = pb.DESCRIPTOR.services_by_name["RetrievalService"].full_name
_MODES = {
    pb.RETRIEVAL_MODE_UNSPECIFIED: "hybrid",
    pb.RETRIEVAL_MODE_HYBRID: "hybrid",
    pb.RETRIEVAL_MODE_DENSE: "dense",
    pb.RETRIEVAL_MODE_KEYWORD: "keyword",
}
_STATES = {
    "ok": pb.ARM_STATE_OK,
    "timeout": pb.ARM_STATE_TIMEOUT,
    "deadline": pb.ARM_STATE_TIMEOUT,
    "error": pb.ARM_STATE_ERROR,
    "skipped": pb.ARM_STATE_SKIPPED,
}
_OUTCOMES = {
    "written": pb.DOCUMENT_OUTCOME_WRITTEN,
    "deleted": pb.DOCUMENT_OUTCOME_DELETED,
    "not_found": pb.DOCUMENT_OUTCOME_NOT_FOUND,
    "failed": pb.DOCUMENT_OUTCOME_FAILED,
}
_REWRITES = {
    REWRITTEN: pb.QUERY_REWRITE_REWRITTEN,
    FALLBACK_TIMEOUT: pb.QUERY_REWRITE_FALLBACK_TIMEOUT,
    FALLBACK_ERROR: pb.QUERY_REWRITE_FALLBACK_ERROR,
    FALLBACK_REJECTED: pb.QUERY_REWRITE_FALLBACK_REJECTED,
}
MAX_POOL = 200
OUT_OF_STEP_LOG_SECONDS = 60.0
REWRITE_DEADLINE_SHARE = 0.5
"""The rewrite may use at most this share of what the caller's deadline leaves: the search
that follows needs the rest."""


class RetrievalMetrics:
    def __init__(self, metrics: ServiceMetrics) -> None:
        self.arm_seconds = Histogram(
            "candor_retrieval_arm_seconds",
            "Latency of one retrieval arm.",
            ["arm"],
            buckets=LATENCY_BUCKETS,
            registry=metrics.registry,
        )
        self.arm_outcomes = Counter(
            "candor_retrieval_arm_outcomes_total",
            "Arm results by state.",
            ["arm", "state"],
            registry=metrics.registry,
        )
        self.documents = Counter(
            "candor_retrieval_documents_total",
            "Document writes by outcome.",
            ["op", "outcome"],
            registry=metrics.registry,
        )
        self.chunks_written = Counter(
            "candor_retrieval_chunks_written_total",
            "Chunks written to both stores.",
            registry=metrics.registry,
        )
        self.ingest_seconds = Histogram(
            "candor_retrieval_ingest_seconds",
            "Time to chunk, embed and write one call's documents.",
            buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120),
            registry=metrics.registry,
        )
        self.candidates = Histogram(
            "candor_retrieval_candidates",
            "Fused candidates returned per Retrieve.",
            buckets=(0, 1, 2, 3, 5, 10, 20, 50, 100),
            registry=metrics.registry,
        )
        self.empty = Counter(
            "candor_retrieval_empty_results_total",
            "Retrieve calls that found nothing.",
            registry=metrics.registry,
        )
        self.out_of_step = Counter(
            "candor_retrieval_out_of_step_total",
            "Documents a Retrieve met at a version the keyword store does not hold now (the "
            "stores out of step): read at the keyword store's version, or left out.",
            registry=metrics.registry,
        )
        self.index_chunks = Gauge(
            "candor_retrieval_index_chunks",
            "Chunks held by each store (all tenants), reported by the pod that writes.",
            ["arm"],
            registry=metrics.registry,
        )
        self.rewrites = Counter(
            "candor_retrieval_rewrite_total",
            "Query rewrites by outcome (rewritten, or why the raw query was searched).",
            ["outcome"],
            registry=metrics.registry,
        )
        self.rewrite_seconds = Histogram(
            "candor_retrieval_rewrite_seconds",
            "Time spent on the query rewrite, fallbacks included.",
            buckets=LATENCY_BUCKETS,
            registry=metrics.registry,
        )
        self.question_passages = Counter(
            "candor_retrieval_hypothetical_passages_total",
            "Passages sent for hypothetical questions, by outcome (generated or failed).",
            ["outcome"],
            registry=metrics.registry,
        )
        self.questions_dropped = Counter(
            "candor_retrieval_hypothetical_questions_dropped_total",
            "Hypothetical questions not indexed because they are not about their passage.",
            registry=metrics.registry,
        )
        self.question_seconds = Histogram(
            "candor_retrieval_hypothetical_seconds",
            "Time to generate one passage's hypothetical questions.",
            buckets=(0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60),
            registry=metrics.registry,
        )

    def index_size(self, sizes: dict[str, int]) -> None:
        """What each store holds now: set at start-up and after every write that lands."""
        for arm, n in sizes.items():
            self.index_chunks.labels(arm).set(n)


def _duration(seconds: float) -> Duration:
    d = Duration()
    d.FromNanoseconds(int(seconds * 1e9))
    return d


def no_arm_answered(ran: Sequence[ArmOutcome]) -> tuple[grpc.StatusCode, str, str] | None:
    """The error for a search no arm that ran answered (code, reason, detail), else None.

    UNAVAILABLE when the stores failed; DEADLINE_EXCEEDED when the caller's deadline cut an
    arm short, so a tight deadline is not reported (and alerted on) as a store outage."""
    if not ran or any(a.state == "ok" for a in ran):
        return None
    states = ", ".join(f"{a.arm}={a.state}({a.detail})" for a in ran)
    if any(a.state == "deadline" for a in ran):
        return (
            grpc.StatusCode.DEADLINE_EXCEEDED,
            "DEADLINE",
            f"the caller's deadline ran out before any arm answered: {states}",
        )
    return grpc.StatusCode.UNAVAILABLE, "ARMS_UNAVAILABLE", f"no retrieval arm answered: {states}"


def _budget(context: grpc.aio.ServicerContext, cap: float, share: float = 1.0) -> float:
    """``cap``, or ``share`` of what the caller's deadline leaves if less; 0 when none is left."""
    remaining = context.time_remaining()
    if remaining is not None:
        cap = min(cap, remaining * share)
    try:
        return downstream_timeout(context, cap)
    except DeadlineExhausted:
        return 0.0


class RetrievalServicer(pb_grpc.RetrievalServiceServicer):
    def __init__(
        self,
        kb: KnowledgeBase,
        settings: Settings,
        auth: Authenticator,
        metrics: RetrievalMetrics,
        rewriter: QueryRewriter | None = None,
        question_generator: QuestionGenerator | None = None,
    ) -> None:
        self._kb, self._s, self._auth, self._m = kb, settings.retrieval, auth, metrics
        self._max_message_bytes = settings.retrieval.server.max_message_bytes
        self._rewriter, self._questions = rewriter, question_generator
        # One writer at a time keeps the two stores' commits in the same order.
        self._write_lock = asyncio.Lock()
        self._store_writes = ThreadPoolExecutor(max_workers=1, thread_name_prefix="store-write")
        self._arrivals = ArrivalOrder()
        self._out_of_step_logged = Throttle(OUT_OF_STEP_LOG_SECONDS)
        self._writer = (
            WriteForwarder(self._s.writer_target, self._max_message_bytes)
            if self._s.writer_target
            else None
        )

    def _log_out_of_step(self, documents: Iterable[tuple[str, str]]) -> None:
        # Which documents is in the log, not a metric label; once per document a minute, so a
        # write left half done does not log on every read of its document.
        for tenant, document_id in sorted(documents):
            if self._out_of_step_logged.due((tenant, document_id)):
                log.warning(
                    "a document is out of step between the stores; read at the keyword "
                    "store's version, or left out: a write is landing, or one failed part-way "
                    "(candor verify)",
                    extra={"tenant": tenant, "document_id": document_id},
                )

    async def _write(self, write: Callable[[], _T], landed: Callable[[_T], None]) -> _T:
        """Run a store write in a thread under the write lock, which it holds until the write
        has landed even when the caller cancels (or its deadline passes) first; ``landed``
        records the write's result either way.

        The thread cannot be stopped. Released on cancellation, the lock would let a later
        upsert or delete commit first and then be overwritten by this one: a lost update, or a
        deleted document back in the index. The cancelled call's write still lands (and is
        counted: it is in the index); upserts and deletes are idempotent, so the caller's retry
        is safe.
        """
        async with self._write_lock:
            # Its own thread: with the loop's default threads busy elsewhere, the lock holder
            # would wait for one while every other write waits for the lock.
            landing = asyncio.get_running_loop().run_in_executor(self._store_writes, write)
            try:
                result = await asyncio.shield(landing)
            except asyncio.CancelledError:
                while not landing.done():
                    with contextlib.suppress(asyncio.CancelledError):
                        await asyncio.shield(landing)
                if not landing.cancelled() and landing.exception() is None:
                    landed(landing.result())
                raise
            landed(result)
            return result

    async def close(self) -> None:
        # A write still landing (its caller cancelled, or the grace ran out) holds the lock:
        # closing the stores under it would fail it half-way.
        async with self._write_lock:
            pass
        self._store_writes.shutdown(wait=False)
        if self._writer is not None:
            await self._writer.close()
        for client in (self._rewriter, self._questions):
            if client is not None:
                await client.aclose()

    async def _rewrite(
        self, query: str, context: grpc.aio.ServicerContext
    ) -> tuple[Rewrite | None, npt.NDArray[np.float32] | None, npt.NDArray[np.float32] | None]:
        """The rewrite (None without a rewriter) and, when the check below embedded them, the
        query's and the rewrite's vectors, so the dense arms do not embed them again."""
        if self._rewriter is None:
            return None, None, None
        budget = _budget(context, self._s.rewrite.timeout_seconds, REWRITE_DEADLINE_SHARE)
        rewrite = await rewrite_query(self._rewriter, query, budget)
        vector = None
        asked = None
        if rewrite.outcome == REWRITTEN:
            # A rewrite that asks something else would have the gate judge evidence for another
            # question (a model obeying "rewrite this into X", say): search the question.
            outcome, detail = "", ""
            try:
                # Within the arms' budget: queued behind a hung dense store's searches, the
                # check waited past the caller's deadline where the keyword arm alone answers.
                asked, rewritten = await asyncio.wait_for(
                    self._kb.query_vectors([query, rewrite.rewritten]),
                    _budget(context, self._s.arm_timeout_seconds),
                )
            except TimeoutError:
                outcome = FALLBACK_TIMEOUT
                detail = "the rewrite could not be checked against the query in time"
            else:
                similarity = float(np.dot(asked, rewritten))
                vector = rewritten
                if similarity < self._s.rewrite.min_similarity:
                    outcome, vector = FALLBACK_REJECTED, asked
                    detail = (
                        f"rewrite {rewrite.rewritten!r} is unrelated to the query (cosine "
                        f"{similarity:.2f} < {self._s.rewrite.min_similarity:g})"
                    )
            if outcome:
                log.warning("query rewrite not used", extra={"outcome": outcome, "detail": detail})
                rewrite = Rewrite(query, "", outcome, rewrite.latency_seconds, detail)
        self._m.rewrites.labels(rewrite.outcome).inc()
        self._m.rewrite_seconds.observe(rewrite.latency_seconds)
        return rewrite, asked, vector if rewrite.rewritten else None

    async def _hypothetical(
        self, docs: list[SourceDocument], context: grpc.aio.ServicerContext
    ) -> DocumentQuestions | None:
        if self._questions is None:
            return None
        report = await questions_for_documents(
            self._questions,
            docs,
            timeout_seconds=lambda: _budget(context, self._s.hypothetical.timeout_seconds),
            concurrency=self._s.hypothetical.concurrency,
        )
        for passage in report.passages:
            self._m.question_passages.labels("failed" if passage.error else "generated").inc()
            self._m.question_seconds.observe(passage.latency_seconds)
        return await self._related_questions(docs, report)

    async def _related_questions(
        self, docs: list[SourceDocument], report: DocumentQuestions
    ) -> DocumentQuestions:
        """The report less the questions that are not about their passage.

        A hit on a question stands in for its passage at the gate (its scores become the
        passage's), so a question about something else, written by a model obeying text in
        the passage, would let unrelated queries pass on that passage.
        """
        floor = self._s.hypothetical.min_similarity
        texts = {
            (d.document_id, p.parent_id): f"{p.heading}\n{p.text}".strip()
            for d in docs
            for p in passages(d)
        }
        kept: dict[str, dict[str, tuple[str, ...]]] = {}
        errors = dict(report.errors)
        for doc_id, by_parent in report.questions.items():
            for parent, questions in by_parent.items():
                passage = texts.get((doc_id, parent), "")
                sims = await self._kb.similarities(passage, questions)
                good = tuple(q for q, sim in zip(questions, sims, strict=True) if sim >= floor)
                if len(good) < len(questions):
                    dropped = len(questions) - len(good)
                    self._m.questions_dropped.inc(dropped)
                    note = f"{dropped} question(s) not about passage {parent} were dropped"
                    errors[doc_id] = f"{errors[doc_id]}; {note}" if errors.get(doc_id) else note
                if good:
                    kept.setdefault(doc_id, {})[parent] = good
        return DocumentQuestions(kept, errors, report.passages)

    async def Retrieve(
        self, request: pb.RetrieveRequest, context: grpc.aio.ServicerContext
    ) -> pb.RetrieveResponse:
        caller = await self._auth.authenticate(context)
        v = FieldViolations()
        check_tenant(request.tenant, v)
        check_query(request.query, self._s.max_query_chars, v)
        if request.candidate_pool > MAX_POOL:
            v.add("candidate_pool", f"must be at most {MAX_POOL}")
        if request.top_k > MAX_POOL:
            v.add("top_k", f"must be at most {MAX_POOL}")
        check_weight(request.dense_weight, v, "dense_weight")
        check_weight(request.keyword_weight, v, "keyword_weight")
        check_enum(request.mode, pb.RetrievalMode.DESCRIPTOR, v, "mode")
        check_enum(request.fusion, pb.FusionMethod.DESCRIPTOR, v, "fusion")
        if v:
            await abort_invalid(context, v)
        await self._auth.authorize(
            context, caller, request.tenant, operator=request.include_unpublished
        )
        rewrite, asked, rewritten = await self._rewrite(request.query, context)
        weighted = request.fusion == pb.FUSION_METHOD_WEIGHTED_SCORE
        params = RetrieveParams(
            tenant=request.tenant,
            # The rewrite widens the search; the query itself scores what is found.
            query=request.query,
            expansion=rewrite.rewritten
            if rewrite and rewrite.rewritten.casefold() != request.query.strip().casefold()
            else "",
            expansion_vector=rewritten,
            mode=_MODES.get(request.mode, "hybrid"),
            candidate_pool=request.candidate_pool or self._s.candidate_pool,
            top_k=request.top_k or self._s.top_k,
            fusion="weighted" if weighted else "rrf",
            include_unpublished=request.include_unpublished,
            dense_weight=request.dense_weight or (self._s.dense_weight if weighted else 1.0),
            keyword_weight=request.keyword_weight or (self._s.keyword_weight if weighted else 1.0),
            rrf_k=self._s.rrf_k,
            query_vector=asked,
        )
        try:
            arm_timeout = downstream_timeout(context, self._s.arm_timeout_seconds)
            time_left = downstream_timeout(context, math.inf)
        except DeadlineExhausted as exc:
            await abort_info(context, grpc.StatusCode.DEADLINE_EXCEEDED, "DEADLINE", str(exc))
        bound = caller_bound(arm_timeout, self._s.arm_timeout_seconds)
        result = await self._kb.retrieve(params, arm_timeout, bound, time_left)
        ran = [a for a in result.arms if a.state != "skipped"]
        for arm in result.arms:
            self._m.arm_outcomes.labels(arm.arm, arm.state).inc()
            if arm.state != "skipped":
                self._m.arm_seconds.labels(arm.arm).observe(arm.latency_seconds)
        self._m.candidates.observe(len(result.candidates))
        if not result.candidates:
            self._m.empty.inc()
        if result.out_of_step:
            self._m.out_of_step.inc(len(result.out_of_step))
            self._log_out_of_step(result.out_of_step)
        if (failure := no_arm_answered(ran)) is not None:
            await abort_info(context, *failure)
        reply = pb.RetrieveResponse(
            candidates=[
                pb.Candidate(
                    chunk_id=c.chunk.chunk_id,
                    parent_id=c.chunk.parent_id,
                    document_id=c.chunk.document_id,
                    text=c.chunk.text,
                    title=c.chunk.title,
                    source_kind=c.chunk.source_kind,  # type: ignore[arg-type]
                    dense=pb.ArmHit(rank=c.dense.rank, raw_score=c.dense.score)
                    if c.dense
                    else None,
                    keyword=pb.ArmHit(rank=c.keyword.rank, raw_score=c.keyword.score)
                    if c.keyword
                    else None,
                    fused_score=c.fused_score,
                    fused_rank=c.fused_rank,
                    in_both=c.in_both,
                    uri=c.chunk.uri,
                )
                for c in result.candidates
            ],
            arms=[
                pb.ArmStatus(
                    arm=pb.ARM_DENSE if a.arm == DENSE else pb.ARM_KEYWORD,
                    state=_STATES[a.state],
                    latency=_duration(a.latency_seconds),
                    hits=len(a.hits),
                    detail=a.detail,
                )
                for a in result.arms
            ],
            degraded=result.degraded,
            embedder=self._kb.embedder.name,
            fusion=pb.FUSION_METHOD_WEIGHTED_SCORE if weighted else pb.FUSION_METHOD_RRF,
            rewritten_query=rewrite.rewritten if rewrite else "",
            query_rewrite=_REWRITES[rewrite.outcome] if rewrite else pb.QUERY_REWRITE_DISABLED,
        )
        # top_k curated answers with long titles and uris can outgrow the send limit: the
        # caller gets the best candidates that fit and the count left out, not a transport error.
        reply.candidates_trimmed = trim_to_fit(reply, "candidates", self._max_message_bytes)
        if reply.candidates_trimmed:
            log.warning(
                "candidates trimmed to fit the message limit",
                extra={"trimmed": reply.candidates_trimmed, "kept": len(reply.candidates)},
            )
        return reply

    async def UpsertDocuments(
        self, request: pb.UpsertDocumentsRequest, context: grpc.aio.ServicerContext
    ) -> pb.UpsertDocumentsResponse:
        if self._writer is not None:
            return await self._writer.upsert(request, context)
        caller = await self._auth.authenticate(context)
        v = FieldViolations()
        check_tenant(request.tenant, v)
        if not request.documents:
            v.add("documents", "at least one document is required")
        if len(request.documents) > self._s.max_documents_per_call:
            v.add("documents", f"at most {self._s.max_documents_per_call} per call")
        check_document_ids(
            [d.document_id for d in request.documents], v, "documents[{}].document_id", new=True
        )
        for i, d in enumerate(request.documents):
            field = f"documents[{i}]"
            if is_blank(d.text):
                v.add(f"{field}.text", "required and must not be blank")
            elif len(d.text) > self._s.max_document_chars:
                v.add(f"{field}.text", f"at most {self._s.max_document_chars} characters")
            elif d.source_kind != evidence_pb2.SOURCE_KIND_CURATED_ANSWER and not sections(d.text):
                v.add(f"{field}.text", "has no text to index outside its markdown headings")
            check_length(d.title, MAX_TITLE_CHARS, v, f"{field}.title")
            check_one_line(d.title, v, f"{field}.title")
            check_length(d.uri, MAX_URI_CHARS, v, f"{field}.uri")
            check_one_line(d.uri, v, f"{field}.uri")
            check_enum(d.source_kind, evidence_pb2.SourceKind.DESCRIPTOR, v, f"{field}.source_kind")
            if d.source_kind == evidence_pb2.SOURCE_KIND_CURATED_ANSWER:
                # A curated answer is one chunk, question and answer together: bounded like one.
                if is_blank(d.question):
                    v.add(f"{field}.question", "required for a curated answer")
                else:
                    check_length(d.question, self._s.max_query_chars, v, f"{field}.question")
                    # Stored as the first line of the answer's chunk, which is how the gate
                    # reads it back: a question over two lines was half a question there.
                    check_one_line(d.question, v, f"{field}.question")
                check_length(d.text, MAX_CURATED_CHARS, v, f"{field}.text")
            elif d.question:
                v.add(f"{field}.question", "only for a curated answer (SOURCE_KIND_CURATED_ANSWER)")
            if d.source_kind == evidence_pb2.SOURCE_KIND_HYPOTHETICAL_QUESTION:
                v.add(
                    f"documents[{i}].source_kind",
                    "hypothetical questions are generated by the service, not sent",
                )
        if request.hypothetical_questions and self._questions is None:
            v.add(
                "hypothetical_questions",
                "not available: the question generator is not configured "
                "(retrieval.hypothetical.backend is none)",
            )
        if v:
            await abort_invalid(context, v)
        await self._auth.authorize(context, caller, request.tenant)
        docs = [
            SourceDocument(
                tenant=request.tenant,
                document_id=d.document_id,
                title=d.title,
                text=d.text,
                source_kind=d.source_kind or evidence_pb2.SOURCE_KIND_DOCUMENT,
                uri=d.uri,
                question=d.question,
            )
            for d in request.documents
        ]
        start = time.perf_counter()
        async with self._arrivals.slot(request.tenant, [d.document_id for d in docs]) as turn:
            # Before the write lock: the LLM calls can take seconds and need no lock.
            report = (
                await self._hypothetical(docs, context) if request.hypothetical_questions else None
            )
            # Chunked and embedded before its turn too: writes embed side by side, and the
            # lock is held only while the stores are written.
            prepared = await self._kb.prepare(docs, report.questions if report else None)
            await turn()
            results = await self._upsert(prepared, start)
        return pb.UpsertDocumentsResponse(
            results=[
                pb.DocumentResult(
                    document_id=r.document_id,
                    outcome=_OUTCOMES[r.outcome],
                    chunks=r.chunks,
                    error=r.error,
                    question_chunks=r.question_chunks,
                    question_error=report.errors.get(r.document_id, "") if report else "",
                )
                for r in results
            ]
        )

    async def _upsert(self, prepared: PreparedWrite, start: float) -> list[DocumentWrite]:
        def upserted(landed: tuple[list[DocumentWrite], dict[str, int]]) -> None:
            results, sizes = landed
            self._m.ingest_seconds.observe(time.perf_counter() - start)
            self._m.index_size(sizes)
            for r in results:
                self._m.documents.labels("upsert", r.outcome).inc()
                self._m.chunks_written.inc(r.chunks)

        results, _ = await self._write(
            lambda: (self._kb.write(prepared), self._kb.sizes()), upserted
        )
        return results

    async def DeleteDocuments(
        self, request: pb.DeleteDocumentsRequest, context: grpc.aio.ServicerContext
    ) -> pb.DeleteDocumentsResponse:
        if self._writer is not None:
            return await self._writer.delete(request, context)
        caller = await self._auth.authenticate(context)
        v = FieldViolations()
        check_tenant(request.tenant, v)
        if not request.document_ids:
            v.add("document_ids", "at least one document id is required")
        if len(request.document_ids) > self._s.max_documents_per_call:
            v.add("document_ids", f"at most {self._s.max_documents_per_call} per call")
        check_document_ids(list(request.document_ids), v, "document_ids[{}]")
        if v:
            await abort_invalid(context, v)
        await self._auth.authorize(context, caller, request.tenant)
        ids = list(request.document_ids)

        def deleted(landed: tuple[list[DocumentWrite], dict[str, int]]) -> None:
            results, sizes = landed
            self._m.index_size(sizes)
            for r in results:
                self._m.documents.labels("delete", r.outcome).inc()

        async with self._arrivals.slot(request.tenant, ids) as turn:
            await turn()
            results, _ = await self._write(
                lambda: (self._kb.delete(request.tenant, ids), self._kb.sizes()), deleted
            )
        return pb.DeleteDocumentsResponse(
            results=[
                pb.DocumentResult(
                    document_id=r.document_id,
                    outcome=_OUTCOMES[r.outcome],
                    chunks=r.chunks,
                    error=r.error,
                )
                for r in results
            ]
        )


def _open_knowledge_base(settings: Settings, data_dir: Path) -> KnowledgeBase:
    embedder, query_embedder = open_embedders(settings.retrieval)
    with opening_data_dir(settings.retrieval):
        check_collection(data_dir, embedder)
        dense = open_dense(settings.retrieval, embedder.dim, defer=True, embedder=embedder.name)
        try:
            keyword = open_keyword(settings.retrieval, defer=True)
            record_collection(data_dir, embedder)
        except BaseException:
            dense.close()
            raise
        if isinstance(dense, EdgeDenseStore):
            started = time.perf_counter()
            if dense.build_index_if_needed(settings.retrieval.edge_index_threshold):
                log.info(
                    "built the dense HNSW index",
                    extra={"seconds": round(time.perf_counter() - started, 1)},
                )
    return KnowledgeBase(
        embedder,
        dense,
        keyword,
        settings.retrieval.chunk_tokens,
        settings.retrieval.chunk_overlap_tokens,
        settings.retrieval.embed_batch_size,
        query_embedder=query_embedder,
    )


def build_retrieval(settings: Settings) -> ServiceSpec:
    """Open the embedded stores and return the service ready to boot."""
    data_dir = Path(settings.retrieval.data_dir)
    with opening_data_dir(settings.retrieval):
        lock = lock_embedded(settings.retrieval)
    if lock is not None and lock.unclean_pid:
        log.warning(
            "the previous run on this data dir (pid %s) did not shut down cleanly: the stores "
            "may have drifted; stop the server and run candor verify",
            lock.unclean_pid,
            extra={"data_dir": str(data_dir)},
        )
    kb: KnowledgeBase | None = None
    try:
        check_start_space(settings.retrieval)
        kb = _open_knowledge_base(settings, data_dir)
        metrics = ServiceMetrics()
        retrieval_metrics = RetrievalMetrics(metrics)
        # A restarted pod reports the index it opened, not nothing until the next upsert. A
        # reading pod reports nothing: it never writes, so its start-up count would go stale
        # while the writer's changes, and dashboards take the max over pods.
        if not settings.retrieval.writer_target:
            retrieval_metrics.index_size(kb.sizes())
        servicer = RetrievalServicer(
            kb,
            settings,
            Authenticator(settings.auth, SERVICE_NAME, metrics.registry),
            retrieval_metrics,
            rewriter=build_rewriter(settings.retrieval.rewrite),
            question_generator=build_question_generator(settings.retrieval.hypothetical),
        )
    except BaseException:
        # An LLM key file that cannot be read fails here, after the stores opened.
        if kb is not None:
            kb.close()
        if lock is not None:
            lock.release(clean=False)
        raise
    opened = kb

    async def on_stop() -> None:
        await servicer.close()
        await asyncio.to_thread(opened.close)
        if lock is not None:
            # A start that failed (a port taken, here or in the stack) served nothing: an
            # earlier unclean run's mark stays.
            # A clean stop clears only its own run's mark: an earlier unclean run's stays
            # for a verify that finds the stores in step (this run may not have repaired it).
            lock.release(clean=not spec.failed_start and not lock.unclean_pid)

    spec = ServiceSpec(
        name=SERVICE_NAME,
        register=lambda server: pb_grpc.add_RetrievalServiceServicer_to_server(servicer, server),
        settings=settings.retrieval.server,
        metrics=metrics,
        on_stop=on_stop,
    )
    return spec


__all__ = ["SERVICE_NAME", "RetrievalServicer", "build_retrieval"]
