"""Build the configured embedder(s): (documents, queries)."""

from __future__ import annotations

from pathlib import Path

from candor.settings import RetrievalSettings
from retrieval_svc.embed.base import Embedder


def open_embedders(settings: RetrievalSettings) -> tuple[Embedder, Embedder]:
    """The document embedder and the query embedder (the same object unless the model differs)."""
    if settings.embedder == "multilingual":
        from retrieval_svc.embed.multilingual import MultilingualEmbedder

        m = MultilingualEmbedder(threads=settings.embed_threads)
        return m, m
    if settings.embedder == "cohere":
        from retrieval_svc.embed.cohere import CohereEmbedder

        c = settings.cohere
        docs = CohereEmbedder(
            model=c.model,
            api_key=c.api_key,
            api_key_file=c.api_key_file,
            dimension=c.dimension or None,
            base_url=c.base_url,
            timeout_seconds=c.timeout_seconds,
            max_retries=c.max_retries,
        )
        return docs, docs.for_queries()
    from retrieval_svc.embed.minilm import MiniLMEmbedder

    m2 = MiniLMEmbedder(
        threads=settings.embed_threads,
        precision="fp32" if settings.embed_precision == "fp32" else "q8",
        cache_dir=Path(settings.model_cache) if settings.model_cache else None,
    )
    return m2, m2
