"""Refusal messages for languages the table lacks: the English message, translated by an LLM.

Optional (``gate.translation``). A translation is cached per (language, message) in a bounded
LRU, so a language costs one request per process and message; failures are not cached, so an
endpoint that recovers is used again. What comes back is checked (one line, not absurdly
long) before it reaches a caller. The fallback policy lives in ``gate_svc.refusal``.
"""

from __future__ import annotations

from typing import Final

from candor.chat import MALFORMED_RESPONSE, ChatClient, UpstreamError, clean_reply, client_for
from candor.lru import LRU
from candor.settings import TranslationSettings
from gate_svc.refusal import translation_problem

SYSTEM_PROMPT: Final = (
    "Translate the user's message into the language whose ISO 639 code is '{language}'.\n"
    "Keep its meaning and its polite, plain tone. Reply with the translation alone: "
    "no quotes, no label, no explanation."
)
MAX_GROWTH: Final = 4
"""A translation longer than this many times the message (plus slack) is rejected."""


class RefusalTranslator:
    """Translates refusal messages over an OpenAI-compatible endpoint, with an LRU cache."""

    name = "openai_compat"

    def __init__(self, chat: ChatClient, *, max_output_tokens: int = 128, cache_size: int = 256):
        self._chat = chat
        self._max_tokens = max_output_tokens
        self._cache: LRU[tuple[str, str], str] = LRU(cache_size)

    async def aclose(self) -> None:
        await self._chat.aclose()

    def cached(self, message: str, language: str) -> str | None:
        return self._cache.get((language, message))

    def messages(self, message: str, language: str) -> list[dict[str, str]]:
        return [
            {"role": "system", "content": SYSTEM_PROMPT.format(language=language)},
            {"role": "user", "content": message},
        ]

    async def translate(self, message: str, language: str, timeout_seconds: float) -> str:
        """``message`` in ``language``; raises UpstreamError (never returns an unchecked reply)."""
        reply = await self._chat.complete(
            self.messages(message, language),
            timeout_seconds=timeout_seconds,
            max_tokens=self._max_tokens,
        )
        text = clean_reply(reply, ("translation",))
        if not text or "\n" in text or len(text) > MAX_GROWTH * len(message) + 40:
            raise UpstreamError(MALFORMED_RESPONSE, f"unusable translation: {reply[:120]!r}")
        if why := translation_problem(text, message, language):
            raise UpstreamError(MALFORMED_RESPONSE, f"unusable translation ({why}): {text[:120]!r}")
        self._cache.put((language, message), text)
        return text


def build_translator(settings: TranslationSettings) -> RefusalTranslator | None:
    """The configured translator, or None when ``gate.translation.backend`` is none."""
    chat = client_for(settings, what="translation endpoint")
    if chat is None:
        return None
    return RefusalTranslator(
        chat, max_output_tokens=settings.max_output_tokens, cache_size=settings.cache_size
    )
