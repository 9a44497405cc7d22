"""Refusal messages for languages the table lacks: gate_svc.refusal.localized_refusal with
gate_svc.translation.RefusalTranslator at the HTTP transport."""

from __future__ import annotations

import time
from typing import Any

import httpx
import pytest

from candor.chat import ChatClient
from candor.settings import TranslationSettings
from gate_svc.refusal import DEFAULT_MESSAGES, detect_any_language, localized_refusal
from gate_svc.translation import RefusalTranslator, build_translator
from tests.rerank.fakes import Recorder, oa_completion, oa_error

ENGLISH = DEFAULT_MESSAGES["en"]
POLISH_QUERY = "Jak mogę zresetować hasło do mojego konta?"
POLISH = "Nie mam informacji na ten temat w bazie wiedzy."


def translator(rec: Recorder, **kw: Any) -> RefusalTranslator:
    chat = ChatClient("http://llm.test/v1", "small", transport=httpx.MockTransport(rec))
    return RefusalTranslator(chat, **kw)


async def refuse(query: str, t: RefusalTranslator | None, hint: str = "", **kw: Any) -> Any:
    args: dict[str, Any] = {"messages": {}, "default_language": "en", "timeout_seconds": 0.5}
    args.update(kw)
    return await localized_refusal(query, hint, translator=t, **args)


def test_detection_covers_languages_outside_the_table() -> None:
    assert "pl" not in DEFAULT_MESSAGES and "sv" not in DEFAULT_MESSAGES
    assert detect_any_language(POLISH_QUERY) == "pl"
    assert detect_any_language("Hur återställer jag mitt lösenord?") == "sv"
    assert detect_any_language("PX-412?") is None  # too short to call


async def test_a_language_outside_the_table_is_translated_from_english() -> None:
    rec = Recorder(oa_completion(f'"{POLISH}"'))
    refusal = await refuse(POLISH_QUERY, translator(rec))
    assert (refusal.message, refusal.language, refusal.translation) == (POLISH, "pl", "translated")
    body = rec.json()
    system, user = body["messages"]
    assert "'pl'" in system["content"] and user == {"role": "user", "content": ENGLISH}
    assert body["max_tokens"] == 128


async def test_a_translation_is_cached_per_language_and_message() -> None:
    rec = Recorder(oa_completion(POLISH))
    t = translator(rec)
    await refuse(POLISH_QUERY, t)
    again = await refuse("Ile kosztuje plan Pro dla mojej firmy w tym roku?", t)
    assert (again.message, again.language, again.translation) == (POLISH, "pl", "cached")
    assert len(rec.requests) == 1
    custom = await refuse(POLISH_QUERY, t, messages={"en": "Nothing on that, sorry."})
    assert custom.translation == "translated" and len(rec.requests) == 2
    assert rec.json(1)["messages"][1]["content"] == "Nothing on that, sorry."


async def test_the_cache_is_bounded() -> None:
    swedish = "Jag har ingen information om detta i kunskapsbasen."

    rec = Recorder(oa_completion(POLISH), oa_completion(swedish))
    t = translator(rec, cache_size=1)
    await refuse(POLISH_QUERY, t)
    await refuse("Hur återställer jag mitt lösenord?", t)
    assert t.cached(ENGLISH, "sv") == swedish and t.cached(ENGLISH, "pl") is None


@pytest.mark.parametrize(
    "reply",
    [
        oa_error(500, "The server had an error"),
        oa_error(429, "Rate limit reached", {"Retry-After": "1"}),
        oa_completion("", refusal="I can't help with that."),
        oa_completion("Sure! Here is the translation:\n\nNie mam informacji."),
        oa_completion("x" * 2000),
        30.0,
    ],
)
async def test_any_translator_failure_gives_the_english_message(reply: Any) -> None:
    rec = Recorder(reply)
    t = translator(rec)
    started = time.perf_counter()
    refusal = await refuse(POLISH_QUERY, t, timeout_seconds=0.3)
    assert time.perf_counter() - started < 0.6
    assert (refusal.message, refusal.language, refusal.translation) == (ENGLISH, "en", "failed")
    assert refusal.detail
    assert t.cached(ENGLISH, "pl") is None  # a failure is not cached


@pytest.mark.parametrize(
    "reply",
    [
        pytest.param(ENGLISH, id="the-message-unchanged"),
        pytest.param("Je n'ai pas d'informations à ce sujet dans la base.", id="another-language"),
        pytest.param("Nie mam informacji, zobacz http://evil.example", id="a-link"),
        pytest.param("Nie mam informacji: odpowiedź to 42.", id="a-number"),
        pytest.param("xx", id="too-short"),
    ],
)
async def test_a_translation_that_is_not_the_message_in_that_language_is_not_used_or_cached(
    reply: str,
) -> None:
    t = translator(Recorder(oa_completion(reply)))
    refusal = await refuse(POLISH_QUERY, t)
    assert (refusal.message, refusal.language, refusal.translation) == (ENGLISH, "en", "failed")
    assert t.cached(ENGLISH, "pl") is None


async def test_a_made_up_hint_costs_no_model_call() -> None:
    rec = Recorder(oa_completion("should not be used"))
    refusal = await refuse("How do I reset my password?", translator(rec), "qqq")
    assert (refusal.language, refusal.translation) == ("en", "") and rec.requests == []


async def test_no_time_left_gives_english_without_a_request() -> None:
    rec = Recorder(oa_completion(POLISH))
    refusal = await refuse(POLISH_QUERY, translator(rec), timeout_seconds=0.0)
    assert refusal.language == "en" and rec.requests == []


@pytest.mark.parametrize(
    ("query", "hint", "lang"),
    [
        ("Come posso reimpostare la password del mio account?", "", "it"),
        ("Wie kann ich mein Passwort ändern?", "", "de"),
        ("How do I reset my password?", "", "en"),
        (POLISH_QUERY, "fr-CA", "fr"),
        ("PX-412?", "", "en"),
    ],
)
async def test_a_table_language_never_calls_the_translator(
    query: str, hint: str, lang: str
) -> None:
    rec = Recorder(oa_completion("should not be used"))
    refusal = await refuse(query, translator(rec), hint)
    assert (refusal.message, refusal.language, refusal.translation) == (
        DEFAULT_MESSAGES[lang],
        lang,
        "",
    )
    assert rec.requests == []


async def test_a_hint_outside_the_table_is_translated_and_a_bad_hint_is_ignored() -> None:
    rec = Recorder(oa_completion("ナレッジベースにこの情報はありません。"))
    refusal = await refuse("How do I reset my password?", translator(rec), "ja-JP")
    assert (refusal.language, refusal.translation) == ("ja", "translated")
    injected = await refuse("How do I reset my password?", translator(rec), "x'; ignore all")
    assert (injected.language, injected.translation) == ("en", "")


async def test_without_a_translator_the_table_path_is_unchanged() -> None:
    refusal = await refuse(POLISH_QUERY, None)
    assert (refusal.message, refusal.language, refusal.translation) == (ENGLISH, "en", "")


def test_build_translator_follows_the_settings() -> None:
    assert build_translator(TranslationSettings()) is None
    on = TranslationSettings(backend="openai_compat", base_url="http://llm.test/v1", model="m")
    assert isinstance(build_translator(on), RefusalTranslator)
