"""gate_svc.refusal: stopword-vote language detection and the refusal message table."""

from __future__ import annotations

import pytest

from gate_svc.policy import PolicyError, parse_policy
from gate_svc.refusal import DEFAULT_MESSAGES, detect_language, refusal_message


@pytest.mark.parametrize(
    ("query", "lang"),
    [
        ("How do I reset my password?", "en"),
        ("What is the price of the Pro plan?", "en"),
        ("Wie kann ich mein Passwort ändern?", "de"),
        ("Was ist der Preis?", "de"),
        ("Comment je change mon mot de passe ?", "fr"),
        ("Où est la facture ?", "fr"),
        ("¿Cómo puedo cambiar mi contraseña?", "es"),
        ("¿Dónde está el recibo?", "es"),
    ],
)
def test_detect_language_short_questions(query: str, lang: str) -> None:
    assert detect_language(query) == lang


def test_detect_language_without_votes_returns_default() -> None:
    assert detect_language("PX-412 tracking 12345") == "en"
    assert detect_language("PX-412 tracking 12345", default="de") == "de"
    assert detect_language("") == "en"


def test_refusal_message_follows_detected_language() -> None:
    message, lang = refusal_message("Wie kann ich mein Passwort ändern?", "", {})
    assert (message, lang) == (DEFAULT_MESSAGES["de"], "de")


@pytest.mark.parametrize(
    "hint", ["de-DE", "de", "DE", "de-AT", "de_DE", "de.UTF-8", "de@euro", "de_DE.UTF-8@euro"]
)
def test_refusal_message_honours_a_language_hint(hint: str) -> None:
    message, lang = refusal_message("How do I reset my password?", hint, {})
    assert lang == "de"
    assert message == "Dazu habe ich in der Wissensdatenbank keine Informationen."


def test_unknown_hint_falls_back_to_default_language() -> None:
    message, lang = refusal_message("PX-412?", "ja-JP", {}, default_language="fr")
    assert (message, lang) == (DEFAULT_MESSAGES["fr"], "fr")


def test_config_message_overrides_the_table() -> None:
    custom = {"en": "Nothing on that, sorry.", "sv": "Ingen information."}
    assert refusal_message("How do I reset my password?", "", custom) == (
        "Nothing on that, sorry.",
        "en",
    )
    assert refusal_message("anything", "sv-SE", custom) == ("Ingen information.", "sv")
    # languages the config does not mention still come from the table
    assert refusal_message("anything", "es", custom) == (DEFAULT_MESSAGES["es"], "es")


def test_every_table_language_has_a_message() -> None:
    assert set(DEFAULT_MESSAGES) >= {"en", "de", "fr", "es"}
    assert all(DEFAULT_MESSAGES.values())


def test_unsupported_hint_falls_back_to_the_detected_language() -> None:
    _, lang = refusal_message("Wie kann ich mein Passwort ändern?", "ja-JP", {})
    assert lang == "de"


def test_a_valid_policy_never_makes_refusal_raise() -> None:
    try:
        policy = parse_policy("version: v1\ndefault_language: ja\n")
    except PolicyError:
        return  # rejecting the config up front is also a fix
    message, _ = refusal_message("PX-412?", "", policy.refusal_messages, policy.default_language)
    assert message
