"""The fallback wrapper, the relevance cut points, the result helpers and the factory."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from pathlib import Path

import pytest

from candor.settings import RerankerSettings
from gate_svc.rerank import (
    CohereReranker,
    FallbackReranker,
    LLMEvidenceReranker,
    RelevanceCuts,
    RerankError,
    RerankInput,
    RerankResult,
    RerankScore,
    build_reranker,
    scale_from_relevance,
    with_fallback,
)
from tests.rerank.fakes import CANDIDATES, QUERY


class Scripted:
    """A Reranker that raises, stalls or returns what it is told."""

    name = "scripted"

    def __init__(
        self, *, raises: Exception | None = None, stall: float = 0.0, scores: int | None = None
    ) -> None:
        self.raises, self.stall, self.scores = raises, stall, scores
        self.closed = False

    async def rerank(
        self, query: str, candidates: Sequence[RerankInput], timeout_seconds: float
    ) -> RerankResult:
        if self.stall:
            await asyncio.sleep(self.stall)
        if self.raises is not None:
            raise self.raises
        chosen = candidates if self.scores is None else candidates[: self.scores]
        return RerankResult(
            self.name, tuple(RerankScore(c.chunk_id, 0.9, 3, "answers") for c in chosen), 0.001
        )

    async def aclose(self) -> None:
        self.closed = True


async def test_a_success_passes_through() -> None:
    result = await with_fallback(Scripted()).rerank(QUERY, CANDIDATES, 1.0)
    assert not result.fallback and len(result.scores) == len(CANDIDATES)


async def test_a_rerank_error_becomes_a_fallback_result() -> None:
    inner = Scripted(raises=RerankError("UPSTREAM_REJECTED", "HTTP 401: invalid api token"))
    result = await with_fallback(inner).rerank(QUERY, CANDIDATES, 1.0)
    assert result == RerankResult(
        backend="scripted",
        scores=(),
        latency_seconds=result.latency_seconds,
        fallback=True,
        error="UPSTREAM_REJECTED: HTTP 401: invalid api token",
        error_reason="UPSTREAM_REJECTED",
    )


async def test_any_exception_becomes_a_fallback_result() -> None:
    result = await with_fallback(Scripted(raises=KeyError("choices"))).rerank(QUERY, CANDIDATES, 1)
    assert result.fallback and result.error_reason == "INTERNAL"
    assert result.error == "INTERNAL: KeyError: 'choices'"


async def test_a_reranker_that_ignores_its_budget_is_cut_off() -> None:
    started = time.perf_counter()
    result = await with_fallback(Scripted(stall=30.0)).rerank(QUERY, CANDIDATES, 0.2)
    elapsed = time.perf_counter() - started
    assert 0.2 - 0.02 <= elapsed < 0.2 + 0.4
    assert result.fallback and result.error_reason == "TIMEOUT"


async def test_no_budget_left_falls_back_at_once() -> None:
    inner = Scripted()
    result = await with_fallback(inner).rerank(QUERY, CANDIDATES, 0.0)
    assert result.fallback and result.error_reason == "TIMEOUT"
    assert result.latency_seconds < 0.05


async def test_a_result_that_skips_candidates_is_rejected() -> None:
    result = await with_fallback(Scripted(scores=2)).rerank(QUERY, CANDIDATES, 1.0)
    assert result.fallback and result.error_reason == "MALFORMED_RESPONSE"


async def test_cancellation_from_the_caller_is_not_swallowed() -> None:
    task = asyncio.create_task(with_fallback(Scripted(stall=30.0)).rerank(QUERY, CANDIDATES, 10))
    await asyncio.sleep(0.05)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_wrapping_is_idempotent_and_closes_the_inner_reranker() -> None:
    inner = Scripted()
    wrapped = with_fallback(inner)
    assert with_fallback(wrapped) is wrapped
    assert wrapped.name == "scripted" and wrapped.inner is inner
    await wrapped.aclose()
    assert inner.closed


# --- cut points and result helpers --------------------------------------------------------------


def test_cut_points_are_inclusive_lower_bounds() -> None:
    cuts = RelevanceCuts()
    assert (cuts.answers, cuts.partial, cuts.supplement) == (0.8, 0.5, 0.15)
    assert [scale_from_relevance(r, cuts) for r in (1.0, 0.8, 0.79, 0.5, 0.49, 0.15, 0.1, 0.0)] == [
        3,
        3,
        2,
        2,
        1,
        1,
        0,
        0,
    ]


def test_cut_points_must_be_ordered() -> None:
    with pytest.raises(ValueError, match="supplement <= partial <= answers"):
        RelevanceCuts(answers=0.4, partial=0.5, supplement=0.1)
    with pytest.raises(ValueError):
        RelevanceCuts(answers=1.2)


def test_ranked_and_relevant() -> None:
    result = RerankResult(
        "cohere",
        (
            RerankScore("a", 0.55, 2, "partial"),
            RerankScore("b", 0.12, 0, "no_match"),
            RerankScore("c", 0.91, 3, "answers"),
            RerankScore("d", 0.6, 2, "partial"),
        ),
        0.05,
    )
    assert [s.chunk_id for s in result.ranked()] == ["c", "d", "a", "b"]
    assert [s.chunk_id for s in result.relevant()] == ["c", "d", "a"]
    assert [s.chunk_id for s in result.relevant(3)] == ["c"]
    assert result.top_scale == 3 and result.top_relevance == 0.91
    assert result.by_chunk_id()["b"].label == "no_match"
    empty = RerankResult("cohere", (), 0.0, fallback=True, error="TIMEOUT: x")
    assert empty.top_scale is None and empty.relevant() == ()


# --- factory ------------------------------------------------------------------------------------


# The real settings class: the factory reads exactly these fields.
Config = RerankerSettings


async def test_build_reranker_from_settings(tmp_path: Path) -> None:
    assert build_reranker(Config()) is None

    key = tmp_path / "key"
    key.write_text("co-key")
    co = build_reranker(Config(backend="cohere", api_key_file=str(key), partial_at=0.4))
    assert isinstance(co, FallbackReranker) and isinstance(co.inner, CohereReranker)
    assert co.inner.model == "rerank-v3.5"
    assert co.inner.cuts == RelevanceCuts(0.8, 0.4, 0.15)
    await co.aclose()

    llm = build_reranker(Config(backend="llm", base_url="http://vllm:8000/v1", model="qwen"))
    assert isinstance(llm, FallbackReranker) and isinstance(llm.inner, LLMEvidenceReranker)
    assert llm.name == "llm_evidence"
    await llm.aclose()


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (Config(backend="jina"), "gate.reranker.backend must be one of none, cohere, llm"),
        (Config(backend="llm", model="qwen"), "gate.reranker.base_url is required"),
        (Config(backend="llm", base_url="http://x/v1"), "gate.reranker.model is required"),
        (Config(backend="cohere"), "needs api_key_file or api_key"),
        (
            Config(backend="cohere", api_key="k", answers_at=0.3),
            "gate.reranker.answers_at/partial_at/supplement_at",
        ),
    ],
)
def test_build_reranker_rejects_unworkable_settings(config: Config, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace(".", r"\.")):
        build_reranker(config)
