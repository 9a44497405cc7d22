"""The generator's backend, prompt, budget and groundedness options, read from settings.

``from_settings`` reads ``GeneratorSettings`` fields by name with ``getattr``, so it also takes
any object that has some of them (defaults fill the rest), and validates the combination.
"""

from __future__ import annotations

import dataclasses
import typing
from typing import Any

from candor.settings import (
    CohereChatSettings,
    GeneratorSettings,
    LLMSettings,
    OpenAICompatSettings,
)

BACKENDS = ("extractive", "cohere", "openai_compat")


# One home for these fields: the settings dataclasses. The names below are what the generator
# code calls them.
LLMOptions = LLMSettings
CohereOptions = CohereChatSettings
OpenAICompatOptions = OpenAICompatSettings


class GeneratorOptions(GeneratorSettings):
    """``GeneratorSettings`` with the generator's own validation and a tolerant reader."""

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
