"""Language-aware refusal messages: a fixed table per language, the language detected offline.

Detection uses py3langid (a maintained langid.py fork whose model ships in the wheel),
restricted to the languages we have messages for; short or ambiguous queries fall back to the
config's default language.

With a translator configured (``gate.translation``), :func:`localized_refusal` also serves
languages the table lacks: the caller's hint, or the language py3langid detects among *all*
the languages it knows, gets the English message translated; any failure gives the English
message (and says ``en``). Table languages never reach the translator.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Protocol

from candor.chat import UpstreamError

log = logging.getLogger("candor.gate.refusal")

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


_LANGUAGE_CODE = re.compile(r"[a-z]{2,3}")


@lru_cache(maxsize=8)
def _identifier(languages: tuple[str, ...] | None) -> Any:
    """A classifier over ``languages``, or over every language the model knows (None)."""
    import py3langid.langid as langid

    ident = langid.LanguageIdentifier.from_modelpath(
        langid.MODEL_DIR / langid.MODEL_FILE, norm_probs=True
    )
    if languages is not None:
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


@lru_cache(maxsize=1)
def known_languages() -> frozenset[str]:
    """Every language the detector knows (ISO 639-1 codes, mostly)."""
    return frozenset(str(lang) for lang in _identifier(None).nb_classes)


def detect_any_language(text: str) -> str | None:
    """Best-guess language of a query among every language py3langid knows; None if unsure."""
    if sum(ch.isalpha() for ch in text) < _MIN_LETTERS:
        return None
    lang, probability = _identifier(None).classify(text)
    return str(lang) if probability >= MIN_PROBABILITY else None


_LINK = re.compile(r"https?://|www\.|\S+\.(?:com|net|org|io)\b", re.IGNORECASE)


def translation_problem(text: str, source: str, language: str) -> str:
    """Why ``text`` is not a usable ``language`` rendering of refusal ``source`` ("" if it is).

    A model can answer with the source unchanged, another language, its instructions, a
    chatty preamble or a link: none of that may reach a user as the refusal, nor be cached.
    """
    if _LINK.search(text) or set(re.findall(r"\d+", text)) - set(re.findall(r"\d+", source)):
        return "it adds a link or a number the message does not have"
    if len(text) < 0.3 * len(source):
        return f"it is too short ({len(text)} characters)"
    if " ".join(text.casefold().split()) == " ".join(source.casefold().split()):
        return "it is the message unchanged"
    if sum(ch.isalpha() for ch in text) >= _MIN_LETTERS:
        lang, probability = _identifier(None).classify(text)
        if probability >= MIN_PROBABILITY and lang != language:
            return f"it reads as {lang}, not {language}"
    return ""


def hint_language(hint: str) -> str:
    """The primary language of a caller's hint: BCP-47 uses "-", POSIX locales "_" and may
    add a codeset and a modifier, so "de_DE", "fr.UTF-8" and "sr@latin" are German, French
    and Serbian."""
    return re.split(r"[-_.@]", hint or "")[0].lower()


def refusal_message(
    query: str, hint: str, messages: Mapping[str, str], default_language: str = "en"
) -> tuple[str, str]:
    """(message, language): the hint if we have a message for it, else the detected language."""
    table = {**DEFAULT_MESSAGES, **messages}
    lang = hint_language(hint)
    if lang not in table:
        lang = detect_language(query, default_language, tuple(table))
    if lang not in table:
        lang = default_language if default_language in table else "en"
    return table[lang], lang


class Translator(Protocol):
    """What :func:`localized_refusal` needs of ``gate_svc.translation.RefusalTranslator``."""

    def cached(self, message: str, language: str) -> str | None: ...

    async def translate(self, message: str, language: str, timeout_seconds: float) -> str: ...


@dataclass(frozen=True)
class Refusal:
    message: str
    language: str
    """The language of ``message``."""
    translation: str = ""
    """translated, cached or failed when a translation was wanted; empty when the table served."""
    detail: str = ""


def _wanted_language(query: str, hint: str, table: Mapping[str, str]) -> str | None:
    """The language to translate into, or None when the table path should answer."""
    lang = hint_language(hint)
    if lang in table:
        return None
    # Only a language the detector knows: a made-up hint ("qqq") would cost a model call per
    # request and push real translations out of the cache. This also keeps a caller's string
    # out of the prompt.
    if not _LANGUAGE_CODE.fullmatch(lang) or lang not in known_languages():
        lang = detect_any_language(query) or ""
    return lang if _LANGUAGE_CODE.fullmatch(lang) and lang not in table else None


async def localized_refusal(
    query: str,
    hint: str,
    messages: Mapping[str, str],
    default_language: str,
    translator: Translator | None,
    timeout_seconds: float,
) -> Refusal:
    """:func:`refusal_message`, or the English message translated for a language the table
    lacks (within ``timeout_seconds``); never raises."""
    table = {**DEFAULT_MESSAGES, **messages}
    wanted = _wanted_language(query, hint, table) if translator is not None else None
    if translator is None or wanted is None:
        return Refusal(*refusal_message(query, hint, messages, default_language))
    english = table["en"]
    cached = translator.cached(english, wanted)
    if cached is not None:
        return Refusal(cached, wanted, "cached")
    try:
        if timeout_seconds <= 0:
            raise TimeoutError
        async with asyncio.timeout(timeout_seconds):
            text = await translator.translate(english, wanted, timeout_seconds)
    except TimeoutError:
        detail = f"no translation within {max(timeout_seconds, 0):.3g} s"
    except UpstreamError as exc:
        detail = str(exc)
    except Exception as exc:  # a translation must never fail a refusal
        log.exception("refusal translator raised")
        detail = f"{type(exc).__name__}: {exc}"
    else:
        return Refusal(text, wanted, "translated")
    log.warning("refusal not translated", extra={"language": wanted, "detail": detail})
    return Refusal(english, "en", "failed", detail)
