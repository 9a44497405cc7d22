"""A production store that could not be reached at start-up, opened in the background.

A running pod whose Qdrant or OpenSearch goes away serves from the other arm (degraded); a pod
that started while one was away used to exit, so every new or restarted pod crash-looped and a
one-arm outage became a capacity outage. Now the pod starts, the unreachable arm fails each call
(counted as an arm error, the same as in a running pod), and a thread keeps trying to open the
store; once it opens, calls go to it. Only "cannot reach it" is deferred: a store that answers
and refuses (a wrong mapping, a wrong vector size, bad credentials) still stops start-up.
"""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

import grpc
import httpx
import numpy as np
import numpy.typing as npt

from retrieval_svc.stores.base import Chunk, DenseStore, Hit, KeywordStore, StoredChunk

log = logging.getLogger("candor.retrieval")

StoreT = TypeVar("StoreT", DenseStore, KeywordStore)

FIRST_RETRY_SECONDS = 1.0
MAX_RETRY_SECONDS = 30.0


class StoreUnavailable(ConnectionError):
    """The store has not been reachable since start-up."""


def unreachable(exc: BaseException) -> bool:
    """Whether an error (or one it was raised from) says the store could not be reached."""
    seen: set[int] = set()
    link: BaseException | None = exc
    while link is not None and id(link) not in seen:
        seen.add(id(link))
        if isinstance(link, ConnectionError | TimeoutError | socket.gaierror):
            return True
        if isinstance(link, httpx.TransportError):
            return True
        # A proxy with no backend, or a cluster still recovering, answers for the store.
        status = getattr(link, "status_code", None)
        if isinstance(status, int) and status in (502, 503, 504):
            return True
        if type(link).__module__.startswith("opensearchpy") and type(link).__name__ in (
            "ConnectionError",
            "ConnectionTimeout",
        ):
            return True
        if isinstance(link, grpc.RpcError) and link.code() in (  # type: ignore[attr-defined]
            grpc.StatusCode.UNAVAILABLE,
            grpc.StatusCode.DEADLINE_EXCEEDED,
        ):
            return True
        link = link.__cause__ or link.__context__
    return False


class _Deferred(Generic[StoreT]):
    def __init__(self, arm: str, opener: Callable[[], StoreT], first_error: BaseException) -> None:
        self._arm = arm
        self._open: Callable[[], StoreT] = opener
        self._store: StoreT | None = None
        self._why = f"{type(first_error).__name__}: {first_error}"
        self._stopped = threading.Event()
        self._lock = threading.Lock()
        log.warning(
            "store unreachable at start-up: serving without it, opening it in the background",
            extra={"arm": arm, "error": self._why},
        )
        self._thread = threading.Thread(target=self._keep_trying, name=f"open-{arm}", daemon=True)
        self._thread.start()

    def _keep_trying(self) -> None:
        wait = FIRST_RETRY_SECONDS
        while not self._stopped.wait(wait):
            try:
                store = self._open()
            except Exception as exc:
                self._why = f"{type(exc).__name__}: {exc}"
                if not unreachable(exc):
                    # It answers now, and refuses: a configuration problem for an operator,
                    # which a restart would report as "cannot start". Keep saying so.
                    log.error(
                        "store reachable but cannot be opened",
                        extra={"arm": self._arm, "error": self._why},
                    )
                wait = min(wait * 2, MAX_RETRY_SECONDS)
                continue
            with self._lock:
                if self._stopped.is_set():
                    store.close()
                    return
                self._store = store
            log.info("store reachable: opened", extra={"arm": self._arm})
            return

    def _get(self) -> StoreT:
        store = self._store
        if store is None:
            raise StoreUnavailable(f"the {self._arm} store is not reachable yet: {self._why}")
        return store

    def close(self) -> None:
        with self._lock:
            self._stopped.set()
            store, self._store = self._store, None
        if store is not None:
            store.close()


class DeferredDense(_Deferred[DenseStore]):
    """A DenseStore that opens when its server is reachable; until then each call raises."""

    def upsert(self, chunks: Sequence[Chunk], vectors: npt.NDArray[np.float32]) -> None:
        self._get().upsert(chunks, vectors)

    def publish(self, tenant: str, document_id: str, generation: str) -> None:
        self._get().publish(tenant, document_id, generation)

    def publish_many(self, documents: Sequence[tuple[str, str, str]]) -> None:
        self._get().publish_many(documents)

    def discard_staged(self, documents: Sequence[tuple[str, str, str]]) -> None:
        self._get().discard_staged(documents)

    def delete(self, tenant: str, document_id: str) -> int:
        return self._get().delete(tenant, document_id)

    def search(
        self, tenant: str, vector: npt.NDArray[np.float32], limit: int, include_unpublished: bool
    ) -> list[Hit]:
        return self._get().search(tenant, vector, limit, include_unpublished)

    def inventory(self) -> list[StoredChunk]:
        return self._get().inventory()

    def count(self) -> int:
        return self._get().count()


class DeferredKeyword(_Deferred[KeywordStore]):
    """A KeywordStore that opens when its server is reachable; until then each call raises."""

    reads_in_process = False

    def replace(self, tenant: str, document_id: str, chunks: Sequence[Chunk]) -> None:
        self._get().replace(tenant, document_id, chunks)

    def replace_many(self, documents: Sequence[tuple[str, str, Sequence[Chunk]]]) -> None:
        self._get().replace_many(documents)

    def delete(self, tenant: str, document_id: str) -> int:
        return self._get().delete(tenant, document_id)

    def get(self, tenant: str, chunk_ids: Sequence[str]) -> list[Chunk]:
        return self._get().get(tenant, chunk_ids)

    def holds(self, tenant: str, versions: Sequence[tuple[str, str]]) -> set[tuple[str, str]]:
        return self._get().holds(tenant, versions)

    def search(self, tenant: str, query: str, limit: int) -> list[Hit]:
        return self._get().search(tenant, query, limit)

    def inventory(self) -> list[StoredChunk]:
        return self._get().inventory()

    def count(self) -> int:
        return self._get().count()
