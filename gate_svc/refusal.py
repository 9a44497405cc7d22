"""Language-aware refusal messages: a fixed table first; detection is a small stopword vote."""

from __future__ import annotations

from collections.abc import Mapping

from candor.text import words

DEFAULT_MESSAGES: Mapping[str, str] = {
    "en": "I don't have information on this in the knowledge base.",
    "de": "Dazu habe ich in der Wissensdatenbank keine Informationen.",
    "fr": "Je n'ai pas d'informations à ce sujet dans la base de connaissances.",
    "es": "No tengo información sobre esto en la base de conocimientos.",
    "it": "Non ho informazioni su questo nella base di conoscenza.",
    "nl": "Ik heb hierover geen informatie in de kennisbank.",
    "pt": "Não tenho informações sobre isso na base de conhecimento.",
}

_STOPWORDS: Mapping[str, frozenset[str]] = {
    "en": frozenset(
        [
            "the",
            "is",
            "are",
            "how",
            "what",
            "when",
            "where",
            "who",
            "which",
            "do",
            "does",
            "can",
            "i",
            "my",
            "to",
            "of",
            "and",
            "a",
            "in",
        ]
    ),
    "de": frozenset(
        [
            "der",
            "die",
            "das",
            "ist",
            "wie",
            "was",
            "wann",
            "wo",
            "wer",
            "kann",
            "ich",
            "mein",
            "und",
            "ein",
            "eine",
            "nicht",
            "mit",
        ]
    ),
    "fr": frozenset(
        [
            "le",
            "la",
            "les",
            "est",
            "comment",
            "quand",
            "où",
            "qui",
            "je",
            "mon",
            "et",
            "un",
            "une",
            "des",
            "du",
            "pas",
            "pour",
        ]
    ),
    "es": frozenset(
        [
            "el",
            "la",
            "los",
            "las",
            "es",
            "cómo",
            "qué",
            "cuándo",
            "dónde",
            "quién",
            "puedo",
            "mi",
            "y",
            "un",
            "una",
            "del",
            "por",
        ]
    ),
    "it": frozenset(
        [
            "il",
            "lo",
            "la",
            "gli",
            "le",
            "è",
            "come",
            "cosa",
            "quando",
            "dove",
            "chi",
            "posso",
            "mio",
            "e",
            "un",
            "una",
            "del",
            "per",
        ]
    ),
    "nl": frozenset(
        [
            "de",
            "het",
            "een",
            "is",
            "hoe",
            "wat",
            "wanneer",
            "waar",
            "wie",
            "kan",
            "ik",
            "mijn",
            "en",
            "niet",
            "van",
            "voor",
        ]
    ),
    "pt": frozenset(
        [
            "o",
            "a",
            "os",
            "as",
            "é",
            "como",
            "quando",
            "onde",
            "quem",
            "posso",
            "meu",
            "e",
            "um",
            "uma",
            "do",
            "da",
            "para",
            "não",
        ]
    ),
}


def detect_language(text: str, default: str = "en") -> str:
    """Best-guess language of a short query; ``default`` when nothing votes."""
    tokens = words(text)
    scores = {lang: sum(1 for t in tokens if t in sw) for lang, sw in _STOPWORDS.items()}
    best = max(scores, key=lambda lang: (scores[lang], lang == default))
    return best if scores[best] > 0 else default


def refusal_message(
    query: str, hint: str, messages: Mapping[str, str], default_language: str = "en"
) -> tuple[str, str]:
    """(message, language): the hint if we have a message for it, else the detected language."""
    table = {**DEFAULT_MESSAGES, **messages}
    lang = (hint or "").split("-")[0].lower()
    if lang not in table:
        lang = detect_language(query, default_language)
    if lang not in table:
        lang = default_language if default_language in table else "en"
    return table[lang], lang
