"""The LLM backend interface: stream text deltas, then one final Draft with citations."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Protocol

from generator_svc.citations import CitationClaim


@dataclass(frozen=True)
class EvidenceItem:
    chunk_id: str
    title: str
    text: str


@dataclass(frozen=True)
class GenerationInput:
    query: str
    evidence: tuple[EvidenceItem, ...]
    language: str
    tier: str
    clarify_only: bool = False


@dataclass(frozen=True)
class Draft:
    text: str
    citations: tuple[CitationClaim, ...]
    input_tokens: int
    output_tokens: int
    is_clarification: bool = False


class LLMBackend(Protocol):
    name: str

    def stream(self, inp: GenerationInput) -> AsyncIterator[str | Draft]:
        """Yield text deltas, then exactly one Draft."""
        ...
