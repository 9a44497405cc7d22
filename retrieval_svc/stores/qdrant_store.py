"""Dense arm on a Qdrant server via ``qdrant-client`` (gRPC preferred), cosine.

Mirrors ``EdgeDenseStore`` and shares its point ids and payload layout (imported: one home).
Chunks land ``staged``; ``publish`` flips one generation to ``published`` and drops the others.
One deliberate difference: re-upserting a generation that is already published leaves it
published (Edge flips it back to staged until the next ``publish``; see tests/stores).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt
from qdrant_client import QdrantClient, models
from qdrant_client.conversions.common_types import PointId

from candor.settings import QdrantSettings
from retrieval_svc.stores.base import Chunk, Hit, StoredChunk, StoreMissing, best_hits
from retrieval_svc.stores.edge import PUBLISHED, STAGED, _chunk, _payload, point_id

log = logging.getLogger(__name__)

_SCROLL_PAGE = 1000
_PUBLISH_BATCH = 256
"""Documents per publish request (two operations each)."""
_UPSERT_BATCH = 256
"""Points per upsert request: ~1.6 MiB at 1,536 dimensions, a few KiB of payload each."""

# Every field a filter uses gets an index; ``tenant`` is Qdrant's tenant-optimised keyword index.
_PAYLOAD_INDEXES: dict[str, models.PayloadSchemaType | models.KeywordIndexParams] = {
    "tenant": models.KeywordIndexParams(type=models.KeywordIndexType.KEYWORD, is_tenant=True),
    "document_id": models.PayloadSchemaType.KEYWORD,
    "parent_id": models.PayloadSchemaType.KEYWORD,
    "visibility": models.PayloadSchemaType.KEYWORD,
    "generation": models.PayloadSchemaType.KEYWORD,
    "source_kind": models.PayloadSchemaType.INTEGER,
}


class CollectionMismatch(RuntimeError):
    """The collection exists but was built for different vectors than the embedder makes."""


def _eq(key: str, value: str) -> models.FieldCondition:
    return models.FieldCondition(key=key, match=models.MatchValue(value=value))


EMBEDDER_KEY = "candor_embedder"
"""Collection metadata naming the embedder whose vectors it holds. Beside the embedded stores
collection.json records it; a pod's data dir starts empty in Kubernetes, so there only the
collection itself can say (another embedder of the same size was accepted silently, and in a
rollout both wrote into one collection)."""


class QdrantDenseStore:
    def __init__(
        self,
        client: QdrantClient,
        collection: str,
        dim: int,
        *,
        create: bool = True,
        embedder: str = "",
        search_timeout_seconds: float | None = None,
    ) -> None:
        self._client = client
        # The arm gives up on a search after retrieval.arm_timeout_seconds; with the client's
        # own timeout (qdrant.timeout_seconds, 5 s, sized for writes) a slow Qdrant kept each
        # abandoned search holding one of the arm's threads that much longer. Whole seconds:
        # qdrant-client takes an int. Over gRPC (prefer_grpc, the default) it is the call's
        # deadline; over REST only Qdrant's own search timeout.
        self._search_seconds = search_timeout_seconds or None
        self._collection = collection
        self._dim = dim
        self._embedder = embedder
        if not create and not client.collection_exists(collection):
            raise StoreMissing(f"Qdrant collection {collection!r} does not exist")
        self._ensure_collection(create)

    @classmethod
    def from_settings(
        cls,
        settings: QdrantSettings,
        dim: int,
        *,
        create: bool = True,
        embedder: str = "",
        search_timeout_seconds: float | None = None,
    ) -> QdrantDenseStore:
        """Build the client from settings; the API key file is read once, here."""
        api_key = settings.api_key
        if settings.api_key_file:
            api_key = Path(settings.api_key_file).read_text(encoding="utf-8").strip()
        if settings.https and settings.url.startswith("http://"):
            # qdrant-client lets the URL scheme win over https=True: refuse the silent downgrade.
            raise ValueError(f"qdrant.https is true but qdrant.url is plain http: {settings.url}")
        client = QdrantClient(
            url=settings.url,
            prefer_grpc=settings.prefer_grpc,
            grpc_port=settings.grpc_port,
            https=settings.https or None,
            api_key=api_key or None,
            timeout=max(1, math.ceil(settings.timeout_seconds)),
        )
        try:
            return cls(
                client,
                settings.collection,
                dim,
                create=create,
                embedder=embedder,
                search_timeout_seconds=search_timeout_seconds,
            )
        except BaseException:
            client.close()
            raise

    def _ensure_collection(self, create: bool) -> None:
        """Check the collection's vectors; create what is missing only when ``create`` (verify
        opens it to read, and may hold a read-only key)."""
        name = self._collection
        if not self._client.collection_exists(name):
            try:
                self._client.create_collection(
                    name,
                    vectors_config=models.VectorParams(
                        size=self._dim, distance=models.Distance.COSINE
                    ),
                    metadata={EMBEDDER_KEY: self._embedder} if self._embedder else None,
                )
            except Exception:
                # Another replica may have created it first; anything else is a real error.
                if not self._client.collection_exists(name):
                    raise
        info = self._client.get_collection(name)
        vectors = info.config.params.vectors
        if not isinstance(vectors, models.VectorParams):
            have = "named vectors " + ", ".join(sorted(vectors or {}))
            raise CollectionMismatch(
                f"Qdrant collection {name!r} has {have}, but candor needs one unnamed vector "
                f"of size {self._dim} with cosine distance; use another collection name"
            )
        if vectors.size != self._dim or vectors.distance != models.Distance.COSINE:
            raise CollectionMismatch(
                f"Qdrant collection {name!r} has vectors of size {vectors.size} with "
                f"{vectors.distance.value} distance, but the configured embedder needs size "
                f"{self._dim} with Cosine distance; re-index into a new collection or configure "
                "the original embedder"
            )
        self._check_embedder(info, create)
        existing = info.payload_schema or {}
        missing = [field for field in _PAYLOAD_INDEXES if field not in existing]
        if missing and not create:
            log.warning(
                "Qdrant collection lacks payload indexes; the service creates them at start-up",
                extra={"collection": name, "fields": missing},
            )
            return
        for field in missing:
            self._client.create_payload_index(name, field, field_schema=_PAYLOAD_INDEXES[field])

    def _check_embedder(self, info: models.CollectionInfo, create: bool) -> None:
        """Refuse a collection another embedder built; adopt one that names none."""
        if not self._embedder:
            return
        recorded = (info.config.metadata or {}).get(EMBEDDER_KEY)
        if recorded is None:
            if create:
                try:
                    self._client.update_collection(
                        self._collection, metadata={EMBEDDER_KEY: self._embedder}
                    )
                except Exception as exc:  # a server without collection metadata (< 1.16)
                    log.warning(
                        "cannot record the embedder in the Qdrant collection's metadata",
                        extra={"collection": self._collection, "error": repr(exc)},
                    )
            return
        if recorded != self._embedder:
            raise CollectionMismatch(
                f"Qdrant collection {self._collection!r} holds vectors of the embedder "
                f"{recorded!r}, but the configured embedder is {self._embedder!r}: its vectors "
                "would not compare; re-index into a new collection or configure the original "
                "embedder"
            )

    def upsert(self, chunks: Sequence[Chunk], vectors: npt.NDArray[np.float32]) -> None:
        points = [
            models.PointStruct(
                id=point_id(c.tenant, c.chunk_id, c.generation),
                vector=[float(x) for x in v],
                payload=_payload(c, published=False),
            )
            for c, v in zip(chunks, vectors, strict=True)
        ]
        # A point already published is the same content (the id includes the generation):
        # leave it published, so retrying an unchanged document never hides it.
        unpublished = models.Filter(must_not=[_eq("visibility", PUBLISHED)])
        # In requests of bounded size: one call's points in one request reached 24-55 MiB
        # (past REST's 32 MiB limit for a single large document), resent whole on a timeout.
        for start in range(0, len(points), _UPSERT_BATCH):
            self._client.upsert(
                self._collection,
                points=points[start : start + _UPSERT_BATCH],
                wait=True,
                update_filter=unpublished,
            )

    def publish(self, tenant: str, document_id: str, generation: str) -> None:
        self.publish_many([(tenant, document_id, generation)])

    def publish_many(self, documents: Sequence[tuple[str, str, str]]) -> None:
        """Per document, in order: flip the generation, then drop every other one."""
        for start in range(0, len(documents), _PUBLISH_BATCH):
            operations: list[models.UpdateOperation] = []
            for tenant, document_id, generation in documents[start : start + _PUBLISH_BATCH]:
                doc: list[models.Condition] = [
                    _eq("tenant", tenant),
                    _eq("document_id", document_id),
                ]
                operations.append(
                    models.SetPayloadOperation(
                        set_payload=models.SetPayload(
                            payload={"visibility": PUBLISHED},
                            filter=models.Filter(must=[*doc, _eq("generation", generation)]),
                        )
                    )
                )
                operations.append(
                    models.DeleteOperation(
                        delete=models.FilterSelector(
                            filter=models.Filter(must=doc, must_not=[_eq("generation", generation)])
                        )
                    )
                )
            self._client.batch_update_points(
                self._collection, update_operations=operations, wait=True
            )

    def discard_staged(self, documents: Sequence[tuple[str, str, str]]) -> None:
        for start in range(0, len(documents), _PUBLISH_BATCH):
            operations: list[models.UpdateOperation] = [
                models.DeleteOperation(
                    delete=models.FilterSelector(
                        filter=models.Filter(
                            must=[
                                _eq("tenant", tenant),
                                _eq("document_id", document_id),
                                _eq("generation", generation),
                                _eq("visibility", STAGED),
                            ]
                        )
                    )
                )
                for tenant, document_id, generation in documents[start : start + _PUBLISH_BATCH]
            ]
            self._client.batch_update_points(
                self._collection, update_operations=operations, wait=True
            )

    def delete(self, tenant: str, document_id: str) -> int:
        flt = models.Filter(must=[_eq("tenant", tenant), _eq("document_id", document_id)])
        n = self._client.count(self._collection, count_filter=flt, exact=True).count
        if n:
            self._client.delete(
                self._collection, points_selector=models.FilterSelector(filter=flt), wait=True
            )
        return int(n)

    def search(
        self, tenant: str, vector: npt.NDArray[np.float32], limit: int, include_unpublished: bool
    ) -> list[Hit]:
        if limit <= 0:
            return []
        must: list[models.Condition] = [_eq("tenant", tenant)]
        if not include_unpublished:
            must.append(_eq("visibility", PUBLISHED))

        # A tie at the limit is read again with a longer query (best_hits); every query of
        # one search shares its budget, where each had a full one and a widening search held
        # its thread for several arm timeouts after the arm gave up.
        deadline = time.monotonic() + self._search_seconds if self._search_seconds else None

        def nearest(n: int) -> list[Hit]:
            timeout = None
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"dense search past its {self._search_seconds} s budget")
                timeout = max(1, math.ceil(left))
            response = self._client.query_points(
                self._collection,
                query=[float(x) for x in vector],
                query_filter=models.Filter(must=must),
                limit=n,
                with_payload=True,
                timeout=timeout,
            )
            return [Hit(_chunk(p.payload or {}), float(p.score)) for p in response.points]

        return best_hits(nearest, limit)

    def count(self) -> int:
        """Chunks held (all tenants, staged included)."""
        return int(self._client.count(self._collection, exact=True).count)

    def inventory(self) -> list[StoredChunk]:
        out: list[StoredChunk] = []
        offset: PointId | None = None
        while True:
            records, next_offset = self._client.scroll(
                self._collection, limit=_SCROLL_PAGE, offset=offset, with_payload=True
            )
            for r in records:
                p = r.payload or {}
                if any(k not in p for k in ("tenant", "document_id", "chunk_id")):
                    # Not a point candor wrote (someone else's, in candor's collection): it is
                    # no document of any tenant, so `verify` lists what it can and says so.
                    log.warning("skipping a point without candor's payload", extra={"id": r.id})
                    continue
                out.append(
                    StoredChunk(
                        str(p["tenant"]),
                        str(p["document_id"]),
                        str(p["chunk_id"]),
                        str(p.get("generation", "")),
                        p.get("visibility") == PUBLISHED,
                    )
                )
            if next_offset is None:
                return out
            offset = next_offset

    def close(self) -> None:
        self._client.close()
