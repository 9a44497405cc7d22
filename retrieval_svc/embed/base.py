"""Embedder interface: text in, L2-normalised float32 vectors out."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np
import numpy.typing as npt


class Embedder(Protocol):
    name: str
    """Identifier recorded with the collection, e.g. ``all-MiniLM-L6-v2-int8/384``."""
    dim: int

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]: ...
