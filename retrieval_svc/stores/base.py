"""The two store interfaces every backend (embedded or production) implements."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import numpy.typing as npt

from candor.common.v1 import evidence_pb2

HYPOTHETICAL_QUESTION = int(evidence_pb2.SOURCE_KIND_HYPOTHETICAL_QUESTION)
CURATED_ANSWER = int(evidence_pb2.SOURCE_KIND_CURATED_ANSWER)
DENSE, KEYWORD = "dense", "keyword"
"""The two arms' names, as metrics, logs and errors spell them."""


class StoreMissing(RuntimeError):
    """A store opened only to be read (``create=False``: candor verify) does not exist."""


class StoreUnlistable(RuntimeError):
    """A store cannot list all it holds (``inventory``): part of it cannot be read now, and
    what it left out would read as missing."""


class StoreReadOnly(RuntimeError):
    """The store refuses every write for a reason no document causes (an OpenSearch index
    blocked at the disk flood stage, or by hand): retrying, alone or document by document,
    only repeats it."""


@dataclass(frozen=True)
class Chunk:
    """One indexed unit of the knowledge base."""

    tenant: str
    chunk_id: str
    parent_id: str
    document_id: str
    title: str
    text: str
    source_kind: int
    uri: str
    generation: str
    """Content hash of the document version this chunk belongs to."""

    @property
    def is_question(self) -> bool:
        """An LLM-written question: it finds its passage but is never evidence itself."""
        return self.source_kind == HYPOTHETICAL_QUESTION


@dataclass(frozen=True)
class Hit:
    """One arm's raw result: the chunk and its raw score (cosine or BM25)."""

    chunk: Chunk
    score: float


def best_first(hits: Sequence[Hit]) -> list[Hit]:
    """One arm's hits by score, equal scores by chunk id.

    Stores return equal scores (duplicate texts) in an order of their own that differs between
    builds of the same corpus; ranks feed RRF, so the order must not depend on it.
    """
    return sorted(hits, key=lambda h: (-h.score, h.chunk.chunk_id))


TIE_SCAN = 4
"""How far past its limit a search reads hits tied with its last place, as a multiple of it."""


def best_hits(search: Callable[[int], Sequence[Hit]], limit: int) -> list[Hit]:
    """The ``limit`` best of ``search(n)``'s hits, best first, a tie at the limit cut by chunk id.

    A store orders equal scores (copies of one text) by where it keeps them, which follows
    write order and segment merges, so which of the tied chunks made the limit differed between
    two builds of one corpus. The tie is read whole, up to ``TIE_SCAN`` times the limit (past
    that, a few thousand copies of one text, the store's order decides).
    """
    if limit <= 0:
        return []
    wanted, most = limit + 1, limit * TIE_SCAN
    hits = search(wanted)
    while len(hits) == wanted and hits[-1].score >= hits[limit - 1].score and wanted < most:
        wanted = min(wanted * 2, most)
        hits = search(wanted)
    if len(hits) <= limit:
        return best_first(hits)
    edge = hits[limit - 1].score
    return best_first([h for h in hits if h.score >= edge])[:limit]


@dataclass(frozen=True)
class StoredChunk:
    """One chunk as a store holds it, for drift checks between the two stores."""

    tenant: str
    document_id: str
    chunk_id: str
    generation: str
    published: bool
    readable: bool = True
    """False for a point whose payload cannot be read (a damaged segment): it belongs to no
    known document, and ``document_id`` holds the point's id instead."""


class DenseStore(Protocol):
    def upsert(self, chunks: Sequence[Chunk], vectors: npt.NDArray[np.float32]) -> None:
        """Write chunks unpublished; ``publish`` makes them visible."""
        ...

    def publish(self, tenant: str, document_id: str, generation: str) -> None:
        """Make ``generation`` visible and drop every other generation of the document."""
        ...

    def publish_many(self, documents: Sequence[tuple[str, str, str]]) -> None:
        """``publish`` for many (tenant, document_id, generation) with one flush."""
        ...

    def discard_staged(self, documents: Sequence[tuple[str, str, str]]) -> None:
        """Remove the still-staged chunks of each (tenant, document_id, generation), leaving
        published ones (an unchanged document's own, among them) as they are."""
        ...

    def delete(self, tenant: str, document_id: str) -> int:
        """Remove a document; returns how many chunks it had."""
        ...

    def search(
        self, tenant: str, vector: npt.NDArray[np.float32], limit: int, include_unpublished: bool
    ) -> list[Hit]:
        """Best-first hits of ``tenant`` only; score is cosine similarity."""
        ...

    def inventory(self) -> list[StoredChunk]:
        """Every chunk in the store (all tenants), for verify/reindex."""
        ...

    def count(self) -> int:
        """Chunks held (all tenants, staged included)."""
        ...

    def close(self) -> None: ...


class KeywordStore(Protocol):
    reads_in_process: bool
    """``holds`` reads local index files in microseconds (no network, no stored text):
    callers may run it on their event loop rather than pay a thread hop."""

    def replace(self, tenant: str, document_id: str, chunks: Sequence[Chunk]) -> None:
        """Atomically replace a document's chunks (visible on commit)."""
        ...

    def replace_many(self, documents: Sequence[tuple[str, str, Sequence[Chunk]]]) -> None:
        """``replace`` for many (tenant, document_id, chunks) in one commit."""
        ...

    def delete(self, tenant: str, document_id: str) -> int: ...

    def get(self, tenant: str, chunk_ids: Sequence[str]) -> list[Chunk]:
        """The ``tenant``'s chunks among ``chunk_ids`` (any order; unknown ids are skipped)."""
        ...

    def holds(self, tenant: str, versions: Sequence[tuple[str, str]]) -> set[tuple[str, str]]:
        """The (chunk id, generation) pairs among ``versions`` the store holds for ``tenant``,
        without reading their text."""
        ...

    def search(self, tenant: str, query: str, limit: int) -> list[Hit]:
        """Best-first hits of ``tenant`` only; score is BM25; the tenant filter adds no score."""
        ...

    def inventory(self) -> list[StoredChunk]: ...

    def count(self) -> int: ...

    def close(self) -> None: ...
