"""Store backends for the contract suites: one fixture per interface, parametrised by backend.

A ``Backend`` opens a store over a named *location* (a directory, a Qdrant collection, an
OpenSearch index). ``new()`` gives a fresh, empty store; ``reopen(store)`` gives a new store
over the same data (a process restart). Contract tests only see ``DenseStore`` /
``KeywordStore`` behaviour, so every backend runs the same cases.

Adding a backend is one entry in ``DENSE_BACKENDS`` / ``KEYWORD_BACKENDS`` plus one branch in
the matching fixture. Known bugs of one backend are marked per backend with ``known_bug``.
"""

from __future__ import annotations

import itertools
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Generic, TypeVar

import numpy as np
import numpy.typing as npt
import pytest
from qdrant_client import QdrantClient

from retrieval_svc.stores.base import Chunk, DenseStore, KeywordStore
from retrieval_svc.stores.edge import EdgeDenseStore
from retrieval_svc.stores.qdrant_store import QdrantDenseStore
from retrieval_svc.stores.tantivy_store import TantivyKeywordStore

DIM = 8
"""Dense suites use small hand-made vectors (no model): one axis per vocabulary word."""

DENSE_BACKENDS = ["edge", "qdrant"]
KEYWORD_BACKENDS = ["tantivy", "opensearch", "opensearch-tenants"]
# The OpenSearch node is a session fixture in tests/opensearch_node_fixture.py.
# Index names from ``Backend.new()`` are lowercase, unique per test and valid OpenSearch names.

StoreT = TypeVar("StoreT", DenseStore, KeywordStore)
_ids = itertools.count()


@dataclass
class Backend(Generic[StoreT]):
    """Opens stores of one backend; closes whatever is still open at teardown."""

    name: str
    open: Callable[[str], StoreT]
    """Open (creating if needed) the store at a location name."""
    release: Callable[[StoreT], None] = lambda store: store.close()
    _open_stores: list[tuple[StoreT, str]] = field(default_factory=list)

    def new(self) -> StoreT:
        location = f"candor-test-{self.name}-{next(_ids)}"
        store = self.open(location)
        self._open_stores.append((store, location))
        return store

    def reopen(self, store: StoreT) -> StoreT:
        location = self._forget(store)
        self.release(store)
        again = self.open(location)
        self._open_stores.append((again, location))
        return again

    def discard(self, store: StoreT) -> None:
        self._forget(store)
        self.release(store)

    def close_all(self) -> None:
        while self._open_stores:
            store, _ = self._open_stores.pop()
            self.release(store)

    def _forget(self, store: StoreT) -> str:
        for i, (s, location) in enumerate(self._open_stores):
            if s is store:
                del self._open_stores[i]
                return location
        raise ValueError("store was not opened by this backend")


@pytest.fixture(params=DENSE_BACKENDS)
def dense_backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend[DenseStore]]:
    name: str = request.param
    if name == "edge":
        backend: Backend[DenseStore] = Backend(
            name, lambda loc: EdgeDenseStore(tmp_path / loc, DIM)
        )
    elif name == "qdrant":
        # The adapter's real request code against qdrant-client's in-memory engine; one client
        # per test, so ``reopen`` means "another replica on the same collection".
        client = QdrantClient(":memory:")
        request.addfinalizer(client.close)
        backend = Backend(name, lambda loc: quiet_qdrant_store(client, loc), release=lambda s: None)
    else:  # pragma: no cover - a name added to DENSE_BACKENDS without a branch
        raise ValueError(f"no dense backend fixture for {name!r}")
    yield backend
    backend.close_all()


def quiet_qdrant_store(client: QdrantClient, collection: str, dim: int = DIM) -> QdrantDenseStore:
    with warnings.catch_warnings():
        # The in-memory engine warns that payload indexes have no effect locally.
        warnings.filterwarnings("ignore", message="Payload indexes have no effect")
        return QdrantDenseStore(client, collection, dim)


@pytest.fixture(params=KEYWORD_BACKENDS)
def keyword_backend(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[Backend[KeywordStore]]:
    name: str = request.param
    if name == "tantivy":
        backend: Backend[KeywordStore] = Backend(
            name, lambda loc: TantivyKeywordStore(tmp_path / loc)
        )
    elif name in ("opensearch", "opensearch-tenants"):
        from candor.settings import OpenSearchSettings
        from retrieval_svc.stores.opensearch_store import OpenSearchKeywordStore

        url: str = request.getfixturevalue("opensearch_url")
        per_tenant = name == "opensearch-tenants"
        backend = Backend(
            name,
            lambda loc: OpenSearchKeywordStore(
                OpenSearchSettings(hosts=(url,), index=loc, index_per_tenant=per_tenant)
            ),
        )
    else:  # pragma: no cover - a name added to KEYWORD_BACKENDS without a branch
        raise ValueError(f"no keyword backend fixture for {name!r}")
    yield backend
    backend.close_all()


@pytest.fixture
def dense_store(dense_backend: Backend[DenseStore]) -> DenseStore:
    return dense_backend.new()


@pytest.fixture
def keyword_store(keyword_backend: Backend[KeywordStore]) -> KeywordStore:
    return keyword_backend.new()


def known_bug(
    request: pytest.FixtureRequest,
    backend: Backend[DenseStore] | Backend[KeywordStore],
    **bugs: str,
) -> None:
    """Mark the running test xfail(strict) when ``backend`` has a known bug it exposes.

    ``bugs`` maps backend name to the reason; other backends must pass the test.
    """
    if backend.name in bugs:
        request.applymarker(pytest.mark.xfail(reason=bugs[backend.name], strict=True))


# --- data helpers --------------------------------------------------------------------------


def chunk(
    tenant: str,
    document_id: str,
    n: int,
    generation: str = "g1",
    text: str = "",
    title: str = "",
    source_kind: int = 1,
) -> Chunk:
    return Chunk(
        tenant=tenant,
        chunk_id=f"{document_id}#p0c{n}",
        parent_id=f"{document_id}#p0",
        document_id=document_id,
        title=title,
        text=text or f"text of {document_id} chunk {n}",
        source_kind=source_kind,
        uri=f"https://example.test/{document_id}",
        generation=generation,
    )


def vec(*values: float) -> npt.NDArray[np.float32]:
    """A DIM-dimensional vector from its leading components (the rest are zero)."""
    out = np.zeros(DIM, dtype=np.float32)
    out[: len(values)] = values
    return out


def vecs(*rows: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    return np.stack(rows).astype(np.float32)
