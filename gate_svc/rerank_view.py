"""What a policy sees of a reranker's result: the 0-3 scale per chunk and whether it fell back."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class RerankView:
    scale: Mapping[str, int] = field(default_factory=dict)
    """Seed 004's 0-3 relevance per chunk id."""
    fallback: bool = False
    """The reranker failed or timed out; the policy uses retrieval scores instead."""
    error: str = ""
    backend: str = ""
