"""The knowledge base: ingestion into both stores and parallel, deadline-bounded retrieval."""

from __future__ import annotations

import asyncio
import dataclasses
import errno
import itertools
import json
import logging
import math
import re
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import numpy as np
import numpy.typing as npt

from candor.files import write_atomically
from retrieval_svc import fusion
from retrieval_svc.embed.base import Embedder
from retrieval_svc.embed.batcher import QueryBatcher
from retrieval_svc.embed.turns import EmbedTurns
from retrieval_svc.fusion import RRF_K
from retrieval_svc.hypothetical import with_questions
from retrieval_svc.ingest import SourceDocument, child_id, chunk_document, embedding_text
from retrieval_svc.stores.base import (
    DENSE,
    KEYWORD,
    Chunk,
    DenseStore,
    Hit,
    KeywordStore,
    StoreReadOnly,
    best_first,
)
from retrieval_svc.stores.data_dir import DataDirError, LowDiskSpace

log = logging.getLogger("candor.retrieval")


class EmbedderMismatch(DataDirError):
    """The collection on disk was built by another embedder."""


@dataclass(frozen=True)
class ArmOutcome:
    arm: str
    state: str
    """ok, timeout, error or skipped; ``deadline`` when the arm ran out of time the caller's
    deadline cut short (the store was not slow: it was given less than its own timeout)."""
    hits: list[Hit]
    latency_seconds: float
    detail: str = ""


@dataclass(frozen=True)
class RetrievalResult:
    candidates: list[fusion.FusedCandidate]
    arms: list[ArmOutcome]
    out_of_step: frozenset[tuple[str, str]] = frozenset()
    """(tenant, document id) met at a version the keyword store does not hold now (at two
    versions, ``fusion.stale_versions``; or in the dense arm alone, ``_held_by_keyword``):
    read at the keyword store's version, or left out."""

    @property
    def degraded(self) -> bool:
        return any(a.state in ("timeout", "deadline", "error") for a in self.arms)


@dataclass(frozen=True)
class DocumentWrite:
    document_id: str
    outcome: str
    """written, deleted, not_found or failed."""
    chunks: int = 0
    error: str = ""
    question_chunks: int = 0
    """Hypothetical-question chunks among ``chunks``."""


@dataclass(frozen=True)
class Planned:
    """One document of a write: its chunks and their embeddings."""

    document: SourceDocument
    chunks: list[Chunk]
    vectors: npt.NDArray[np.float32]


@dataclass(frozen=True)
class PreparedWrite:
    """A write chunked and embedded (``KnowledgeBase.prepare``), ready for the stores."""

    documents: tuple[SourceDocument, ...]
    """As the caller sent them: results come back in this order."""
    planned: tuple[Planned, ...]
    empty: dict[str, DocumentWrite]
    """Documents with nothing to index, failed already."""


def _written(doc: SourceDocument, chunks: Sequence[Chunk]) -> DocumentWrite:
    questions = sum(c.is_question for c in chunks)
    return DocumentWrite(doc.document_id, "written", len(chunks), question_chunks=questions)


@dataclass(frozen=True)
class RetrieveParams:
    tenant: str
    query: str
    mode: str = "hybrid"
    candidate_pool: int = 30
    top_k: int = 10
    fusion: str = "rrf"
    include_unpublished: bool = False
    dense_weight: float = 1.0
    keyword_weight: float = 1.0
    rrf_k: int = RRF_K
    query_vector: npt.NDArray[np.float32] | None = field(default=None, compare=False)
    """``query``'s embedding when the caller already has it (the rewrite check embeds it)."""
    expansion: str = ""
    """An LLM's rewrite of ``query``, searched too, for recall only: every candidate is
    scored against ``query`` (see ``KnowledgeBase._judged``)."""
    expansion_vector: npt.NDArray[np.float32] | None = field(default=None, compare=False)


class CollectionRecordUnreadable(DataDirError):
    """``collection.json`` exists but does not say which embedder built the collection."""


COLLECTION_FILE = "collection.json"


def _recorded_collection(data_dir: Path) -> dict[str, object] | None:
    """What ``record_collection`` recorded for ``data_dir`` (embedder, dim), if anything."""
    marker = data_dir / COLLECTION_FILE
    if not marker.exists():
        return None
    try:
        have = json.loads(marker.read_bytes())
        if not isinstance(have, dict):
            raise ValueError(f"not a JSON object: {have!r}")
    except (OSError, ValueError) as exc:
        raise CollectionRecordUnreadable(
            f"{marker} is unreadable ({type(exc).__name__}: {exc}); it records which embedder "
            'built the stores, as {"embedder": "<name>", "dim": <size>}: restore it, or delete '
            "it if retrieval.embedder is the embedder that built them (the next start records "
            "it again; a store of another vector size is refused)"
        ) from exc
    return have


def check_collection(data_dir: Path, embedder: Embedder) -> None:
    """Refuse a collection built by a different embedder than ``embedder``."""
    want = {"embedder": embedder.name, "dim": embedder.dim}
    have = _recorded_collection(data_dir)
    if have is not None and have != want:
        raise EmbedderMismatch(
            f"{data_dir} was built by {have}, but the configured embedder is {want}; "
            "re-index into a new data_dir or configure the original embedder"
        )


def record_collection(data_dir: Path, embedder: Embedder) -> None:
    """Record ``embedder`` as the collection's, unless one is recorded already. Call it once
    the stores have opened at its size: a record they refused would be a false one."""
    if _recorded_collection(data_dir) is None:
        # A half-written record would stop every later start: the old file or the new one.
        write_atomically(
            data_dir / COLLECTION_FILE,
            json.dumps({"embedder": embedder.name, "dim": embedder.dim}).encode(),
        )


def collection_dim(data_dir: Path) -> int | None:
    """The vector size the embedded collection was built with, if it records one."""
    dim = (_recorded_collection(data_dir) or {}).get("dim")
    return dim if isinstance(dim, int) else None


RETRY_DELAYS = (0.05, 0.2, 0.5)
#: Errors of the disk or filesystem under a store, never of one document in a write.
_ENVIRONMENT_ERRNOS = frozenset(
    {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EIO, errno.EFBIG, errno.EACCES, errno.EPERM}
)
# tantivy reports them as text: "... (os error 28)", "Os { code: 28, kind: StorageFull ...".
_OS_ERROR = re.compile(r"os error (\d+)|Os \{ code: (\d+)")


def environment_failure(exc: BaseException) -> bool:
    """Whether a store write failed for a reason no document causes (a full or read-only
    disk, an I/O error, a dead index writer, an index blocked for writes): retrying, alone or
    document by document, only repeats it."""
    for seen in _causes(exc):
        if isinstance(seen, LowDiskSpace | StoreReadOnly):
            return True
        if isinstance(seen, OSError) and seen.errno in _ENVIRONMENT_ERRNOS:
            return True
        for match in _OS_ERROR.finditer(str(seen)):
            if int(match.group(1) or match.group(2)) in _ENVIRONMENT_ERRNOS:
                return True
    return False


def _causes(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` and what it was raised from or during, nearest first."""
    seen: BaseException | None = exc
    while seen is not None:
        yield seen
        seen = seen.__cause__ or seen.__context__


def store_timed_out(exc: BaseException) -> bool:
    """Whether a store call ran out of its client's timeout (OpenSearch's 30 s, Qdrant's 5 s):
    the store is slow, and trying again at once waits as long again."""
    for seen in _causes(exc):
        # By name: each client library has its own (ConnectionTimeout, ReadTimeout, ...).
        if isinstance(seen, TimeoutError) or type(seen).__name__.endswith("Timeout"):
            return True
        if isinstance(seen, grpc.RpcError) and seen.code() == grpc.StatusCode.DEADLINE_EXCEEDED:  # type: ignore[attr-defined]
            return True
    return False


def _retry(write: Callable[[], None]) -> None:
    """Retry a store write a few times; writes are idempotent, so repeating one is safe.
    Not after a timeout: the caller decides what a slow store costs (see ``upsert``)."""
    for delay in RETRY_DELAYS:
        try:
            write()
            return
        except Exception as exc:
            if environment_failure(exc) or store_timed_out(exc):
                raise
            log.warning("store write failed, retrying", extra={"error": repr(exc), "delay": delay})
            time.sleep(delay)
    write()


class KnowledgeBase:
    def __init__(
        self,
        embedder: Embedder,
        dense: DenseStore,
        keyword: KeywordStore,
        chunk_tokens: int = 80,
        overlap_tokens: int = 20,
        batch_size: int = 32,
        query_embedder: Embedder | None = None,
    ) -> None:
        self.embedder = embedder
        self._dense, self._keyword = dense, keyword
        self._chunk_tokens, self._overlap = chunk_tokens, overlap_tokens
        self._batch = batch_size
        # One pool per arm: a keyword store that hangs holds its threads until its client times
        # out, and in a shared pool that starved the dense arm too (both arms down, not one).
        self._dense_pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="dense-arm")
        self._keyword_pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="keyword-arm")
        # Some embedders (Cohere) embed queries differently from documents.
        self._queries = QueryBatcher(query_embedder or embedder, self._dense_pool)
        self._ingest_pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="ingest-embed")
        self._embed_turns = EmbedTurns(slots=2)
        # Chunking a large document takes its own thread, not a turn at the embedder.
        self._chunk_pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="ingest-chunk")

    def upsert(
        self,
        documents: Sequence[SourceDocument],
        questions: Mapping[str, Mapping[str, Sequence[str]]] | None = None,
    ) -> list[DocumentWrite]:
        """Write documents to both stores: ``prepare`` then ``write``. For tools and tests
        outside an event loop; the service awaits ``prepare`` itself."""
        return self.write(asyncio.run(self.prepare(documents, questions)))

    async def prepare(
        self,
        documents: Sequence[SourceDocument],
        questions: Mapping[str, Mapping[str, Sequence[str]]] | None = None,
    ) -> PreparedWrite:
        """Chunk and embed ``documents``: the slow part of a write, which reads and changes no
        store, so writes run it side by side (a writer holding the write lock while it embedded
        a 4,000-chunk document kept another tenant's one-line upsert waiting 77 s).
        ``questions`` (document id -> parent id -> questions) adds hypothetical-question
        chunks, written and published with their document.

        A coroutine, not a thread: a write waiting for its embeddings holds no thread (six
        large uploads held all of the event loop's default threads, and a small write queued
        behind them again), and a cancelled write stops sending batches."""
        loop = asyncio.get_running_loop()
        chunked, empty = await loop.run_in_executor(
            self._chunk_pool, self._chunk_all, documents, questions or {}
        )
        vectors = await self._embed([c for _, chunks in chunked for c in chunks])
        planned, at = [], 0
        for doc, chunks in chunked:
            planned.append(Planned(doc, chunks, vectors[at : at + len(chunks)]))
            at += len(chunks)
        return PreparedWrite(tuple(documents), tuple(planned), empty)

    def _chunk_all(
        self,
        documents: Sequence[SourceDocument],
        questions: Mapping[str, Mapping[str, Sequence[str]]],
    ) -> tuple[list[tuple[SourceDocument, list[Chunk]]], dict[str, DocumentWrite]]:
        chunked: list[tuple[SourceDocument, list[Chunk]]] = []
        empty: dict[str, DocumentWrite] = {}
        for doc in documents:
            chunks = chunk_document(doc, self._chunk_tokens, self._overlap)
            chunks = with_questions(chunks, questions.get(doc.document_id, {}))
            if chunks:
                chunked.append((doc, chunks))
            else:
                empty[doc.document_id] = DocumentWrite(
                    doc.document_id, "failed", 0, "document has no text to index"
                )
        return chunked, empty

    def write(self, prepared: PreparedWrite) -> list[DocumentWrite]:
        """Write prepared documents to both stores; a failure is reported per document.

        The whole call is written as one batch (one keyword commit, one dense flush). If the
        batch fails, each document is retried alone so one bad document cannot fail the
        others, unless no document can be the cause (a store unreachable, its disk full or
        read-only): then every document fails at once with that cause.
        """
        planned = prepared.planned
        written: dict[str, DocumentWrite] = {}
        try:
            self._write(planned)
            written = {p.document.document_id: _written(p.document, p.chunks) for p in planned}
        except Exception as exc:
            cause = f"{type(exc).__name__}: {exc}"
            if environment_failure(exc):
                why = cause
            elif down := self._unreachable():
                why = f"{down}: {cause}"
            else:
                why = ""
            if why:
                # One document at a time would repeat the same failure, retries and timeouts
                # included, once per document while holding the write lock (minutes for a
                # 200-document call): fail them all now, each with the cause; the caller
                # retries when the store (or its disk) is back.
                log.error("batch upsert failed: %s", why, extra={"error": repr(exc)})
                written = {
                    p.document.document_id: DocumentWrite(p.document.document_id, "failed", 0, why)
                    for p in planned
                }
            else:
                log.exception("batch upsert failed; writing documents one at a time")
                written = self._upsert_each(planned)
        return [
            prepared.empty.get(d.document_id) or written[d.document_id] for d in prepared.documents
        ]

    def _upsert_each(self, planned: Sequence[Planned]) -> dict[str, DocumentWrite]:
        """Each document alone, so one bad document fails alone; after the first that times
        out too, the rest fail with its cause unwritten. A slow store (one that still answers
        a count) timed out every document in turn, retries included, while holding the write
        lock: at OpenSearch's 30 s, 34 minutes for 16 documents (an outside probe)."""
        written: dict[str, DocumentWrite] = {}
        slow = ""
        for one in planned:
            doc, chunks = one.document, one.chunks
            if slow:
                written[doc.document_id] = DocumentWrite(doc.document_id, "failed", 0, slow)
                continue
            try:
                self._write([one])
            except Exception as exc:
                log.exception("upsert failed", extra={"document_id": doc.document_id})
                why = f"{type(exc).__name__}: {exc}"
                written[doc.document_id] = DocumentWrite(doc.document_id, "failed", 0, why)
                if store_timed_out(exc):
                    slow = f"not written: a store timed out on this call ({why})"
                continue
            written[doc.document_id] = _written(doc, chunks)
        return written

    def _unreachable(self) -> str:
        """Which store cannot answer at all (a cheap count), or "" when both can."""
        for arm, store in ((DENSE, self._dense), (KEYWORD, self._keyword)):
            try:
                store.count()
            except Exception as exc:
                return f"the {arm} store is unreachable ({type(exc).__name__})"
        return ""

    async def _embed(self, chunks: Sequence[Chunk]) -> npt.NDArray[np.float32]:
        texts = [embedding_text(c) for c in chunks]
        batches = [
            texts[start : start + self._batch] for start in range(0, len(texts), self._batch)
        ]
        left = itertools.count(len(batches), -1)
        queue = iter(batches)

        def send(batch: list[str]) -> asyncio.Task[npt.NDArray[np.float32]]:
            return asyncio.ensure_future(self._embed_batch(batch, next(left)))

        # Two batches at a time, each waiting for its turn (EmbedTurns): a write alone keeps
        # both cores embedding; writes side by side take turns, the smallest first.
        running = deque(send(b) for b in itertools.islice(queue, 2))
        parts = []
        try:
            while running:
                parts.append(await running[0])
                running.popleft()
                if (following := next(queue, None)) is not None:
                    running.append(send(following))
        finally:
            for batch in running:  # cancelled: batches still waiting for a turn never run
                batch.cancel()
        return np.concatenate(parts) if parts else np.zeros((0, self.embedder.dim), np.float32)

    async def _embed_batch(self, batch: list[str], batches_left: int) -> npt.NDArray[np.float32]:
        async with self._embed_turns.turn(batches_left):
            running = asyncio.get_running_loop().run_in_executor(
                self._ingest_pool, self.embedder.embed, batch
            )
            try:
                return await asyncio.shield(running)
            except asyncio.CancelledError:
                # The turn is the pool thread's: keep it until the thread is free.
                await asyncio.wait([running])
                raise

    def _write(self, planned: Sequence[Planned]) -> None:
        # Order matters: dense chunks land staged (invisible); the keyword commit swaps the
        # documents atomically; publishing flips the dense generation and drops the old one.
        # A failure part-way leaves the previous version visible in both arms, and a retry
        # lands on the same ids.
        all_chunks = [c for p in planned for c in p.chunks]
        vectors = (
            np.concatenate([p.vectors for p in planned])
            if planned
            else np.zeros((0, self.embedder.dim), np.float32)
        )
        generations = [
            (p.document.tenant, p.document.document_id, p.chunks[0].generation) for p in planned
        ]
        try:
            _retry(lambda: self._dense.upsert(all_chunks, vectors))
            _retry(
                lambda: self._keyword.replace_many(
                    [(p.document.tenant, p.document.document_id, p.chunks) for p in planned]
                )
            )
        except Exception:
            self._discard_staged(planned)
            raise
        # Past the keyword commit the staged generation is the current one: a failure to
        # publish it is left for `candor verify --repair`, which republishes it.
        try:
            _retry(lambda: self._dense.publish_many(generations))
        except Exception as exc:
            log.error(
                "documents reported failed are written to the keyword store but not published "
                "in the dense store: retry the upsert or run candor verify --repair",
                extra={"documents": len(generations), "error": repr(exc)},
            )
            raise

    def _discard_staged(self, planned: Sequence[Planned]) -> None:
        """Best effort: a failed write leaves no staged dense chunks behind (published ones
        are never touched). What stays is drift that `candor verify` lists and repairs.

        A generation is a content hash, so a retry of a write whose publish failed stages the
        very chunks the keyword store already committed: discarding them would leave the
        document in one arm until re-ingested. Those are kept (verify --repair publishes
        them), and so is everything when the keyword store cannot say what it holds.
        """
        try:
            committed = self._committed_generations(planned)
        except Exception as exc:
            log.warning(
                "cannot tell which staged dense chunks a failed write may remove; kept for "
                "candor verify",
                extra={"documents": len(planned), "error": repr(exc)},
            )
            return
        generations = [
            version
            for p in planned
            if (version := (p.document.tenant, p.document.document_id, p.chunks[0].generation))
            not in committed
        ]
        if not generations:
            return
        try:
            self._dense.discard_staged(generations)
        except Exception as exc:
            log.warning(
                "cannot remove a failed write's staged dense chunks; candor verify lists them",
                extra={"documents": len(generations), "error": repr(exc)},
            )

    def _committed_generations(self, planned: Sequence[Planned]) -> set[tuple[str, str, str]]:
        """(tenant, document, generation) the keyword store holds among ``planned``'s, asked
        by each document's first chunk id (ids are positional, so it is there if any is)."""
        by_tenant: dict[str, list[Planned]] = {}
        for p in planned:
            by_tenant.setdefault(p.document.tenant, []).append(p)
        held: set[tuple[str, str, str]] = set()
        for tenant, docs in by_tenant.items():
            for start in range(0, len(docs), 500):
                batch = docs[start : start + 500]
                first = {(p.chunks[0].chunk_id, p.chunks[0].generation): p for p in batch}
                held.update(
                    (tenant, first[v].document.document_id, v[1])
                    for v in self._keyword.holds(tenant, list(first))
                )
        return held

    def delete(self, tenant: str, document_ids: Sequence[str]) -> list[DocumentWrite]:
        results: list[DocumentWrite] = []
        for i, doc_id in enumerate(document_ids):
            try:
                # Either store may hold chunks a failed earlier delete left behind: a retry that
                # finds them only in the keyword store has still deleted the document. The
                # keyword store goes first: blocked at OpenSearch's disk flood stage, it failed
                # after the dense copy was gone, leaving the document in one arm.
                n = max(self._keyword.delete(tenant, doc_id), self._dense.delete(tenant, doc_id))
            except Exception as exc:
                log.exception("delete failed", extra={"document_id": doc_id})
                why = f"{type(exc).__name__}: {exc}"
                if environment_failure(exc):
                    # No document causes a full disk or a blocked index: the rest fail now,
                    # not one store timeout each while holding the write lock.
                    results += [DocumentWrite(d, "failed", 0, why) for d in document_ids[i:]]
                    break
                results.append(DocumentWrite(doc_id, "failed", 0, why))
                continue
            results.append(DocumentWrite(doc_id, "deleted" if n else "not_found", n))
        return results

    def sizes(self) -> dict[str, int]:
        """Chunks held by each store; a store that cannot answer is left out."""
        out: dict[str, int] = {}
        for arm, store in ((DENSE, self._dense), (KEYWORD, self._keyword)):
            try:
                out[arm] = store.count()
            except Exception as exc:
                log.warning("cannot count store", extra={"arm": arm, "error": repr(exc)})
        return out

    async def query_vectors(self, texts: Sequence[str]) -> list[npt.NDArray[np.float32]]:
        """The query embedder's (normalised) vectors for ``texts``, batched."""
        return list(await asyncio.gather(*(self._queries.embed(t) for t in texts)))

    async def similarities(self, anchor: str, texts: Sequence[str]) -> list[float]:
        """Cosine of each text's query embedding with ``anchor``'s (embedded once)."""
        first, *rest = await self.query_vectors([anchor, *texts])
        return [float(np.dot(first, v)) for v in rest]

    async def _dense_arm(self, p: RetrieveParams) -> list[Hit]:
        vector = (
            p.query_vector if p.query_vector is not None else await self._queries.embed(p.query)
        )
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(
            self._dense_pool,
            self._dense.search,
            p.tenant,
            vector,
            p.candidate_pool,
            p.include_unpublished,
        )

    async def _keyword_arm(self, p: RetrieveParams) -> list[Hit]:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(
            self._keyword_pool, self._keyword.search, p.tenant, p.query, p.candidate_pool
        )

    async def _run_arm(
        self,
        arm: str,
        fn: Callable[[RetrieveParams], Awaitable[list[Hit]]],
        p: RetrieveParams,
        budget: float,
        caller_bound: bool = False,
    ) -> ArmOutcome:
        start = time.perf_counter()
        try:
            hits = await asyncio.wait_for(fn(p), budget)
        except TimeoutError:
            if caller_bound:
                detail = f"> {budget:.3f}s, all the caller's deadline left"
                return ArmOutcome(arm, "deadline", [], time.perf_counter() - start, detail)
            return ArmOutcome(arm, "timeout", [], time.perf_counter() - start, f"> {budget:.3f}s")
        except Exception as exc:
            log.warning("arm failed", extra={"arm": arm, "error": repr(exc)})
            return ArmOutcome(arm, "error", [], time.perf_counter() - start, type(exc).__name__)
        return ArmOutcome(arm, "ok", hits, time.perf_counter() - start)

    async def retrieve(
        self,
        p: RetrieveParams,
        arm_timeout: float,
        caller_bound: bool = False,
        time_left: float = math.inf,
    ) -> RetrievalResult:
        """Run the arms in parallel, each under its own deadline; a failed arm degrades.

        ``caller_bound``: ``arm_timeout`` is what the caller's deadline left, below the arms'
        own timeout, so an arm that runs out reports ``deadline``, not a slow store.
        ``time_left``: seconds until the caller's deadline (less a margin to answer), which
        nothing here outlives."""

        async def skipped(arm: str) -> ArmOutcome:
            return ArmOutcome(arm, "skipped", [], 0.0)

        started = time.perf_counter()

        dense_task = (
            self._run_arm(DENSE, self._dense_arm, p, arm_timeout, caller_bound)
            if p.mode in ("hybrid", "dense")
            else skipped(DENSE)
        )
        keyword_task = (
            self._run_arm(KEYWORD, self._keyword_arm, p, arm_timeout, caller_bound)
            if p.mode in ("hybrid", "keyword")
            else skipped(KEYWORD)
        )
        extra: list[Awaitable[ArmOutcome]] = []
        if p.expansion:
            wider = dataclasses.replace(p, query=p.expansion, query_vector=p.expansion_vector)
            if p.mode in ("hybrid", "dense"):
                extra.append(
                    self._run_arm(DENSE, self._dense_arm, wider, arm_timeout, caller_bound)
                )
            if p.mode in ("hybrid", "keyword"):
                extra.append(
                    self._run_arm(KEYWORD, self._keyword_arm, wider, arm_timeout, caller_bound)
                )
        dense_out, keyword_out, *expanded = await asyncio.gather(dense_task, keyword_task, *extra)
        outs = [dense_out, keyword_out, *expanded]
        # An operator asking for unpublished chunks asked to see every version.
        stale = (
            set()
            if p.include_unpublished
            else fusion.stale_versions(
                [h for o in outs if o.arm == DENSE for h in o.hits],
                [h for o in outs if o.arm == KEYWORD for h in o.hits],
            )
        )
        if stale:
            dense_out, keyword_out, *expanded = [
                dataclasses.replace(o, hits=fusion.without_versions(o.hits, stale)) for o in outs
            ]
        for out in expanded:
            if out.state != "ok":
                log.warning("expansion arm failed", extra={"arm": out.arm, "state": out.state})
        more = {
            arm: [h for o in expanded if o.arm == arm for h in o.hits] for arm in (DENSE, KEYWORD)
        }
        dense_ranked = fusion.collapse_by_parent([*dense_out.hits, *more[DENSE]])
        keyword_ranked = fusion.collapse_by_parent([*keyword_out.hits, *more[KEYWORD]])
        # Every candidate first, top_k after question hits without a passage are dropped: cut
        # before, a reply held fewer than top_k where more were found.
        every = max(len(dense_ranked) + len(keyword_ranked), 1)
        if p.fusion == "weighted":
            fused = fusion.weighted_score(
                dense_ranked, keyword_ranked, every, p.dense_weight, p.keyword_weight
            )
        else:
            fused = fusion.rrf(
                dense_ranked, keyword_ranked, every, p.rrf_k, p.dense_weight, p.keyword_weight
            )
        # Only from a keyword store that answered (on a hung one the lookup took a second full
        # budget, past the caller's deadline); within an arm's budget and what the caller's
        # deadline leaves, not what the arms left: a dense arm that timed out left it none.
        readable = keyword_out.state == "ok" or p.mode == "dense"
        left = min(arm_timeout, time_left - (time.perf_counter() - started))
        fused, out_of_step = await self._passages_for_questions(
            p.tenant, fused, left if readable else 0.0
        )
        if p.expansion:
            fused = await self._judged(p, fused, dense_out, keyword_out)
        out_of_step |= {(tenant, doc) for tenant, doc, _ in stale}
        if readable and not p.include_unpublished:
            left = min(arm_timeout, time_left - (time.perf_counter() - started))
            fused, unheld = await self._held_by_keyword(p.tenant, fused, p.top_k, left)
            out_of_step |= unheld
        return RetrievalResult(fused[: p.top_k], [dense_out, keyword_out], frozenset(out_of_step))

    async def _keyword_holds(
        self, tenant: str, versions: Sequence[tuple[str, str]], budget: float
    ) -> set[tuple[str, str]]:
        """``KeywordStore.holds`` within ``budget`` seconds. A store that reads in process is
        asked here: its lookup costs less than the hop to a thread (docs/benchmarks.md,
        2026-11-28)."""
        if self._keyword.reads_in_process:
            return self._keyword.holds(tenant, versions)
        loop = asyncio.get_running_loop()
        return await asyncio.wait_for(
            loop.run_in_executor(self._keyword_pool, self._keyword.holds, tenant, versions),
            budget,
        )

    async def _held_by_keyword(
        self, tenant: str, fused: list[fusion.FusedCandidate], top_k: int, budget: float
    ) -> tuple[list[fusion.FusedCandidate], set[tuple[str, str]]]:
        """``fused`` less the candidates among its first ``top_k`` that only the dense arm
        found and the keyword store does not hold at the same version, and their (tenant,
        document); the ones after move up and are checked in turn.

        The keyword store commits a write first and deletes first, so it says what exists now.
        A dense chunk it does not hold is the old text of a document updated since (its publish
        still to come, or failed: served until the write is retried), or of one deleted (its
        dense copy still to go, or failed to). Only the reply's candidates are looked up. Where
        the lookup cannot be made within ``budget`` the candidates stay: the stores' drift is
        rarer than their slowness.
        """
        deadline = time.perf_counter() + budget
        checked: set[int] = set()
        gone_docs: set[tuple[str, str]] = set()
        while True:
            alone = [c for c in fused[:top_k] if c.keyword is None and id(c) not in checked]
            left = deadline - time.perf_counter()
            if not alone or left <= 0:
                return fused, gone_docs
            versions = [(c.chunk.chunk_id, c.chunk.generation) for c in alone]
            try:
                held = await self._keyword_holds(tenant, versions, left)
            except Exception as exc:
                log.warning("cannot check dense-only candidates", extra={"error": repr(exc)})
                return fused, gone_docs
            checked.update(id(c) for c in alone)
            gone = [c for c in alone if (c.chunk.chunk_id, c.chunk.generation) not in held]
            if not gone:
                return fused, gone_docs
            fused = fusion.drop_and_rerank(fused, gone)
            gone_docs.update((c.chunk.tenant, c.chunk.document_id) for c in gone)

    async def _judged(
        self,
        p: RetrieveParams,
        fused: list[fusion.FusedCandidate],
        dense_out: ArmOutcome,
        keyword_out: ArmOutcome,
    ) -> list[fusion.FusedCandidate]:
        """Every candidate scored as the query itself scores its own chunk, then fused again.

        An LLM's rewrite found the candidate and lent it its own scores: a rewrite padded with
        "refund time business days" matched the refunds passage far better than "How long do
        DHL refunds take?" does, and the gate, reading those scores as the question's, passed
        near misses it refuses without the rewrite. Here a chunk keeps the scores the query's
        own arms gave that chunk; one they did not return is embedded and compared with the
        query (a dense hit only if it would have made the arm's pool); no keyword score is
        invented. The rewrite still widens what is found; only the query's own evidence is
        judged.
        """
        if not fused:
            return fused
        own = {
            DENSE: {h.chunk.chunk_id: h.score for h in dense_out.hits if not h.chunk.is_question},
            KEYWORD: {
                h.chunk.chunk_id: h.score for h in keyword_out.hits if not h.chunk.is_question
            },
        }
        if dense_out.state == "ok":
            missing = [c.chunk for c in fused if c.chunk.chunk_id not in own[DENSE]]
            if missing:
                vector = (
                    p.query_vector
                    if p.query_vector is not None
                    else await self._queries.embed(p.query)
                )
                loop = asyncio.get_running_loop()
                vectors = await loop.run_in_executor(
                    self._dense_pool, self.embedder.embed, [embedding_text(c) for c in missing]
                )
                # A full pool's last score is the bar a chunk had to clear to be returned.
                full = len(dense_out.hits) >= p.candidate_pool
                bar = min((h.score for h in dense_out.hits), default=-math.inf) if full else -2.0
                for chunk, v in zip(missing, vectors, strict=True):
                    score = float(np.dot(vector, v))
                    if score >= bar:
                        own[DENSE][chunk.chunk_id] = score
        arms = {}
        for arm in (DENSE, KEYWORD):
            hits = [
                Hit(c.chunk, own[arm][c.chunk.chunk_id])
                for c in fused
                if c.chunk.chunk_id in own[arm]
            ]
            arms[arm] = [
                fusion.RankedHit(h.chunk, h.score, rank)
                for rank, h in enumerate(best_first(hits), start=1)
            ]
        every = max(len(fused), 1)
        if p.fusion == "weighted":
            judged = fusion.weighted_score(
                arms[DENSE], arms[KEYWORD], every, p.dense_weight, p.keyword_weight
            )
        else:
            judged = fusion.rrf(
                arms[DENSE], arms[KEYWORD], every, p.rrf_k, p.dense_weight, p.keyword_weight
            )
        # A candidate the query's own arms reach by neither score is not its evidence.
        return judged

    async def _passages_for_questions(
        self, tenant: str, fused: list[fusion.FusedCandidate], budget: float
    ) -> tuple[list[fusion.FusedCandidate], set[tuple[str, str]]]:
        """Swap in a passage chunk for each candidate only a hypothetical question found, and
        say which (tenant, document) had only a passage of another version.

        The parent passage's own text is not stored anywhere, so its first window stands in
        (it opens the passage and carries its heading). Where that cannot be read (within
        ``budget`` seconds) the candidate is dropped: a question must never reach the gate as
        evidence. So is one whose passage the keyword store holds at another version: positions
        move between versions, and an old question would vouch for whatever section took its
        passage's place ("how long is the warranty?" for the colours on offer).
        """
        pending = fusion.needs_passage(fused)
        if not pending:
            return fused, set()
        ids = [child_id(c.chunk.parent_id, 0) for c in pending]
        loop = asyncio.get_running_loop()
        found: list[Chunk] = []
        if budget > 0:
            try:
                found = await asyncio.wait_for(
                    loop.run_in_executor(self._keyword_pool, self._keyword.get, tenant, ids),
                    budget,
                )
            except Exception as exc:
                log.warning("cannot read passages for question hits", extra={"error": repr(exc)})
        by_id = {c.chunk_id: c for c in found if not c.is_question}
        dropped, missing = [], 0
        other_version: set[tuple[str, str]] = set()
        for cand, chunk_id in zip(pending, ids, strict=True):
            passage = by_id.get(chunk_id)
            if passage is not None and passage.generation != cand.chunk.generation:
                other_version.add((cand.chunk.tenant, cand.chunk.document_id))
                dropped.append(cand)
            elif passage is None:
                missing += 1
                dropped.append(cand)
            else:
                cand.chunk = passage
        if missing:
            log.warning("dropped question hits without a passage", extra={"count": missing})
        return fusion.drop_and_rerank(fused, dropped), other_version

    def close(self) -> None:
        self._dense_pool.shutdown(wait=False, cancel_futures=True)
        self._keyword_pool.shutdown(wait=False, cancel_futures=True)
        self._ingest_pool.shutdown(wait=False, cancel_futures=True)
        self._chunk_pool.shutdown(wait=False, cancel_futures=True)
        self._dense.close()
        self._keyword.close()
