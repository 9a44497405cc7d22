"""Language-aware refusal messages: a fixed table per language, the language detected offline.

Detection uses py3langid (a maintained langid.py fork whose model ships in the wheel),
restricted to the languages we have messages for; short or ambiguous queries fall back to the
config's default language.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import Any

DEFAULT_MESSAGES: Mapping[str, str] = {
    "en": "I don't have information on this in the knowledge base.",
    "de": "Dazu habe ich in der Wissensdatenbank keine Informationen.",
    "tr": "Bilgi tabanında bu konuda bilgim yok.",
    "fr": "Je n'ai pas d'informations à ce sujet dans la base de connaissances.",
    "es": "No tengo información sobre esto en la base de conocimientos.",
    "it": "Non ho informazioni su questo nella base di conoscenza.",
    "nl": "Ik heb hierover geen informatie in de kennisbank.",
    "pt": "Não tenho informações sobre isso na base de conhecimento.",
}
#: Below this probability (over the candidate languages) a query is too short to call.
MIN_PROBABILITY = 0.7
_MIN_LETTERS = 8


@lru_cache(maxsize=8)
def _identifier(languages: tuple[str, ...]) -> Any:
    import py3langid.langid as langid

    ident = langid.LanguageIdentifier.from_modelpath(
        langid.MODEL_DIR / langid.MODEL_FILE, norm_probs=True
    )
    ident.set_languages(list(languages))
    return ident


def detect_language(
    text: str, default: str = "en", languages: Sequence[str] = tuple(DEFAULT_MESSAGES)
) -> str:
    """Best-guess language of a short query among ``languages``; ``default`` when unsure."""
    if sum(ch.isalpha() for ch in text) < _MIN_LETTERS:
        return default
    lang, probability = _identifier(tuple(sorted(languages))).classify(text)
    return str(lang) if probability >= MIN_PROBABILITY else default


def refusal_message(
    query: str, hint: str, messages: Mapping[str, str], default_language: str = "en"
) -> tuple[str, str]:
    """(message, language): the hint if we have a message for it, else the detected language."""
    table = {**DEFAULT_MESSAGES, **messages}
    lang = (hint or "").split("-")[0].lower()
    if lang not in table:
        lang = detect_language(query, default_language, tuple(table))
    if lang not in table:
        lang = default_language if default_language in table else "en"
    return table[lang], lang
