"""Property: whatever is written, a search of tenant X only ever returns tenant X's chunks.

Random corpora (words from a small vocabulary, colliding document ids, near-identical tenant
names) go into a fresh store of every backend; random queries of every tenant, including one
with no documents, must never see another tenant's chunk, and deleting one tenant's document
must leave every other tenant's chunks untouched.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from retrieval_svc.stores.base import Chunk, DenseStore, Hit, KeywordStore, StoredChunk
from tests.stores.conftest import DIM, Backend, chunk

VOCAB = ("parcel", "label", "refund", "customs", "tracking", "invoice", "courier", "pickup")
assert len(VOCAB) == DIM  # one vector axis per word: the dense arm sees the same words
# Near-identical names: case, prefixes, a space and non-ASCII must not match each other.
# Near-identical names the services accept (candor.runtime.validation.TENANT); the stores that
# name an index or directory after a tenant refuse any other.
TENANTS = ("acme", "Acme", "acme-eu", "acme.eu", "acme_eu", "globex")
DOCUMENT_IDS = ("d0", "d1", "d2")  # few, so the same id occurs in several tenants

PROPERTY_SETTINGS = settings(
    max_examples=25,
    deadline=None,  # store I/O timing varies on a loaded 2-core machine
    database=None,  # no .hypothesis/ directory in the repo
    suppress_health_check=[HealthCheck.function_scoped_fixture],  # fresh stores per example
)

words = st.lists(st.sampled_from(VOCAB), min_size=1, max_size=6)


@dataclass(frozen=True)
class Write:
    tenant: str
    document_id: str
    chunk_words: list[list[str]]
    publish: bool


@dataclass(frozen=True)
class Corpus:
    tenants: list[str]
    writes: list[Write]
    queries: list[tuple[str, list[str], bool]]
    """(tenant, query words, include_unpublished); tenants include one with no documents."""
    deletes: list[tuple[str, str]]
    batched: bool
    """Write through upsert/publish_many and replace_many in one go, not document by document."""


@st.composite
def corpora(draw: st.DrawFn) -> Corpus:
    tenants = draw(st.lists(st.sampled_from(TENANTS), min_size=2, max_size=4, unique=True))
    write = st.builds(
        Write,
        tenant=st.sampled_from(tenants),
        document_id=st.sampled_from(DOCUMENT_IDS),
        chunk_words=st.lists(words, min_size=1, max_size=3),
        publish=st.booleans(),
    )
    writes = draw(st.lists(write, min_size=1, max_size=10))
    absent = next(t for t in TENANTS if t not in tenants)
    query = st.tuples(st.sampled_from([*tenants, absent]), words, st.booleans())
    queries = draw(st.lists(query, min_size=1, max_size=6))
    delete = st.tuples(st.sampled_from(tenants), st.sampled_from(DOCUMENT_IDS))
    deletes = draw(st.lists(delete, max_size=2))
    return Corpus(tenants, writes, queries, deletes, draw(st.booleans()))


def _chunks(w: Write, generation: str) -> list[Chunk]:
    return [
        chunk(w.tenant, w.document_id, i, generation, text=" ".join(ws))
        for i, ws in enumerate(w.chunk_words)
    ]


def _embed(texts: list[str]) -> npt.NDArray[np.float32]:
    """Bag of words over VOCAB: a deterministic stand-in for the embedder."""
    out = np.zeros((len(texts), DIM), dtype=np.float32)
    for row, text in enumerate(texts):
        for word in text.split():
            out[row, VOCAB.index(word)] += 1.0
    return out


Written = dict[str, set[tuple[str, str, str]]]
"""tenant -> (chunk_id, generation, text) of every chunk ever written to it."""


def _assert_only_own_chunks(tenant: str, hits: list[Hit], written: Written) -> None:
    for h in hits:
        assert h.chunk.tenant == tenant, f"search of {tenant!r} returned {h.chunk}"
        key = (h.chunk.chunk_id, h.chunk.generation, h.chunk.text)
        assert key in written[tenant], f"search of {tenant!r} returned a chunk it never wrote"


def _others(inventory: list[StoredChunk], tenant: str) -> list[StoredChunk]:
    return sorted((s for s in inventory if s.tenant != tenant), key=repr)


@PROPERTY_SETTINGS
@given(corpus=corpora())
def test_dense_search_never_crosses_tenants(
    dense_backend: Backend[DenseStore], corpus: Corpus
) -> None:
    store = dense_backend.new()
    try:
        written: Written = defaultdict(set)
        batch = [(w, _chunks(w, generation=f"g{n}")) for n, w in enumerate(corpus.writes)]
        for w, chunks in batch:
            written[w.tenant] |= {(c.chunk_id, c.generation, c.text) for c in chunks}
        if corpus.batched:
            all_chunks = [c for _, chunks in batch for c in chunks]
            store.upsert(all_chunks, _embed([c.text for c in all_chunks]))
            store.publish_many(
                [(w.tenant, w.document_id, cs[0].generation) for w, cs in batch if w.publish]
            )
        else:
            for w, chunks in batch:
                store.upsert(chunks, _embed([c.text for c in chunks]))
                if w.publish:
                    store.publish(w.tenant, w.document_id, chunks[0].generation)

        for tenant, query, include_unpublished in corpus.queries:
            hits = store.search(tenant, _embed([" ".join(query)])[0], 20, include_unpublished)
            _assert_only_own_chunks(tenant, hits, written)
        for tenant in corpus.tenants:
            everything = store.search(tenant, _embed([" ".join(VOCAB)])[0], 100, True)
            _assert_only_own_chunks(tenant, everything, written)

        for tenant, document_id in corpus.deletes:
            before = _others(store.inventory(), tenant)
            store.delete(tenant, document_id)
            assert _others(store.inventory(), tenant) == before
    finally:
        dense_backend.discard(store)


@PROPERTY_SETTINGS
@given(corpus=corpora())
def test_keyword_search_never_crosses_tenants(
    keyword_backend: Backend[KeywordStore], corpus: Corpus
) -> None:
    store = keyword_backend.new()
    try:
        written: Written = defaultdict(set)
        batch = [(w, _chunks(w, generation=f"g{n}")) for n, w in enumerate(corpus.writes)]
        for w, chunks in batch:
            written[w.tenant] |= {(c.chunk_id, c.generation, c.text) for c in chunks}
        if corpus.batched:
            store.replace_many([(w.tenant, w.document_id, chunks) for w, chunks in batch])
        else:
            for w, chunks in batch:
                store.replace(w.tenant, w.document_id, chunks)

        for tenant, query, _ in corpus.queries:
            _assert_only_own_chunks(tenant, store.search(tenant, " ".join(query), 20), written)
        for tenant in corpus.tenants:
            everything = store.search(tenant, " ".join(VOCAB), 100)
            _assert_only_own_chunks(tenant, everything, written)

        for tenant, document_id in corpus.deletes:
            before = _others(store.inventory(), tenant)
            store.delete(tenant, document_id)
            assert _others(store.inventory(), tenant) == before
    finally:
        keyword_backend.discard(store)
