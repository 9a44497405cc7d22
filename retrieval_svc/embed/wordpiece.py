"""The bundled English model's WordPiece tokenizer (vendored, Apache-2.0): our unit of "tokens"."""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path

from tokenizers import Tokenizer

TOKENIZER_PATH = Path(__file__).with_name("minilm_tokenizer.json")
MAX_TOKENS = 256
"""The MiniLM window; longer inputs are truncated."""


def tokenizer() -> Tokenizer:
    """A fresh tokenizer, unpadded, truncated at the model's window."""
    tok = Tokenizer.from_file(str(TOKENIZER_PATH))
    tok.no_padding()
    tok.enable_truncation(MAX_TOKENS)
    return tok


@lru_cache(maxsize=1)
def _counter() -> Tokenizer:
    tok = Tokenizer.from_file(str(TOKENIZER_PATH))
    tok.no_padding()
    tok.no_truncation()
    return tok


def token_counts(words: Sequence[str]) -> list[int]:
    """WordPiece tokens per word (at least 1), without the [CLS]/[SEP] markers."""
    if not words:
        return []
    encoded = _counter().encode_batch(list(words), add_special_tokens=False)
    return [max(1, len(e.ids)) for e in encoded]
