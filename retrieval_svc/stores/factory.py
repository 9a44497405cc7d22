"""Open the configured dense and keyword stores (embedded by default, production by config)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from candor.settings import RetrievalSettings
from retrieval_svc.stores.base import DENSE, KEYWORD, DenseStore, KeywordStore, StoreMissing
from retrieval_svc.stores.data_dir import DENSE_DIR, KEYWORD_DIR, MIB
from retrieval_svc.stores.deferred import DeferredDense, DeferredKeyword, unreachable

StoreT = TypeVar("StoreT", DenseStore, KeywordStore)


def _existing(path: Path, *markers: str) -> Path:
    """``path`` when an embedded store lives there (holding one of ``markers``, if any are
    given), else StoreMissing naming it."""
    if (
        not path.is_dir()
        or not any(path.iterdir())
        or (markers and not any((path / m).exists() for m in markers))
    ):
        raise StoreMissing(f"no embedded store at {path.resolve()}")
    return path


def _now_or_later(
    arm: str,
    opener: Callable[[], StoreT],
    deferred: Callable[[str, Callable[[], StoreT], BaseException], StoreT],
    defer: bool,
) -> StoreT:
    if not defer:
        return opener()
    try:
        return opener()
    except Exception as exc:
        if not unreachable(exc):
            raise
        return deferred(arm, opener, exc)


def open_dense(
    settings: RetrievalSettings,
    dim: int,
    *,
    create: bool = True,
    defer: bool = False,
    embedder: str = "",
) -> DenseStore:
    """The dense store; with ``create=False`` a missing one is StoreMissing, never created.

    ``defer``: a production store that cannot be reached is opened in the background
    (stores/deferred.py) instead of failing start-up. ``embedder``: the name a Qdrant
    collection must have been built by (recorded in it when it names none)."""
    if settings.dense_backend == "qdrant":
        from retrieval_svc.stores.qdrant_store import QdrantDenseStore

        def qdrant() -> DenseStore:
            return QdrantDenseStore.from_settings(
                settings.qdrant,
                dim,
                create=create,
                embedder=embedder,
                search_timeout_seconds=settings.arm_timeout_seconds,
            )

        return _now_or_later(DENSE, qdrant, DeferredDense, defer)
    from retrieval_svc.stores.edge import EdgeDenseStore

    path = Path(settings.data_dir) / DENSE_DIR
    floor = settings.min_free_disk_mb * MIB
    return EdgeDenseStore(path if create else _existing(path), dim, floor)


def open_keyword(
    settings: RetrievalSettings, *, create: bool = True, defer: bool = False
) -> KeywordStore:
    """The keyword store; with ``create=False`` a missing one is StoreMissing, never created;
    ``defer`` as for :func:`open_dense`."""
    if settings.keyword_backend == "opensearch":
        from retrieval_svc.stores.opensearch_store import OpenSearchKeywordStore

        def opensearch() -> KeywordStore:
            return OpenSearchKeywordStore(settings.opensearch, create=create)

        return _now_or_later(KEYWORD, opensearch, DeferredKeyword, defer)
    from retrieval_svc.stores.tantivy_store import LEGACY_MARKER, TENANTS_DIR, TantivyKeywordStore

    path = Path(settings.data_dir) / KEYWORD_DIR
    floor = settings.min_free_disk_mb * MIB
    existing = path if create else _existing(path, TENANTS_DIR, LEGACY_MARKER)
    return TantivyKeywordStore(existing, floor)
