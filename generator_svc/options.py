"""The generator's backend, prompt, budget and groundedness options, read from settings.

Mirrors the fields of ``candor.settings.GeneratorSettings`` by name. Fields the settings do not
(yet) define fall back to the defaults here, so this module reads them with ``getattr``;
``from_settings`` therefore works with any object that has (some of) these attributes.
"""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass, field
from typing import Any

BACKENDS = ("extractive", "cohere", "openai_compat")


@dataclass(frozen=True)
class LLMOptions:
    """Shared by the HTTP backends (Cohere, OpenAI-compatible)."""

    timeout_seconds: float = 30.0
    """Per HTTP phase: connect, first byte, and each gap between streamed chunks."""
    connect_timeout_seconds: float = 5.0
    max_retries: int = 2
    """Retries on 429/5xx/connection failure, only before the stream starts."""
    backoff_seconds: float = 0.5
    backoff_max_seconds: float = 8.0
    max_output_tokens: int = 512
    temperature: float = 0.0


@dataclass(frozen=True)
class CohereOptions:
    model: str = "command-a-03-2025"
    api_key: str = ""
    api_key_file: str = ""
    """A mounted secret; wins over api_key. Neither set: the CO_API_KEY environment variable."""
    base_url: str = ""
    """Empty: Cohere's production API (or CO_API_URL)."""


@dataclass(frozen=True)
class OpenAICompatOptions:
    base_url: str = "http://127.0.0.1:8000/v1"
    """Up to, not including, ``/chat/completions``."""
    model: str = ""
    api_key: str = ""
    api_key_file: str = ""
    """A mounted secret; wins over api_key. Neither set: OPENAI_API_KEY, else no auth header."""
    include_usage: bool = True
    """Send ``stream_options.include_usage`` (vLLM, Ollama, llama.cpp support it)."""


@dataclass(frozen=True)
class GeneratorOptions:
    backend: str = "extractive"
    prompts_path: str = ""
    """Prompt templates YAML; empty = generator_svc/prompts_default.yaml."""
    context_budget_tokens: int = 3000
    """Evidence budget in estimated tokens (words x 1.3); <= 0 = unlimited."""
    max_sentences: int = 3
    """Extractive backend: sentences quoted per answer."""
    groundedness: bool = False
    """Seed 003's sentence-level support check after generation (model-free overlap)."""
    groundedness_min_confidence: float = 0.0
    groundedness_max_confidence: float = 1.0
    """Run the check only when the gate's confidence is in [min, max] (the ambiguous band)."""
    llm: LLMOptions = field(default_factory=LLMOptions)
    cohere: CohereOptions = field(default_factory=CohereOptions)
    openai_compat: OpenAICompatOptions = field(default_factory=OpenAICompatOptions)

    @classmethod
    def from_settings(cls, settings: object) -> GeneratorOptions:
        """Read every field from ``settings`` (a GeneratorSettings) where present."""
        options: GeneratorOptions = _read(cls, settings)
        options.validate()
        return options

    def validate(self) -> None:
        checks = [
            (self.backend in BACKENDS, f"generator.backend must be one of {', '.join(BACKENDS)}"),
            (self.llm.timeout_seconds > 0, "generator.llm.timeout_seconds must be > 0"),
            (
                self.llm.connect_timeout_seconds > 0,
                "generator.llm.connect_timeout_seconds must be > 0",
            ),
            (self.llm.max_retries >= 0, "generator.llm.max_retries must be >= 0"),
            (self.llm.backoff_seconds >= 0, "generator.llm.backoff_seconds must be >= 0"),
            (self.llm.max_output_tokens >= 1, "generator.llm.max_output_tokens must be >= 1"),
            (self.max_sentences >= 1, "generator.max_sentences must be >= 1"),
            (
                0 <= self.groundedness_min_confidence <= self.groundedness_max_confidence <= 1,
                "generator.groundedness_{min,max}_confidence must satisfy 0 <= min <= max <= 1",
            ),
            (
                self.backend != "openai_compat" or bool(self.openai_compat.model),
                "generator.openai_compat.model is required for the openai_compat backend",
            ),
        ]
        for ok, message in checks:
            if not ok:
                raise ValueError(message)


def _read(cls: type[Any], source: object) -> Any:
    hints = typing.get_type_hints(cls)
    values: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        tp = hints[f.name]
        if dataclasses.is_dataclass(tp) and isinstance(tp, type):
            values[f.name] = _read(tp, getattr(source, f.name, None))
        elif source is not None and hasattr(source, f.name):
            values[f.name] = getattr(source, f.name)
    return cls(**values)
