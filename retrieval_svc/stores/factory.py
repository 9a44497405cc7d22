"""Open the configured dense and keyword stores (embedded by default, production by config)."""

from __future__ import annotations

from pathlib import Path

from candor.settings import RetrievalSettings
from retrieval_svc.stores.base import DenseStore, KeywordStore, StoreMissing
from retrieval_svc.stores.data_dir import DENSE_DIR, KEYWORD_DIR, MIB


def _existing(path: Path, marker: str | None = None) -> Path:
    """``path`` when an embedded store lives there, else StoreMissing naming it."""
    if not path.is_dir() or not any(path.iterdir()) or (marker and not (path / marker).exists()):
        raise StoreMissing(f"no embedded store at {path.resolve()}")
    return path


def open_dense(settings: RetrievalSettings, dim: int, *, create: bool = True) -> DenseStore:
    """The dense store; with ``create=False`` a missing one is StoreMissing, never created."""
    if settings.dense_backend == "qdrant":
        from retrieval_svc.stores.qdrant_store import QdrantDenseStore

        return QdrantDenseStore.from_settings(settings.qdrant, dim, create=create)
    from retrieval_svc.stores.edge import EdgeDenseStore

    path = Path(settings.data_dir) / DENSE_DIR
    floor = settings.min_free_disk_mb * MIB
    return EdgeDenseStore(path if create else _existing(path), dim, floor)


def open_keyword(settings: RetrievalSettings, *, create: bool = True) -> KeywordStore:
    """The keyword store; with ``create=False`` a missing one is StoreMissing, never created."""
    if settings.keyword_backend == "opensearch":
        from retrieval_svc.stores.opensearch_store import OpenSearchKeywordStore

        return OpenSearchKeywordStore(settings.opensearch, create=create)
    from retrieval_svc.stores.tantivy_store import TantivyKeywordStore

    path = Path(settings.data_dir) / KEYWORD_DIR
    floor = settings.min_free_disk_mb * MIB
    return TantivyKeywordStore(path if create else _existing(path, "meta.json"), floor)
