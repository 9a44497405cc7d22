"""Keyword arm on tantivy: BM25 on local disk, English stemming, one index per tenant.

One index per tenant because BM25 scores a term by how rare it is in the index and a field's
length against the index's average: in one shared index, 500 documents another tenant added
turned a tenant's PASS 0.910 into REFUSE 0.224 (an outside probe), and scores would tell one
tenant something about another's documents. Each index lives in ``tenants/<name>/`` under the
store's directory; a store written before this layout is split into it when first opened.
"""

from __future__ import annotations

import errno
import gc
import hashlib
import json
import logging
import shutil
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from pathlib import Path

import tantivy

from candor.files import fsync_dir, write_atomically
from candor.runtime.validation import TENANT
from retrieval_svc.stores import data_dir
from retrieval_svc.stores.base import Chunk, Hit, StoredChunk, best_hits
from retrieval_svc.stores.data_dir import check_free_space
from retrieval_svc.stores.keyword_query import query_words

log = logging.getLogger("candor.retrieval")
#: What tantivy says once a worker thread died (of an I/O error, most likely).
DEAD_WRITER = "index writer was killed"
MIGRATION_PAGE = 10_000


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


def _replacing(
    tenant: str, documents: Sequence[tuple[str, Sequence[Chunk]]]
) -> Callable[[tantivy.IndexWriter], None]:
    """Stages that replace each of the tenant's (document id, chunks)."""

    def stage(writer: tantivy.IndexWriter) -> None:
        for document_id, chunks in documents:
            writer.delete_documents_by_term("doc_key", _doc_key(tenant, document_id))
            for c in chunks:
                writer.add_document(_document(c))

    return stage


TENANTS_DIR = "tenants"
#: How many tenants' indexes stay open (about one thread each) and how many keep an index
#: writer (a buffer of up to 50 MB each, and merge threads); the least recently used close first.
OPEN_INDEXES, OPEN_WRITERS = 256, 4
INDEX_META = "meta.json"
"""The file every tantivy index has: in a tenant's directory, its index exists."""
LEGACY_MARKER = INDEX_META
"""An index at the store's top level: the layout before one index per tenant."""


INVENTORY_BATCH = 64
"""Indexes ``inventory`` opens before it lets their file watchers end."""
WATCHER_LINGER_SECONDS = 0.6
"""How long a closed index's file-watcher thread lives on (about 0.5 s measured), and more."""


def _index_writer(index: tantivy.Index) -> tantivy.IndexWriter:
    return index.writer(heap_size=50_000_000, num_threads=1)


def tenant_dir_name(tenant: str) -> str:
    """The tenant's index directory: its name (readable for an operator) and a hash of it, so
    that ``Acme`` and ``acme`` stay apart on a case-insensitive filesystem and ``..`` is no
    path. A name the services would refuse is refused here too (it would be a path)."""
    if not TENANT.fullmatch(tenant):
        raise ValueError(f"not a tenant id: {tenant!r}")
    return f"{tenant}.{hashlib.sha256(tenant.encode()).hexdigest()[:12]}"


def _committed_count(tenant: str, path: Path) -> int:
    """The live documents of the index at ``path`` as its meta.json records them, without
    opening it: every open index starts a file-watcher thread, and opening 2,000 tenants' at
    start-up peaked at 1,229 threads, past many a container's pids limit (tantivy then
    panics)."""
    try:
        live = 0
        for segment in json.loads((path / INDEX_META).read_text())["segments"]:
            deletes = segment.get("deletes") or {"num_deleted_docs": 0}
            live += int(segment["max_doc"]) - int(deletes["num_deleted_docs"])
        return live
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ValueError(
            f"the keyword index of tenant {tenant!r} ({path}): its {INDEX_META} is "
            f"unreadable: {exc!r}"
        ) from exc


def _panicked(exc: BaseException) -> bool:
    """tantivy's Rust panics reach Python as pyo3's PanicException, a BaseException."""
    return type(exc).__name__ == "PanicException"


class _Tenant:
    """One tenant's index, and its writer while it has one."""

    def __init__(self, tenant: str, path: Path, schema: tantivy.Schema) -> None:
        self.path = path
        try:
            self.index = tantivy.Index(schema, path=str(path), reuse=True)
        except ValueError as exc:
            # tantivy names the file only: with an index per tenant, say which one.
            raise ValueError(f"the keyword index of tenant {tenant!r} ({path}): {exc}") from exc
        except BaseException as exc:
            if not _panicked(exc):
                raise
            # Raised as an error the callers handle (an arm that degrades), not a
            # BaseException that passes every `except Exception`.
            raise OSError(
                f"cannot open the keyword index of tenant {tenant!r} ({path}); at the "
                f"process's thread limit (a container's pids limit)? tantivy: {exc}"
            ) from exc
        self.writer: tantivy.IndexWriter | None = None

    def new_writer(self) -> tantivy.IndexWriter:
        try:
            self.writer = _index_writer(self.index)
        except ValueError as exc:
            if "LockBusy" not in str(exc):
                raise
            # A writer dropped after a failed rollback may still be held by that write's
            # traceback (a reference cycle), and with it the directory's lock.
            gc.collect()
            self.writer = _index_writer(self.index)
        return self.writer

    def close_writer(self) -> None:
        """Let the writer's merges finish, then drop it (and its directory lock)."""
        if self.writer is not None:
            writer, self.writer = self.writer, None
            writer.wait_merging_threads()

    def count(self) -> int:
        return int(self.index.searcher().num_docs)


class TantivyKeywordStore:
    reads_in_process = True

    def __init__(self, path: Path, min_free_bytes: int = 0) -> None:
        """Open (or create) the store at ``path``; writes first check that the disk keeps
        ``min_free_bytes`` free (0 does not check). Each tenant's count is read from its
        index's meta.json (an unreadable one stops start-up, naming the tenant); the indexes
        open on first use."""
        path.mkdir(parents=True, exist_ok=True)
        self._path, self._min_free = path, min_free_bytes
        self._schema = _schema()
        self._lock = threading.Lock()
        """Held by writes: one at a time, as tantivy allows one writer per index."""
        self._open_lock = threading.Lock()
        """Guards the open indexes and the counts (reads open indexes too)."""
        self._open: OrderedDict[str, _Tenant] = OrderedDict()
        self._counts: dict[str, int] = {}
        if (path / LEGACY_MARKER).exists():
            migrate_to_tenant_indexes(path, self._schema, min_free_bytes)
        (path / TENANTS_DIR).mkdir(exist_ok=True)
        for tenant_path in sorted((path / TENANTS_DIR).iterdir()):
            tenant = tenant_path.name.rpartition(".")[0]
            if not TENANT.fullmatch(tenant) or tenant_dir_name(tenant) != tenant_path.name:
                continue  # not an index of ours
            # No meta.json: made for a first write that never committed.
            if (tenant_path / INDEX_META).exists():
                self._counts[tenant] = _committed_count(tenant, tenant_path)

    def _tenant(self, tenant: str, *, create: bool, register: bool = True) -> _Tenant | None:
        """The tenant's index, opened if need be; None when it has none and ``create`` is
        false (a read never makes a directory: unknown tenant names would fill the disk).
        With ``register`` false, an index not already open is opened for the caller alone.

        The index is opened outside the lock: creating one writes and syncs files (1.5 ms
        here, more on a network volume), and Retrieve asks ``holds`` on its event loop, which
        must not wait behind another tenant's first write. Two threads opening the same index
        keep whichever was registered first.
        """
        with self._open_lock:
            if (found := self._registered(tenant)) is not None:
                return found
        where = self._path / TENANTS_DIR / tenant_dir_name(tenant)
        if not create and not (where / INDEX_META).exists():
            return None
        where.mkdir(exist_ok=True)
        opened = _Tenant(tenant, where, self._schema)
        if not register:
            return opened
        with self._open_lock:
            if (found := self._registered(tenant)) is not None:
                return found
            self._open[tenant] = opened
            idle = [t for t, o in self._open.items() if o.writer is None and t != tenant]
            for t in idle[: max(0, len(self._open) - OPEN_INDEXES)]:
                del self._open[t]
        return opened

    def _registered(self, tenant: str) -> _Tenant | None:
        """The tenant's open index, now the most recently used, or None; call under the
        open lock."""
        if (found := self._open.get(tenant)) is not None:
            self._open.move_to_end(tenant)
        return found

    def _writer(self, tenant: str) -> tuple[_Tenant, tantivy.IndexWriter]:
        """The tenant's index and writer, closing the least recently used writers past
        OPEN_WRITERS; call under the write lock."""
        t = self._tenant(tenant, create=True)
        assert t is not None
        writer = t.writer or t.new_writer()
        with self._open_lock:
            writing = [o for o in self._open.values() if o.writer is not None and o is not t]
        for idle in writing[: max(0, len(writing) + 1 - OPEN_WRITERS)]:
            try:
                idle.close_writer()
            except Exception as exc:  # its merges failed: not this write's error
                log.warning(
                    "closing an idle keyword index writer failed",
                    extra={"path": str(idle.path), "error": repr(exc)},
                )
        return t, writer

    def _commit(self, tenant: str, stage: Callable[[tantivy.IndexWriter], object]) -> None:
        """Stage operations on the tenant's index and commit them as one, or leave the index
        as it was.

        After a failure the writer is rolled back, which gives it new worker threads (one
        that died of an I/O error fails every later call with "An index writer was
        killed"), and the failed write's segment files are deleted: on a full disk they
        hold the very space the next write needs, so it would fail again.
        """
        with self._lock:
            self._commit_locked(tenant, stage)

    def _commit_locked(self, tenant: str, stage: Callable[[tantivy.IndexWriter], object]) -> None:
        """``_commit`` for a caller that holds the write lock."""
        check_free_space(self._path, self._min_free)
        t, writer = self._writer(tenant)
        try:
            stage(writer)
            writer.commit()
        except BaseException as exc:
            self._recover(t)
            if not (t.path / INDEX_META).exists():
                self._forget(tenant)
                raise OSError(
                    errno.ENOENT,
                    f"the keyword index of tenant {tenant!r} is gone: {t.path} or its "
                    f"{INDEX_META} was removed while the service ran. Its chunks are lost "
                    "from the keyword arm; the next write starts a new index. Re-ingest "
                    "the tenant's documents (candor reindex).",
                ) from exc
            if not isinstance(exc, Exception) or DEAD_WRITER not in str(exc):
                raise
            # The error that killed the worker thread is lost with it; the disk it
            # writes to is the usual suspect, so say how full it is.
            raise OSError(
                errno.EIO,
                f"the keyword index writer in {t.path} died of an I/O error "
                f"({data_dir.free_bytes(self._path)} bytes free on that filesystem): {exc}",
            ) from exc
        t.index.reload()
        held = t.count()
        with self._open_lock:
            self._counts[tenant] = held

    def _forget(self, tenant: str) -> None:
        """Drop a tenant whose index directory was removed behind the store's back."""
        with self._open_lock:
            self._open.pop(tenant, None)
            self._counts.pop(tenant, None)

    @staticmethod
    def _recover(t: _Tenant) -> None:
        """Roll the writer back and drop the files of what it did not commit; call under the
        write lock."""
        assert t.writer is not None
        writer = t.writer
        try:
            writer.rollback()
        except Exception as exc:
            # The caller's frames still hold this writer, and with it the directory's lock:
            # a new one opened here would fail with LockBusy and hide the error. The next
            # write opens one, once the failed write's references are gone (a logged
            # traceback would keep them, hence repr).
            log.error(
                "tantivy rollback failed; the next write opens a new index writer",
                extra={"error": repr(exc), "path": str(t.path)},
            )
            t.writer = None
            return
        try:
            writer.garbage_collect_files()
        except Exception as exc:  # a full disk: even the list of files cannot be rewritten
            log.warning("cannot delete a failed write's files", extra={"error": repr(exc)})

    def replace(self, tenant: str, document_id: str, chunks: Sequence[Chunk]) -> None:
        self.replace_many([(tenant, document_id, chunks)])

    def replace_many(self, documents: Sequence[tuple[str, str, Sequence[Chunk]]]) -> None:
        """One commit per tenant: readers see a tenant's old chunks or its new ones, never a
        mix (a write comes from one tenant's call; only tools mix tenants in one batch)."""
        by_tenant: dict[str, list[tuple[str, Sequence[Chunk]]]] = {}
        for tenant, document_id, chunks in documents:
            by_tenant.setdefault(tenant, []).append((document_id, chunks))
        for tenant, docs in by_tenant.items():
            self._commit(tenant, _replacing(tenant, docs))

    def delete(self, tenant: str, document_id: str) -> int:
        key = _doc_key(tenant, document_id)
        # Counted and deleted under one lock: two deletes of a document at once both reported
        # it deleted, and a write landing between the count and the delete went uncounted.
        with self._lock:
            t = self._tenant(tenant, create=False)
            if t is None:
                return 0
            t.index.reload()
            searcher = t.index.searcher()
            # doc_freq would count deleted documents still held by segments; a search does not.
            found = searcher.search(tantivy.Query.term_query(self._schema, "doc_key", key), 1)
            n = int(found.count)  # type: ignore[attr-defined]
            if n:
                self._commit_locked(
                    tenant, lambda writer: writer.delete_documents_by_term("doc_key", key)
                )
        return n

    def search(self, tenant: str, query: str, limit: int) -> list[Hit]:
        words = query_words(query)
        t = self._tenant(tenant, create=False)
        if not words or limit <= 0 or t is None:
            return []
        try:
            matched = t.index.parse_query(" ".join(words), ["title", "text"])
        except ValueError as exc:
            if "Only excluding terms" not in str(exc):
                raise
            return []  # every word's tokens were over the analyser's length limit
        searcher = t.index.searcher()
        return best_hits(
            lambda n: [
                Hit(_chunk(searcher.doc(address)), float(score))
                for score, address in searcher.search(matched, n).hits
            ],
            limit,
        )

    def get(self, tenant: str, chunk_ids: Sequence[str]) -> list[Chunk]:
        ids = sorted(set(chunk_ids))
        t = self._tenant(tenant, create=False)
        if not ids or t is None:
            return []
        wanted = tantivy.Query.boolean_query(
            [
                (tantivy.Occur.Should, tantivy.Query.term_query(self._schema, "chunk_id", i))
                for i in ids
            ]
        )
        searcher = t.index.searcher()
        return [
            _chunk(searcher.doc(address)) for _, address in searcher.search(wanted, len(ids)).hits
        ]

    def holds(self, tenant: str, versions: Sequence[tuple[str, str]]) -> set[tuple[str, str]]:
        t = self._tenant(tenant, create=False)
        if t is None:
            return set()
        # A count per pair reads the term index only; a doc fetch would decompress the text.
        searcher = t.index.searcher()
        held = set()
        for chunk_id, generation in set(versions):
            query = tantivy.Query.boolean_query(
                [
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
        with self._open_lock:
            return sum(self._counts.values())

    def inventory(self) -> list[StoredChunk]:
        """Every tenant's chunks. An index not already open is opened for the read alone, and
        after each INVENTORY_BATCH of those the read waits WATCHER_LINGER_SECONDS: each open
        index's file watcher outlives it by about half a second, and reading 2,000 tenants
        back to back peaked at 1,019 threads, past a pids limit of 1,024."""
        out = []
        with self._open_lock:
            tenants = sorted(self._counts)
        opened = 0
        for tenant in tenants:
            with self._open_lock:
                t = self._registered(tenant)
            if t is None:
                if opened and opened % INVENTORY_BATCH == 0:
                    time.sleep(WATCHER_LINGER_SECONDS)
                if (t := self._tenant(tenant, create=False, register=False)) is None:
                    continue
                opened += 1
            t.index.reload()
            searcher = t.index.searcher()
            total = int(searcher.num_docs)
            if total == 0:
                continue
            for _, address in searcher.search(tantivy.Query.all_query(), total).hits:
                d = searcher.doc(address)
                out.append(
                    StoredChunk(
                        d["tenant"][0],
                        d["document_id"][0],
                        d["chunk_id"][0],
                        d["generation"][0],
                        True,
                    )
                )
        return out

    def close(self) -> None:
        with self._lock:
            with self._open_lock:
                opened = list(self._open.values())
            for t in opened:  # merges are waited for without holding up reads
                t.close_writer()


SPLIT_FROM = ".split-from"
"""In ``tenants/``: the SHA-256 of the ``meta.json`` of the shared index it was split from."""


def migrate_to_tenant_indexes(path: Path, schema: tantivy.Schema, min_free_bytes: int = 0) -> None:
    """Split the one index at ``path`` (the layout before one index per tenant) into
    ``path/tenants/``, then remove it.

    Built under a temporary name and renamed into place, so a crash part-way leaves the old
    index as it was and the next start begins again. ``tenants/`` records which index it was
    split from: a start that finds that same index beside it (a crash after the rename) only
    removes it, and one that finds another (an earlier candor, run after the split, wrote a
    new one) stops rather than delete what it holds. Needs as much free disk again as the old
    index.
    """
    tenants_dir, building = path / TENANTS_DIR, path / (TENANTS_DIR + ".migrating")
    legacy = hashlib.sha256((path / LEGACY_MARKER).read_bytes()).hexdigest()
    if tenants_dir.exists():
        recorded = tenants_dir / SPLIT_FROM
        split_from = recorded.read_text().strip() if recorded.exists() else ""
        if split_from != legacy and _live_documents(path, schema):
            raise RuntimeError(
                f"{path} holds a shared keyword index beside the per-tenant indexes in "
                f"{tenants_dir}, and it is not the one they were split from: an earlier "
                "candor wrote it after the split (a rollback). Its documents are not read. "
                "Re-ingest them (candor reindex) after moving it aside: move every file "
                f"directly in {path} except {data_dir.LOCK_NAME} to a backup directory."
            )
    else:
        old_size = sum(f.stat().st_size for f in path.iterdir() if f.is_file())
        check_free_space(path, max(min_free_bytes, 1), write_bytes=old_size)
        try:
            moved = _split(path, building, schema)
            # Synced: after a power cut an empty record would read as a rollback's new index.
            write_atomically(building / SPLIT_FROM, (legacy + "\n").encode())
            fsync_dir(building)
            building.rename(tenants_dir)
            fsync_dir(path)
        except BaseException:
            shutil.rmtree(building, ignore_errors=True)  # a full disk: give its space back
            raise
        log.info(
            "split the keyword index into one index per tenant",
            extra={"path": str(path), "chunks": moved},
        )
    # The marker goes last: until it is gone, the next start knows there is more to remove.
    for leftover in path.iterdir():
        if leftover.is_file() and leftover.name not in (data_dir.LOCK_NAME, LEGACY_MARKER):
            leftover.unlink()
    (path / LEGACY_MARKER).unlink()
    fsync_dir(path)


def _live_documents(path: Path, schema: tantivy.Schema) -> int:
    return int(tantivy.Index(schema, path=str(path), reuse=True).searcher().num_docs)


def _split(path: Path, building: Path, schema: tantivy.Schema) -> int:
    """Copy each tenant's documents from the index at ``path`` into its own index under
    ``building``; the number copied."""
    shutil.rmtree(building, ignore_errors=True)
    building.mkdir()
    old = tantivy.Index(schema, path=str(path), reuse=True)
    searcher = old.searcher()
    moved = 0
    # A deleted document's tenant term outlives it until its segment merges: such a tenant's
    # query finds nothing and gets no index.
    for tenant, _ in searcher.terms_with_prefix("tenant", ""):
        owned = tantivy.Query.term_query(schema, "tenant", tenant)
        total = int(searcher.search(owned, 1).count)  # type: ignore[attr-defined]
        if not total:
            continue
        if not TENANT.fullmatch(tenant):
            # Written before tenant ids were checked as they are now: no request could reach
            # them, and they have no directory name.
            log.error(
                "not splitting the documents of a tenant id the services refuse",
                extra={"tenant": tenant, "chunks": total},
            )
            continue
        where = building / tenant_dir_name(tenant)
        where.mkdir()
        new = tantivy.Index(schema, path=str(where))
        writer = _index_writer(new)
        for start in range(0, total, MIGRATION_PAGE):
            for _, address in searcher.search(owned, MIGRATION_PAGE, offset=start).hits:
                writer.add_document(_document(_chunk(searcher.doc(address))))
        writer.commit()
        writer.wait_merging_threads()
        moved += total
    return moved
