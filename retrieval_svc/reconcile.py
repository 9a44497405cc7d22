"""Drift between the dense and keyword stores: find it (pure) and repair what can be repaired.

A document is consistent when both stores hold the same generation with the same chunk ids and
the dense copy is published. Anything else is drift, usually left by a write that failed
part-way.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from retrieval_svc.stores.base import DenseStore, KeywordStore, StoredChunk

#: Fixable by publishing the keyword store's generation in the dense store.
REPUBLISH = frozenset({"unpublished", "stale_dense", "orphan_staged"})


@dataclass(frozen=True)
class Drift:
    tenant: str
    document_id: str
    kind: str
    """unpublished, stale_dense, orphan_staged, chunk_mismatch, missing_dense, dense_outdated
    (both stores hold the document, the dense store only at other generations), missing_keyword,
    or unreadable (dense points whose payload is lost: no document to name)."""
    detail: str
    keyword_generation: str = ""


def _group(chunks: Iterable[StoredChunk]) -> dict[tuple[str, str], list[StoredChunk]]:
    out: dict[tuple[str, str], list[StoredChunk]] = defaultdict(list)
    for c in chunks:
        out[(c.tenant, c.document_id)].append(c)
    return out


def find_drift(dense: Sequence[StoredChunk], keyword: Sequence[StoredChunk]) -> list[Drift]:
    """Compare two inventories document by document."""
    lost = [c.document_id for c in dense if not c.readable]
    d_docs, k_docs = _group(c for c in dense if c.readable), _group(keyword)
    drifts: list[Drift] = []
    if lost:
        shown = ", ".join(lost[:5]) + (", ..." if len(lost) > 5 else "")
        drifts.append(
            Drift(
                "?",
                "?",
                "unreadable",
                f"{len(lost)} dense point(s) without a readable payload ({shown}), from a "
                "damaged segment: never served; reindex restores the documents they held "
                "(missing or mismatched above), a new data_dir drops them",
            )
        )
    for key in sorted(set(d_docs) | set(k_docs)):
        tenant, doc = key
        d, k = d_docs.get(key, []), k_docs.get(key, [])
        if not k:
            drifts.append(Drift(tenant, doc, "missing_keyword", f"{len(d)} dense chunk(s) only"))
            continue
        k_gens = {c.generation for c in k}
        if len(k_gens) != 1:
            drifts.append(Drift(tenant, doc, "chunk_mismatch", f"keyword generations {k_gens}"))
            continue
        (k_gen,) = k_gens
        if not d:
            drifts.append(
                Drift(tenant, doc, "missing_dense", f"{len(k)} keyword chunk(s) only", k_gen)
            )
            continue
        published = {c.generation for c in d if c.published}
        staged = {c.generation for c in d if not c.published}
        current = [c for c in d if c.generation == k_gen]
        if not current:
            # In both stores, so never "partial": --drop-partial deleted a document the
            # keyword store served in full (an outside probe).
            held = sorted({c.generation for c in d})
            drifts.append(
                Drift(tenant, doc, "dense_outdated", f"dense holds {held}, keyword {k_gen}", k_gen)
            )
        elif {c.chunk_id for c in current} != {c.chunk_id for c in k}:
            drifts.append(
                Drift(tenant, doc, "chunk_mismatch", f"generation {k_gen} chunk ids differ", k_gen)
            )
        elif not published:
            drifts.append(Drift(tenant, doc, "unpublished", f"generation {k_gen} staged", k_gen))
        elif published != {k_gen}:
            drifts.append(
                Drift(
                    tenant,
                    doc,
                    "stale_dense",
                    f"dense serves {sorted(published)}, keyword {k_gen}",
                    k_gen,
                )
            )
        elif staged:
            drifts.append(
                Drift(tenant, doc, "orphan_staged", f"staged leftovers {sorted(staged)}", k_gen)
            )
    return drifts


def repair(
    drifts: Sequence[Drift], dense: DenseStore, keyword: KeywordStore, drop_partial: bool = False
) -> list[Drift]:
    """Fix publish-state drift; with ``drop_partial`` also delete one-store-only documents.

    Returns the drifts left unrepaired (those need the document re-ingested from its source).
    """
    fixable = [d for d in drifts if d.kind in REPUBLISH]
    dense.publish_many([(d.tenant, d.document_id, d.keyword_generation) for d in fixable])
    left = [d for d in drifts if d.kind not in REPUBLISH]
    if not drop_partial:
        return left
    remaining = []
    for d in left:
        if d.kind == "missing_keyword":
            dense.delete(d.tenant, d.document_id)
        elif d.kind == "missing_dense":
            keyword.delete(d.tenant, d.document_id)
            dense.delete(d.tenant, d.document_id)
        else:
            remaining.append(d)
    return remaining
