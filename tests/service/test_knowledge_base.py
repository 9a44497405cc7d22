"""The knowledge base over the real embedded stores (Qdrant Edge, tantivy) and the real model."""

from __future__ import annotations

import asyncio
import dataclasses
import errno
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from retrieval_svc.embed.minilm import MiniLMEmbedder
from retrieval_svc.ingest import SourceDocument
from retrieval_svc.knowledge_base import (
    CollectionRecordUnreadable,
    EmbedderMismatch,
    KnowledgeBase,
    RetrieveParams,
    check_collection,
    environment_failure,
    record_collection,
)
from retrieval_svc.reconcile import find_drift
from retrieval_svc.service import no_arm_answered
from retrieval_svc.stores import data_dir
from retrieval_svc.stores.base import CURATED_ANSWER as CURATED
from retrieval_svc.stores.base import Hit, StoreReadOnly
from retrieval_svc.stores.data_dir import MIB
from retrieval_svc.stores.edge import EdgeDenseStore
from retrieval_svc.stores.tantivy_store import TantivyKeywordStore
from tests.helpers import run_with_file_size_limit

DOCS = {
    "tides": (
        "Tides",
        "## Why tides happen\n\nThe Moon's gravity pulls the oceans, so most "
        "coasts see two high tides and two low tides every lunar day of 24 hours 50 minutes.",
    ),
    "bread": (
        "Sourdough",
        "## Starter\n\nA sourdough starter is flour and water fermented by wild "
        "yeast and lactobacilli. Feed it daily at a one-to-one ratio by weight.",
    ),
    "bikes": (
        "Bicycle tyres",
        "## Pressure\n\nRoad bicycle tyres usually run at 80 to 100 psi, "
        "while mountain bike tyres run far lower, around 25 to 35 psi.",
    ),
}


@pytest.fixture(scope="module")
def embedder() -> MiniLMEmbedder:
    return MiniLMEmbedder()


@pytest.fixture
def kb(tmp_path: Path, embedder: MiniLMEmbedder) -> Iterator[KnowledgeBase]:
    base = KnowledgeBase(
        embedder,
        EdgeDenseStore(tmp_path / "dense", embedder.dim),
        TantivyKeywordStore(tmp_path / "keyword"),
    )
    docs = [SourceDocument("t1", doc_id, title, text, 1) for doc_id, (title, text) in DOCS.items()]
    assert [r.outcome for r in base.upsert(docs)] == ["written"] * 3
    yield base
    base.close()


def _retrieve(kb: KnowledgeBase, query: str, tenant: str = "t1", **kw: object):  # type: ignore[no-untyped-def]
    return asyncio.run(kb.retrieve(RetrieveParams(tenant=tenant, query=query, **kw), 2.0))  # type: ignore[arg-type]


def test_hybrid_retrieval_fuses_both_arms(kb: KnowledgeBase) -> None:
    result = _retrieve(kb, "why are there two high tides a day")
    top = result.candidates[0]
    assert top.chunk.document_id == "tides"
    assert top.in_both and top.dense is not None and top.keyword is not None
    assert 0.3 < top.dense.score <= 1.0 and top.keyword.score > 0
    assert top.fused_score == pytest.approx(1 / 61 + 1 / 61)
    assert [a.state for a in result.arms] == ["ok", "ok"] and not result.degraded


def test_tenants_never_see_each_others_chunks(kb: KnowledgeBase) -> None:
    assert _retrieve(kb, "sourdough starter", tenant="t2").candidates == []


def test_changed_document_replaces_its_chunks_and_retry_is_idempotent(kb: KnowledgeBase) -> None:
    doc = SourceDocument("t1", "tides", "Tides", "Completely new text about lighthouses.", 1)
    kb.upsert([doc])
    kb.upsert([doc])  # a retry lands on the same points
    for mode in ("dense", "keyword"):
        hits = [
            c
            for c in _retrieve(kb, "tides lighthouses", mode=mode).candidates
            if c.chunk.document_id == "tides"
        ]
        assert len(hits) == 1 and "lighthouses" in hits[0].chunk.text, mode
    assert not any("Moon" in c.chunk.text for c in _retrieve(kb, "Moon gravity oceans").candidates)


def test_a_failing_arm_degrades_instead_of_failing(kb: KnowledgeBase) -> None:
    def broken(tenant: str, query: str, limit: int) -> list[Hit]:
        raise ConnectionError("keyword store down")

    kb._keyword.search = broken  # type: ignore[method-assign]
    result = _retrieve(kb, "bicycle tyre pressure")
    assert result.degraded
    states = {a.arm: a.state for a in result.arms}
    assert states == {"dense": "ok", "keyword": "error"}
    assert result.candidates[0].chunk.document_id == "bikes"
    assert not result.candidates[0].in_both


def _slow_dense(kb: KnowledgeBase, seconds: float = 1.0) -> None:
    """The dense store answers, but only after ``seconds``."""
    real = kb._dense.search

    def slow(*args: object) -> list[Hit]:
        time.sleep(seconds)
        return real(*args)  # type: ignore[arg-type]

    kb._dense.search = slow  # type: ignore[method-assign]


def test_a_slow_arm_times_out_within_its_budget(kb: KnowledgeBase) -> None:
    _slow_dense(kb)
    start = time.perf_counter()
    result = asyncio.run(kb.retrieve(RetrieveParams(tenant="t1", query="sourdough"), 0.2))
    assert time.perf_counter() - start < 0.8
    assert {a.arm: a.state for a in result.arms} == {"dense": "timeout", "keyword": "ok"}
    assert result.candidates[0].chunk.document_id == "bread"


def test_an_arm_cut_short_by_the_callers_deadline_is_not_a_slow_store(kb: KnowledgeBase) -> None:
    _slow_dense(kb)
    params = RetrieveParams(tenant="t1", query="sourdough")
    result = asyncio.run(kb.retrieve(params, 0.2, caller_bound=True))
    dense = next(a for a in result.arms if a.arm == "dense")
    assert (dense.state, result.degraded) == ("deadline", True)
    assert "caller's deadline" in dense.detail
    # Both arms out of the caller's time is the caller's deadline, not an outage.
    down = no_arm_answered([dense, dataclasses.replace(dense, arm="keyword")])
    assert down is not None and down[0] == grpc.StatusCode.DEADLINE_EXCEEDED
    timeout = dataclasses.replace(dense, state="timeout")
    error = dataclasses.replace(dense, arm="keyword", state="error")
    assert no_arm_answered([timeout, error])[0] == grpc.StatusCode.UNAVAILABLE  # type: ignore[index]
    assert no_arm_answered([timeout, dataclasses.replace(error, state="ok")]) is None


def test_a_hung_keyword_store_does_not_take_the_dense_arm_down_with_it(kb: KnowledgeBase) -> None:
    real = kb._keyword.search

    def hung(*args: object) -> list[Hit]:
        time.sleep(1.5)  # holds its thread, as a stalled OpenSearch does until its client times out
        return real(*args)  # type: ignore[arg-type]

    kb._keyword.search = hung  # type: ignore[method-assign]

    async def many() -> list[object]:
        params = RetrieveParams(tenant="t1", query="bicycle tyre pressure")
        return await asyncio.gather(*(kb.retrieve(params, 0.5) for _ in range(8)))

    results = asyncio.run(many())
    for result in results:
        states = {a.arm: a.state for a in result.arms}  # type: ignore[attr-defined]
        assert states == {"dense": "ok", "keyword": "timeout"}, states


def test_a_delete_retried_after_one_store_failed_reports_deleted(kb: KnowledgeBase) -> None:
    real = kb._keyword.delete

    def down(tenant: str, document_id: str) -> int:
        raise ConnectionError("keyword store down")

    kb._keyword.delete = down  # type: ignore[method-assign]
    [first] = kb.delete("t1", ["bread"])
    assert first.outcome == "failed"
    kb._keyword.delete = real  # type: ignore[method-assign]
    [retry] = kb.delete("t1", ["bread"])
    assert (retry.outcome, retry.chunks) == ("deleted", 1)
    assert all(
        c.chunk.document_id != "bread"
        for c in _retrieve(kb, "sourdough starter", mode="keyword").candidates
    )


def test_with_a_store_down_a_batch_fails_at_once_not_document_by_document(
    kb: KnowledgeBase,
) -> None:
    calls = 0

    def down(*args: object) -> None:
        nonlocal calls
        calls += 1
        raise ConnectionError("keyword store down")

    def unreachable() -> int:
        raise ConnectionError("keyword store down")

    kb._keyword.replace_many = down  # type: ignore[method-assign]
    kb._keyword.count = unreachable  # type: ignore[method-assign]
    docs = [SourceDocument("t1", f"d{i}", "T", f"Text number {i}.", 1) for i in range(30)]
    results = kb.upsert(docs)
    assert {r.outcome for r in results} == {"failed"}
    assert all("the keyword store is unreachable" in r.error for r in results)
    assert calls == 4  # the batch and its three retries; no document alone


def test_a_disk_too_full_for_a_write_fails_it_naming_the_directory(
    tmp_path: Path, embedder: MiniLMEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    kb = KnowledgeBase(
        embedder,
        EdgeDenseStore(tmp_path / "dense", embedder.dim, min_free_bytes=256 * MIB),
        TantivyKeywordStore(tmp_path / "keyword", min_free_bytes=256 * MIB),
    )
    try:
        monkeypatch.setattr(data_dir, "free_bytes", lambda path: 100 * MIB)
        docs = [SourceDocument("t1", f"d{i}", "T", f"Text number {i}.", 1) for i in range(3)]
        results = kb.upsert(docs)
        assert {r.outcome for r in results} == {"failed"}
        for r in results:
            assert f"embedded stores in {tmp_path / 'dense'}: {100 * MIB} bytes free" in r.error
        [deleted] = kb.delete("t1", ["d0"])
        assert deleted.outcome == "failed" and "bytes free" in deleted.error
        assert kb.sizes() == {"dense": 0, "keyword": 0}
    finally:
        kb.close()


@pytest.mark.parametrize(
    "error",
    [
        ValueError("An IO error occurred: 'No space left on device (os error 28)'"),
        ValueError(
            "Failed to open file for write: 'IoError { io_error: Custom { kind: StorageFull, "
            'error: PathError { path: "/d/.tmpX", err: Os { code: 28, kind: StorageFull, '
            'message: "No space left on device" } } }\''
        ),
        OSError(errno.EROFS, "Read-only file system"),
        OSError(errno.EIO, "the keyword index writer in /d died of an I/O error (0 bytes free)"),
        StoreReadOnly("the OpenSearch index is blocked for writes"),
    ],
)
def test_a_failure_no_document_causes_fails_the_batch_at_once_with_its_cause(
    kb: KnowledgeBase, error: Exception
) -> None:
    assert environment_failure(error)
    calls = 0

    def full(*args: object) -> None:
        nonlocal calls
        calls += 1
        raise error

    kb._keyword.replace_many = full  # type: ignore[method-assign]
    docs = [SourceDocument("t1", f"d{i}", "T", f"Text number {i}.", 1) for i in range(5)]
    results = kb.upsert(docs)
    assert calls == 1  # no retries, no document alone: each would only fail the same way
    assert [(r.outcome, r.error) for r in results] == [
        ("failed", f"{type(error).__name__}: {error}")
    ] * 5


def test_failures_that_can_be_one_documents_are_not_taken_for_the_disk() -> None:
    for error in (
        ValueError("document too large"),
        ConnectionError("keyword store went away"),
        OSError(errno.ECONNRESET, "Connection reset by peer (os error 104)"),
    ):
        assert not environment_failure(error), error


def test_delete_removes_from_both_stores(kb: KnowledgeBase) -> None:
    [res] = kb.delete("t1", ["bread"])
    assert res.outcome == "deleted" and res.chunks == 1
    assert all(
        c.chunk.document_id != "bread" for c in _retrieve(kb, "sourdough starter").candidates
    )
    assert kb.delete("t1", ["bread"])[0].outcome == "not_found"


def test_collection_built_by_another_embedder_is_refused(
    tmp_path: Path, embedder: MiniLMEmbedder
) -> None:
    record_collection(tmp_path, embedder)
    check_collection(tmp_path, embedder)  # same embedder: fine

    class Other:
        name, dim = "other-model/768", 768

    with pytest.raises(EmbedderMismatch, match="other-model"):
        check_collection(tmp_path, Other())  # type: ignore[arg-type]


@pytest.mark.parametrize("content", [b"", b'{"embedder": "all-MiniLM', b"[384]"])
def test_an_unreadable_collection_record_is_named_with_the_way_out(
    tmp_path: Path, embedder: MiniLMEmbedder, content: bytes
) -> None:
    (tmp_path / "collection.json").write_bytes(content)
    with pytest.raises(CollectionRecordUnreadable, match=rf"{tmp_path}/collection.json .*restore"):
        check_collection(tmp_path, embedder)
    assert (tmp_path / "collection.json").read_bytes() == content


def test_a_collection_record_cut_short_by_a_full_disk_leaves_none(tmp_path: Path) -> None:
    child = run_with_file_size_limit(
        f"""
        from pathlib import Path
        from retrieval_svc.knowledge_base import record_collection
        class Embedder:
            name, dim = "all-MiniLM-L6-v2/384", 384
        try:
            record_collection(Path({str(tmp_path)!r}), Embedder())
        except OSError as exc:
            print(exc.strerror)
        """,
        8,
    )
    assert child.stdout.strip() == "File too large", child.stderr
    assert list(tmp_path.iterdir()) == []


def test_rerun_after_a_mid_write_failure_leaves_exactly_one_copy(kb: KnowledgeBase) -> None:
    real = kb._keyword.replace_many
    calls = {"n": 0}

    def failing(*args: object) -> None:
        calls["n"] += 1
        raise ConnectionError("keyword store went away mid-write")

    kb._keyword.replace_many = failing  # type: ignore[method-assign]
    doc = SourceDocument("t1", "bikes", "Bicycle tyres", "## Pressure\n\n" + "Pump tyres. " * 80, 1)
    [failed] = kb.upsert([doc])
    assert failed.outcome == "failed" and "went away" in failed.error
    assert calls["n"] == 8  # the batch, then the document alone: first try + 3 retries each
    # The old version is still what both arms serve.
    top = _retrieve(kb, "road bicycle tyre pressure psi").candidates[0]
    assert top.chunk.document_id == "bikes" and "psi" in top.chunk.text

    kb._keyword.replace_many = real  # type: ignore[method-assign]
    [ok] = kb.upsert([doc])
    assert ok.outcome == "written" and ok.chunks > 1
    for store in (kb._dense, kb._keyword):
        mine = [c for c in store.inventory() if c.document_id == "bikes"]
        ids = [c.chunk_id for c in mine]
        assert len(ids) == len(set(ids)) == ok.chunks, type(store).__name__
        assert all(c.published for c in mine)
        assert len({c.generation for c in mine}) == 1


def test_a_failed_write_leaves_no_staged_dense_chunks(
    kb: KnowledgeBase, caplog: pytest.LogCaptureFixture
) -> None:
    from retrieval_svc.reconcile import find_drift

    def failing(*args: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    kb._keyword.replace_many = failing  # type: ignore[method-assign]
    changed = SourceDocument("t1", "bikes", "Bicycle tyres", "Tyres now explained anew.", 1)
    new = SourceDocument("t1", "kites", "Kites", "Kites fly on the wind.", 1)
    assert {r.outcome for r in kb.upsert([changed, new])} == {"failed"}
    # A failing backend changes nothing: no drift for verify to report, the old version served.
    assert find_drift(kb._dense.inventory(), kb._keyword.inventory()) == []
    top = _retrieve(kb, "road bicycle tyre pressure psi", mode="dense").candidates[0]
    assert top.chunk.document_id == "bikes" and "psi" in top.chunk.text

    # When even the clean-up fails, it is logged and verify still finds what is left.
    def stuck(*args: object) -> None:
        raise ConnectionError("dense store went away")

    kb._dense.discard_staged = stuck  # type: ignore[method-assign]
    assert {r.outcome for r in kb.upsert([new])} == {"failed"}
    assert "cannot remove a failed write's staged dense chunks" in caplog.text
    drifts = find_drift(kb._dense.inventory(), kb._keyword.inventory())
    assert [(d.document_id, d.kind) for d in drifts] == [("kites", "missing_keyword")]


def test_a_failed_retry_keeps_the_staged_chunks_the_keyword_store_committed(
    kb: KnowledgeBase,
) -> None:
    from retrieval_svc.reconcile import find_drift, repair

    doc = SourceDocument("t1", "tides", "Tides", "Tides now explained by a new theory.", 1)
    real_publish, real_replace = kb._dense.publish_many, kb._keyword.replace_many

    def unpublishable(*args: object) -> None:
        raise ConnectionError("dense store went away before publishing")

    # First write: the keyword commit lands, publishing the dense generation fails.
    kb._dense.publish_many = unpublishable  # type: ignore[method-assign]
    assert {r.outcome for r in kb.upsert([doc])} == {"failed"}
    kb._dense.publish_many = real_publish  # type: ignore[method-assign]

    # The retry (same content, so the same generation) fails at the keyword commit. Its
    # clean-up must not remove the staged chunks the keyword store already serves.
    def failing(*args: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    kb._keyword.replace_many = failing  # type: ignore[method-assign]
    assert {r.outcome for r in kb.upsert([doc])} == {"failed"}
    kb._keyword.replace_many = real_replace  # type: ignore[method-assign]

    drifts = find_drift(kb._dense.inventory(), kb._keyword.inventory())
    assert [(d.document_id, d.kind) for d in drifts] == [("tides", "stale_dense")]
    assert repair(drifts, kb._dense, kb._keyword) == []
    top = _retrieve(kb, "new theory of tides", mode="dense").candidates[0]
    assert "new theory" in top.chunk.text


def test_a_failed_write_keeps_staged_chunks_when_the_keyword_store_cannot_say(
    kb: KnowledgeBase, caplog: pytest.LogCaptureFixture
) -> None:
    from retrieval_svc.reconcile import find_drift, repair

    def failing(*args: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    def unreadable(*args: object) -> list[object]:
        raise ConnectionError("keyword store down")

    kb._keyword.replace_many = failing  # type: ignore[method-assign]
    kb._keyword.holds = unreadable  # type: ignore[method-assign]
    kites = SourceDocument("t1", "kites", "Kites", "Kites fly on the wind.", 1)
    assert {r.outcome for r in kb.upsert([kites])} == {"failed"}
    assert "kept for candor verify" in caplog.text
    drifts = find_drift(kb._dense.inventory(), kb._keyword.inventory())
    assert [(d.document_id, d.kind) for d in drifts] == [("kites", "missing_keyword")]
    assert repair(drifts, kb._dense, kb._keyword, drop_partial=True) == []


def test_verify_finds_and_repair_fixes_drift_between_the_real_stores(kb: KnowledgeBase) -> None:
    from retrieval_svc.ingest import chunk_document, embedding_text
    from retrieval_svc.reconcile import find_drift, repair

    assert find_drift(kb._dense.inventory(), kb._keyword.inventory()) == []
    # A write that died after the keyword commit but before publishing the dense generation.
    doc = SourceDocument("t1", "tides", "Tides", "Tides now explained by a new theory.", 1)
    chunks = chunk_document(doc, 60, 15)
    kb._dense.upsert(chunks, kb.embedder.embed([embedding_text(c) for c in chunks]))
    kb._keyword.replace_many([("t1", "tides", chunks)])
    drifts = find_drift(kb._dense.inventory(), kb._keyword.inventory())
    assert [(d.document_id, d.kind) for d in drifts] == [("tides", "stale_dense")]
    assert repair(drifts, kb._dense, kb._keyword) == []
    assert find_drift(kb._dense.inventory(), kb._keyword.inventory()) == []
    top = _retrieve(kb, "new theory of tides", mode="dense").candidates[0]
    assert "new theory" in top.chunk.text


def test_question_hits_resolve_to_passage_text_or_are_dropped(kb: KnowledgeBase) -> None:
    questions = {"tides": {"tides#p0": ["What makes seawater bulge toward the orb?"]}}
    [written] = kb.upsert([SourceDocument("t1", "tides", "Tides", DOCS["tides"][1], 1)], questions)
    assert (written.chunks, written.question_chunks) == (2, 1)
    [hit] = _retrieve(kb, "seawater bulge orb", mode="keyword").candidates
    assert hit.chunk.chunk_id == "tides#p0c0" and "Moon's gravity" in hit.chunk.text
    assert not hit.chunk.is_question and hit.fused_rank == 1

    def broken(tenant: str, chunk_ids: object) -> list[object]:
        raise ConnectionError("keyword store down")

    kb._keyword.get = broken  # type: ignore[method-assign]
    # Without a readable passage the candidate goes: a question is never evidence.
    assert _retrieve(kb, "seawater bulge orb", mode="keyword").candidates == []
    # A candidate whose passage the arms returned needs no lookup.
    top = _retrieve(kb, "Why are there two high tides? Moon gravity oceans").candidates[0]
    assert top.chunk.chunk_id == "tides#p0c0"


def test_a_question_hits_passage_lookup_keeps_within_the_arms_budget(kb: KnowledgeBase) -> None:
    # After the arms, the lookup took a second full budget on a hung keyword store (4 s for a
    # 2 s arm timeout), and the dense arm's answer was lost with it.
    questions = {"tides": {"tides#p0": ["What makes seawater bulge toward the orb?"]}}
    kb.upsert([SourceDocument("t1", "tides", "Tides", DOCS["tides"][1], 1)], questions)
    real_search, real_get = kb._keyword.search, kb._keyword.get

    def hung_search(*args: object) -> list[Hit]:
        time.sleep(1.0)
        return real_search(*args)  # type: ignore[arg-type]

    def hung_get(*args: object) -> list[object]:
        time.sleep(1.0)
        return real_get(*args)  # type: ignore[arg-type,return-value]

    kb._keyword.search = hung_search  # type: ignore[method-assign]
    kb._keyword.get = hung_get  # type: ignore[method-assign]
    start = time.perf_counter()
    # One dense hit: the question, so its passage must be looked up.
    params = RetrieveParams(tenant="t1", query="seawater bulge orb", candidate_pool=1)
    result = asyncio.run(kb.retrieve(params, 0.4))
    assert time.perf_counter() - start < 0.7
    assert {a.arm: a.state for a in result.arms} == {"dense": "ok", "keyword": "timeout"}
    assert all(not c.chunk.is_question for c in result.candidates)


def test_top_k_counts_candidates_after_question_hits_without_a_passage_go(
    kb: KnowledgeBase,
) -> None:
    # Cut to top_k before the question hits were dropped, a reply held fewer than it could.
    questions = {"tides": {"tides#p0": ["What makes seawater bulge toward the orb?"]}}
    kb.upsert([SourceDocument("t1", "tides", "Tides", DOCS["tides"][1], 1)], questions)

    def broken(tenant: str, chunk_ids: object) -> list[object]:
        raise ConnectionError("keyword store down")

    kb._keyword.get = broken  # type: ignore[method-assign]
    real = kb._dense.search

    def question_only_for_tides(*args: object) -> list[Hit]:
        hits: list[Hit] = real(*args)  # type: ignore[arg-type]
        return [h for h in hits if h.chunk.document_id != "tides" or h.chunk.is_question]

    kb._dense.search = question_only_for_tides  # type: ignore[method-assign]
    result = _retrieve(kb, "What makes seawater bulge toward the orb?", mode="dense", top_k=2)
    assert len(result.candidates) == 2
    assert [c.fused_rank for c in result.candidates] == [1, 2]
    assert all(not c.chunk.is_question for c in result.candidates)


def test_a_dense_arm_that_timed_out_leaves_question_hits_their_passage(kb: KnowledgeBase) -> None:
    # The lookup was given what the arms left: after a dense timeout, nothing, and the keyword
    # arm's question-found passage was dropped though the keyword store answered.
    questions = {"tides": {"tides#p0": ["What makes seawater bulge toward the orb?"]}}
    kb.upsert([SourceDocument("t1", "tides", "Tides", DOCS["tides"][1], 1)], questions)
    _slow_dense(kb)
    params = RetrieveParams(tenant="t1", query="seawater bulge orb", candidate_pool=1)
    result = asyncio.run(kb.retrieve(params, 0.4))
    assert {a.arm: a.state for a in result.arms} == {"dense": "timeout", "keyword": "ok"}
    assert [(c.chunk.chunk_id, c.chunk.is_question) for c in result.candidates] == [
        ("tides#p0c0", False)
    ]


def test_the_passage_lookup_never_outlives_the_callers_deadline(kb: KnowledgeBase) -> None:
    # With the arm's own budget the lookup ran a second one past a deadline the caller had
    # left just above it (dense hung, keyword slow to fetch): the whole reply was lost.
    questions = {"tides": {"tides#p0": ["What makes seawater bulge toward the orb?"]}}
    kb.upsert([SourceDocument("t1", "tides", "Tides", DOCS["tides"][1], 1)], questions)
    _slow_dense(kb)
    real_get = kb._keyword.get

    def slow_get(*args: object) -> list[object]:
        time.sleep(1.0)
        return real_get(*args)  # type: ignore[arg-type,return-value]

    kb._keyword.get = slow_get  # type: ignore[method-assign]
    params = RetrieveParams(tenant="t1", query="seawater bulge orb", candidate_pool=1)
    start = time.perf_counter()
    asyncio.run(kb.retrieve(params, 0.4, caller_bound=False, time_left=0.5))
    assert time.perf_counter() - start < 0.75


def test_an_expansion_widens_the_search_but_the_query_scores_what_it_finds(
    kb: KnowledgeBase,
) -> None:
    # A rewrite padded with the passage's own words ("fermented starter flour water daily")
    # scored the sourdough passage far above what "How do I keep my bread dough alive?"
    # earns, and the gate read those scores as the question's.
    query = "How do I keep my bread dough alive?"
    padding = "sourdough starter flour water fermented wild yeast feed daily ratio weight"
    plain = {c.chunk.chunk_id: c for c in _retrieve(kb, query).candidates}
    padded = _retrieve(kb, padding).candidates[0]
    widened = _retrieve(kb, query, expansion=padding).candidates
    top = widened[0]
    assert top.chunk.document_id == "bread"
    assert top.dense is not None and padded.dense is not None
    assert top.dense.score < padded.dense.score  # not the padding's cosine
    own = plain[top.chunk.chunk_id]  # a small knowledge base: the query alone finds it too
    assert own.dense is not None
    assert top.dense.score == pytest.approx(own.dense.score, abs=1e-4)
    # The keyword score is the query's own BM25 for that chunk, or none: never the padding's.
    if top.keyword is not None:
        assert own.keyword is not None
        assert top.keyword.score == pytest.approx(own.keyword.score)
    assert padded.keyword is not None and (
        top.keyword is None or top.keyword.score < padded.keyword.score
    )


def test_a_reingest_with_other_chunk_settings_replaces_every_window_in_both_stores(
    kb: KnowledgeBase,
) -> None:
    # Positional chunk ids are the same under other settings; sharing a generation, the old
    # windows stayed published in the dense store beside the new keyword ones, unseen by
    # verify (an outside probe: 29 dense windows against 5 keyword chunks).
    text = "## Long\n\n" + " ".join(f"w{i}x word{i}" for i in range(300))
    doc = SourceDocument("t1", "long", "Long", text, 1)
    assert [r.outcome for r in kb.upsert([doc])] == ["written"]
    before = [c.chunk_id for c in kb._keyword.inventory() if c.document_id == "long"]
    wider = KnowledgeBase(kb.embedder, kb._dense, kb._keyword, chunk_tokens=200, overlap_tokens=30)
    [written] = wider.upsert([doc])
    assert written.outcome == "written" and written.chunks < len(before)
    dense = [c for c in kb._dense.inventory() if c.document_id == "long"]
    keyword = [c for c in kb._keyword.inventory() if c.document_id == "long"]
    assert sorted(c.chunk_id for c in dense) == sorted(c.chunk_id for c in keyword)
    assert all(c.published for c in dense) and len(dense) == written.chunks
    assert len({c.generation for c in dense + keyword}) == 1
    assert find_drift(kb._dense.inventory(), kb._keyword.inventory()) == []


def test_a_long_curated_answer_still_matches_its_own_question(kb: KnowledgeBase) -> None:
    # Embedded whole, a long answer drowned its question: asked word for word, its cosine
    # fell under the gate's curated bound (0.43 at 1,300 characters) and it was refused.
    from gate_svc.policy import PolicyConfig

    question = "How do I change the email address on my account?"
    filler = (
        "Our warehouse in Rotterdam ships pallets by rail and by barge; customs forms for "
        "pallets are filed by the freight team, who also book the container slots. "
    )
    answer = "Go to Settings > Profile, edit the email field and confirm the link. " + filler * 8
    doc = SourceDocument("t1", "faq-email", "Account email", answer, CURATED, question=question)
    assert [r.outcome for r in kb.upsert([doc])] == ["written"]
    top = _retrieve(kb, question, mode="dense").candidates[0]
    assert top.chunk.document_id == "faq-email" and top.dense is not None
    assert top.dense.score >= PolicyConfig("v").curated_min_cosine
    assert answer.strip() in top.chunk.text  # the whole answer is still what is served


def test_a_document_the_stores_hold_at_two_versions_is_read_at_the_keyword_stores(
    kb: KnowledgeBase,
) -> None:
    # A publish that fails leaves the dense store serving the old text under the same chunk
    # ids until verify --repair, while the keyword store serves the new.
    _publish_fails(kb, NEW_TIDES)
    result = _retrieve(kb, "why do tides happen, two high tides a day")
    tides = [c for c in result.candidates if c.chunk.document_id == "tides"]
    assert [c.chunk.text for c in tides] == ["Why tides happen\n\nTides are caused by the Moon."]
    assert tides[0].dense is None and tides[0].keyword is not None
    assert result.out_of_step == {("t1", "tides")}
    # The other documents are untouched, and so is an operator's view of every version.
    assert {c.chunk.document_id for c in result.candidates} == {"tides", "bread", "bikes"}
    everything = _retrieve(kb, "why do tides happen", include_unpublished=True)
    assert not everything.out_of_step

    # Once the stores are in step again nothing is settled.
    from retrieval_svc.reconcile import find_drift, repair

    assert (
        repair(find_drift(kb._dense.inventory(), kb._keyword.inventory()), kb._dense, kb._keyword)
        == []
    )
    again = _retrieve(kb, "why do tides happen, two high tides a day")
    assert not again.out_of_step
    assert again.candidates[0].chunk.text.endswith("Tides are caused by the Moon.")
    assert again.candidates[0].in_both


NEW_TIDES = SourceDocument(
    "t1", "tides", "Tides", "## Why tides happen\n\nTides are caused by the Moon.", 1
)


def _publish_fails(kb: KnowledgeBase, doc: SourceDocument) -> None:
    real_publish = kb._dense.publish_many

    def unpublishable(*args: object) -> None:
        raise ConnectionError("dense store went away before publishing")

    kb._dense.publish_many = unpublishable  # type: ignore[method-assign]
    assert {r.outcome for r in kb.upsert([doc])} == {"failed"}
    kb._dense.publish_many = real_publish  # type: ignore[method-assign]


# No word of it is in the new tides text: only the dense arm can find the tides document.
BY_MEANING = "ocean water level rising and falling twice daily"


@pytest.mark.parametrize("mode", ["hybrid", "dense"])
def test_old_text_only_the_dense_arm_finds_is_not_served(kb: KnowledgeBase, mode: str) -> None:
    before = _retrieve(kb, BY_MEANING, mode=mode)
    assert before.candidates[0].chunk.document_id == "tides"
    assert not before.out_of_step

    _publish_fails(kb, NEW_TIDES)
    by_keyword = _retrieve(kb, BY_MEANING, mode="keyword")
    assert "tides" not in {c.chunk.document_id for c in by_keyword.candidates}
    after = _retrieve(kb, BY_MEANING, mode=mode)
    assert "tides" not in {c.chunk.document_id for c in after.candidates}
    assert after.out_of_step == {("t1", "tides")}
    assert [c.fused_rank for c in after.candidates] == list(range(1, len(after.candidates) + 1))


def test_a_candidate_left_out_makes_room_for_the_next_one_checked_in_turn(
    kb: KnowledgeBase,
) -> None:
    _publish_fails(kb, NEW_TIDES)
    (only,) = _retrieve(kb, BY_MEANING, mode="dense", top_k=1).candidates
    assert only.chunk.document_id != "tides" and only.fused_rank == 1


def test_a_document_whose_dense_delete_failed_is_not_served(kb: KnowledgeBase) -> None:
    real_delete = kb._dense.delete

    def undeletable(*args: object) -> int:
        raise ConnectionError("dense store went away while deleting")

    kb._dense.delete = undeletable  # type: ignore[method-assign]
    assert [r.outcome for r in kb.delete("t1", ["tides"])] == ["failed"]
    kb._dense.delete = real_delete  # type: ignore[method-assign]

    result = _retrieve(kb, "why are there two high tides a day")
    assert "tides" not in {c.chunk.document_id for c in result.candidates}
    assert result.out_of_step == {("t1", "tides")}
    # The retried delete finds it in the dense store alone and removes it.
    assert [r.outcome for r in kb.delete("t1", ["tides"])] == ["deleted"]
    assert not _retrieve(kb, "why are there two high tides a day").out_of_step


def test_dense_only_candidates_stay_when_the_keyword_store_cannot_say(
    kb: KnowledgeBase, caplog: pytest.LogCaptureFixture
) -> None:
    def unreadable(*args: object) -> list[object]:
        raise ConnectionError("keyword store went away after searching")

    kb._keyword.holds = unreadable  # type: ignore[method-assign]
    result = _retrieve(kb, BY_MEANING)
    assert result.candidates[0].chunk.document_id == "tides"
    assert not result.out_of_step
    assert "cannot check dense-only candidates" in caplog.text


def test_an_old_versions_question_does_not_vouch_for_the_new_versions_passage(
    kb: KnowledgeBase,
) -> None:
    # v1's question points at its first section, the warranty; in v2 (whose publish failed,
    # so the dense store still holds v1 and its question) the first section is the colours.
    v1 = (
        "## Warranty\n\nEvery frobnicator is covered for 24 months from purchase.\n\n"
        "## Colours\n\nAvailable in red and blue."
    )
    v2 = "## Colours\n\nAvailable in red and blue.\n\n## Cleaning\n\nWipe with a damp cloth."
    questions = {"gadget": {"gadget#p0": ["How long is the guarantee on my device?"]}}

    def doc(text: str) -> SourceDocument:
        return SourceDocument("t1", "gadget", "Frobnicator", text, 1)

    assert kb.upsert([doc(v1)], questions=questions)[0].outcome == "written"
    _publish_fails(kb, doc(v2))
    # A pool of one: the question is the dense arm's only hit, without its passage.
    result = _retrieve(kb, "guarantee period for my device?", candidate_pool=1)
    assert [a.state for a in result.arms] == ["ok", "ok"]
    served = [c.chunk.text for c in result.candidates if c.chunk.document_id == "gadget"]
    assert not any(t.startswith("Colours") for t in served), served
    assert ("t1", "gadget") in result.out_of_step


def test_a_store_that_times_out_is_not_tried_once_per_document(kb: KnowledgeBase) -> None:
    # Slow, not down: a count still answers, so the batch falls back to one document at a time.
    attempts: list[int] = []

    def slow(documents: list[object]) -> None:
        attempts.append(len(documents))
        raise TimeoutError("ConnectionTimeout caused by - ReadTimeoutError(read timeout=30)")

    kb._keyword.replace_many = slow  # type: ignore[method-assign]
    docs = [SourceDocument("t1", f"d{i}", "T", f"## S\n\nText number {i}.", 1) for i in range(16)]
    results = kb.upsert(docs)
    # The batch once and the first document once; no retries of a timeout, no 14 more waits.
    assert attempts == [16, 1]
    assert {r.outcome for r in results} == {"failed"}
    assert "ReadTimeoutError" in results[0].error
    assert all(r.error.startswith("not written: a store timed out") for r in results[1:])


def test_one_document_failing_alone_still_lets_the_others_land(kb: KnowledgeBase) -> None:
    real = kb._keyword.replace_many

    def picky(documents: list[tuple[str, str, object]]) -> None:
        if any(doc == "bad" for _, doc, _ in documents):
            raise ValueError("the store refuses this document")
        real(documents)  # type: ignore[arg-type]

    kb._keyword.replace_many = picky  # type: ignore[method-assign]
    docs = [SourceDocument("t1", d, "T", f"## S\n\nText of {d}.", 1) for d in ("a", "bad", "c")]
    assert [r.outcome for r in kb.upsert(docs)] == ["written", "failed", "written"]


def test_drop_partial_keeps_a_document_both_stores_hold_at_different_versions(
    kb: KnowledgeBase,
) -> None:
    from retrieval_svc.ingest import chunk_document
    from retrieval_svc.reconcile import find_drift, repair

    # The keyword store holds v2; the dense store only v1 (v2's dense copy was lost).
    v2 = SourceDocument("t1", "tides", "Tides", "## Why tides happen\n\nThe Moon, mostly.", 1)
    kb._keyword.replace("t1", "tides", chunk_document(v2, 80, 20))
    drifts = find_drift(kb._dense.inventory(), kb._keyword.inventory())
    assert [(d.document_id, d.kind) for d in drifts] == [("tides", "dense_outdated")]
    # Not a partial document: it stays for re-ingesting, in both stores.
    assert repair(drifts, kb._dense, kb._keyword, drop_partial=True) == drifts
    assert (
        _retrieve(kb, "the Moon, mostly", mode="keyword").candidates[0].chunk.document_id == "tides"
    )
