"""Open the configured dense and keyword stores (embedded by default, production by config)."""

from __future__ import annotations

from pathlib import Path

from candor.settings import RetrievalSettings
from retrieval_svc.stores.base import DenseStore, KeywordStore


def open_dense(settings: RetrievalSettings, dim: int) -> DenseStore:
    if settings.dense_backend == "qdrant":
        from retrieval_svc.stores.qdrant_store import QdrantDenseStore

        return QdrantDenseStore.from_settings(settings.qdrant, dim)
    from retrieval_svc.stores.edge import EdgeDenseStore

    return EdgeDenseStore(Path(settings.data_dir) / "dense", dim)


def open_keyword(settings: RetrievalSettings) -> KeywordStore:
    if settings.keyword_backend == "opensearch":
        from retrieval_svc.stores.opensearch_store import OpenSearchKeywordStore

        return OpenSearchKeywordStore(settings.opensearch)
    from retrieval_svc.stores.tantivy_store import TantivyKeywordStore

    return TantivyKeywordStore(Path(settings.data_dir) / "keyword")
