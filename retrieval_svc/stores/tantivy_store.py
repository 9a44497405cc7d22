"""Keyword arm on tantivy: BM25 on local disk, English stemming, tenant as a zero-score filter."""

from __future__ import annotations

import errno
import logging
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

import tantivy

from retrieval_svc.stores import data_dir
from retrieval_svc.stores.base import Chunk, Hit, StoredChunk
from retrieval_svc.stores.data_dir import check_free_space
from retrieval_svc.stores.keyword_query import query_words

log = logging.getLogger("candor.retrieval")
#: What tantivy says once a worker thread died (of an I/O error, most likely).
DEAD_WRITER = "index writer was killed"


def _sole_tenant(searcher: tantivy.Searcher, tenant: str) -> bool:
    """Whether every document in the searcher's snapshot belongs to ``tenant``.

    The tenant filter turns the text query into a conjunction, which tantivy scores document
    by document instead of skipping blocks that cannot reach the top hits: at 100k chunks it
    costs 1.1 of a search's 2.6 ms, for nothing when one tenant owns the index. The term
    dictionary keeps a deleted document's terms until its segment merges, so a tenant that
    has left only ever makes this answer no (and the filter stays), never a wrong yes.
    """
    return [term for term, _ in searcher.terms_with_prefix("tenant", "", limit=2)] == [tenant]


def _schema() -> tantivy.Schema:
    b = tantivy.SchemaBuilder()
    for raw in ("tenant", "chunk_id", "parent_id", "document_id", "uri", "generation"):
        b.add_text_field(raw, stored=True, tokenizer_name="raw")
    b.add_text_field("doc_key", stored=False, tokenizer_name="raw")
    b.add_text_field("title", stored=True, tokenizer_name="en_stem")
    b.add_text_field("text", stored=True, tokenizer_name="en_stem")
    b.add_integer_field("source_kind", stored=True, indexed=True)
    return b.build()


def _document(c: Chunk) -> tantivy.Document:
    return tantivy.Document(
        tenant=c.tenant,
        chunk_id=c.chunk_id,
        parent_id=c.parent_id,
        document_id=c.document_id,
        uri=c.uri,
        generation=c.generation,
        doc_key=_doc_key(c.tenant, c.document_id),
        title=c.title,
        text=c.text,
        source_kind=c.source_kind,
    )


def _chunk(d: tantivy.Document) -> Chunk:
    return Chunk(
        tenant=d["tenant"][0],
        chunk_id=d["chunk_id"][0],
        parent_id=d["parent_id"][0],
        document_id=d["document_id"][0],
        title=(d["title"] or [""])[0],
        text=d["text"][0],
        source_kind=int(d["source_kind"][0]),
        uri=(d["uri"] or [""])[0],
        generation=d["generation"][0],
    )


def _doc_key(tenant: str, document_id: str) -> str:
    return f"{tenant}\x00{document_id}"


class TantivyKeywordStore:
    reads_in_process = True

    def __init__(self, path: Path, min_free_bytes: int = 0) -> None:
        """Open (or create) the index at ``path``; writes first check that the disk keeps
        ``min_free_bytes`` free (0 does not check)."""
        path.mkdir(parents=True, exist_ok=True)
        self._path, self._min_free = path, min_free_bytes
        self._schema = _schema()
        self._index = tantivy.Index(self._schema, path=str(path), reuse=True)
        self._writer = self._new_writer()
        self._lock = threading.Lock()

    def _new_writer(self) -> tantivy.IndexWriter:
        return self._index.writer(heap_size=50_000_000, num_threads=1)

    def _commit(self, stage: Callable[[tantivy.IndexWriter], object]) -> None:
        """Stage operations and commit them as one, or leave the index as it was.

        After a failure the writer is rolled back, which gives it new worker threads (one
        that died of an I/O error fails every later call with "An index writer was
        killed"), and the failed write's segment files are deleted: on a full disk they
        hold the very space the next write needs, so it would fail again.
        """
        check_free_space(self._path, self._min_free)
        with self._lock:
            try:
                stage(self._writer)
                self._writer.commit()
            except Exception as exc:
                self._recover()
                if DEAD_WRITER not in str(exc):
                    raise
                # The error that killed the worker thread is lost with it; the disk it
                # writes to is the usual suspect, so say how full it is.
                raise OSError(
                    errno.EIO,
                    f"the keyword index writer in {self._path} died of an I/O error "
                    f"({data_dir.free_bytes(self._path)} bytes free on that filesystem): {exc}",
                ) from exc
        self._index.reload()

    def _recover(self) -> None:
        """Roll the writer back and drop the files of what it did not commit; call under the
        lock."""
        try:
            self._writer.rollback()
        except Exception:
            log.exception("tantivy rollback failed; opening a new index writer")
            del self._writer  # the old writer holds the directory lock until it is dropped
            self._writer = self._new_writer()
        try:
            self._writer.garbage_collect_files()
        except Exception as exc:  # a full disk: even the list of files cannot be rewritten
            log.warning("cannot delete a failed write's files", extra={"error": repr(exc)})

    def replace(self, tenant: str, document_id: str, chunks: Sequence[Chunk]) -> None:
        self.replace_many([(tenant, document_id, chunks)])

    def replace_many(self, documents: Sequence[tuple[str, str, Sequence[Chunk]]]) -> None:
        def stage(writer: tantivy.IndexWriter) -> None:
            for tenant, document_id, chunks in documents:
                writer.delete_documents_by_term("doc_key", _doc_key(tenant, document_id))
                for c in chunks:
                    writer.add_document(_document(c))

        # One commit: readers see the old chunks or the new ones, never a mix.
        self._commit(stage)

    def delete(self, tenant: str, document_id: str) -> int:
        key = _doc_key(tenant, document_id)
        self._index.reload()
        searcher = self._index.searcher()
        # doc_freq would count deleted documents still held by segments; a search does not.
        found = searcher.search(tantivy.Query.term_query(self._schema, "doc_key", key), 1)
        n = int(found.count)  # type: ignore[attr-defined]
        self._commit(lambda writer: writer.delete_documents_by_term("doc_key", key))
        return n

    def search(self, tenant: str, query: str, limit: int) -> list[Hit]:
        words = query_words(query)
        if not words or limit <= 0:
            return []
        try:
            matched = self._index.parse_query(" ".join(words), ["title", "text"])
        except ValueError as exc:
            if "Only excluding terms" not in str(exc):
                raise
            return []  # every word's tokens were over the analyser's length limit
        searcher = self._index.searcher()
        if not _sole_tenant(searcher, tenant):
            tenant_filter = tantivy.Query.const_score_query(
                tantivy.Query.term_query(self._schema, "tenant", tenant), 0.0
            )
            matched = tantivy.Query.boolean_query(
                [(tantivy.Occur.Must, matched), (tantivy.Occur.Must, tenant_filter)]
            )
        hits: list[Hit] = []
        for score, address in searcher.search(matched, limit).hits:
            hits.append(Hit(_chunk(searcher.doc(address)), float(score)))
        return hits

    def get(self, tenant: str, chunk_ids: Sequence[str]) -> list[Chunk]:
        ids = sorted(set(chunk_ids))
        if not ids:
            return []
        wanted = tantivy.Query.boolean_query(
            [
                (tantivy.Occur.Should, tantivy.Query.term_query(self._schema, "chunk_id", i))
                for i in ids
            ]
        )
        query = tantivy.Query.boolean_query(
            [
                (tantivy.Occur.Must, tantivy.Query.term_query(self._schema, "tenant", tenant)),
                (tantivy.Occur.Must, wanted),
            ]
        )
        searcher = self._index.searcher()
        return [
            _chunk(searcher.doc(address)) for _, address in searcher.search(query, len(ids)).hits
        ]

    def holds(self, tenant: str, versions: Sequence[tuple[str, str]]) -> set[tuple[str, str]]:
        # A count per pair reads the term index only; a doc fetch would decompress the text.
        searcher = self._index.searcher()
        owner = tantivy.Query.term_query(self._schema, "tenant", tenant)
        held = set()
        for chunk_id, generation in set(versions):
            query = tantivy.Query.boolean_query(
                [
                    (tantivy.Occur.Must, owner),
                    (
                        tantivy.Occur.Must,
                        tantivy.Query.term_query(self._schema, "chunk_id", chunk_id),
                    ),
                    (
                        tantivy.Occur.Must,
                        tantivy.Query.term_query(self._schema, "generation", generation),
                    ),
                ]
            )
            if searcher.search(query, 1).hits:
                held.add((chunk_id, generation))
        return held

    def count(self) -> int:
        self._index.reload()
        return int(self._index.searcher().num_docs)

    def inventory(self) -> list[StoredChunk]:
        self._index.reload()
        searcher = self._index.searcher()
        total = int(searcher.num_docs)
        if total == 0:
            return []
        out = []
        for _, address in searcher.search(tantivy.Query.all_query(), total).hits:
            d = searcher.doc(address)
            out.append(
                StoredChunk(
                    d["tenant"][0], d["document_id"][0], d["chunk_id"][0], d["generation"][0], True
                )
            )
        return out

    def close(self) -> None:
        with self._lock:
            self._writer.wait_merging_threads()
