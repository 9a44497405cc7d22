"""generator_svc.citations: quotes must hold against the cited, admitted chunk."""

from __future__ import annotations

import pytest

from generator_svc.citations import (
    CitationClaim,
    claim_holds,
    normalise,
    quote_holds,
    verify_citations,
)

SOURCE = (
    "You can void an unused label within **30 days** of buying it. "
    'A label counts as "used" as soon as the carrier records any scan. '
    "Labels with a carrier scan cannot be voided, even if the parcel was later returned to you. "
    "Most refunds complete within 5 business days."
)


def test_normalise() -> None:
    assert normalise("  It’s **Bold**\n and  “Quoted”  ") == 'it\'s bold and "quoted"'


@pytest.mark.parametrize(
    "quote",
    [
        pytest.param("Most refunds complete within 5 business days.", id="exact"),
        pytest.param("MOST REFUNDS complete   within\n5 business\tdays", id="case-whitespace"),
        pytest.param("a label counts as “used” as soon as", id="curly-quotes"),
        pytest.param("void an unused label within 30 days of buying it", id="source-bold"),
        pytest.param("as soon as the **carrier** records __any__ scan", id="quote-emphasis"),
        pytest.param("Most refunds complete withn 5 busines days.", id="typos"),
    ],
)
def test_quote_holds(quote: str) -> None:
    assert quote_holds(quote, SOURCE) is True


@pytest.mark.parametrize(
    "quote",
    [
        pytest.param("Refunds are paid in cash at any branch office.", id="fabricated"),
        pytest.param("Premium members get free overnight shipping worldwide.", id="unrelated"),
        pytest.param("", id="empty"),
        pytest.param("  ** ", id="only-markup"),
    ],
)
def test_quote_does_not_hold(quote: str) -> None:
    assert quote_holds(quote, SOURCE) is False


def test_quote_longer_than_source_does_not_hold() -> None:
    assert quote_holds(SOURCE + " And we also refund shipping insurance.", "Short.") is False


def test_verify_citations_flags_unadmitted_and_unfaithful() -> None:
    evidence = {"refunds#p0c0": SOURCE}
    checks = verify_citations(
        [
            CitationClaim("refunds#p0c0", "Most refunds complete within 5 business days."),
            CitationClaim("secret#p0c0", "Most refunds complete within 5 business days."),
            CitationClaim("refunds#p0c0", "Refunds are paid in cash at any branch office."),
        ],
        evidence,
    )
    assert [(c.chunk_id, c.verified) for c in checks] == [
        ("refunds#p0c0", True),
        ("secret#p0c0", False),
        ("refunds#p0c0", False),
    ]
    assert checks[0].failure == ""
    assert checks[1].failure == "cites evidence the gate did not admit"
    assert checks[2].failure == "quote not found in the cited evidence"


def test_verify_citations_checks_against_the_cited_chunk_only() -> None:
    evidence = {"a#p0c0": "Refunds take 5 days.", "b#p0c0": "Labels cost $1."}
    checks = verify_citations([CitationClaim("b#p0c0", "Refunds take 5 days.")], evidence)
    assert checks[0].verified is False


def test_verify_citations_of_nothing_is_nothing() -> None:
    assert verify_citations([], {"a": "b"}) == []


@pytest.mark.parametrize(
    "quote",
    [
        pytest.param("Labels with a carrier scan can be voided.", id="negation-dropped"),
        pytest.param("Most refunds complete within 50 business days.", id="number-changed"),
        pytest.param("You can void an unused label within 90 days of buying it.", id="90-days"),
    ],
)
def test_quote_that_changes_the_meaning_does_not_hold(quote: str) -> None:
    assert quote_holds(quote, SOURCE) is False


NEAR = (
    "The app shows a new 6-digit code every 30 seconds. Fees rise by 2.5% after three months. "
    "You should keep backup codes offline. Accounts older than a year keep the old plan."
)


@pytest.mark.parametrize(
    "quote",
    [
        pytest.param("The app shows a new 30-digit code every 6 seconds.", id="numbers-swapped"),
        pytest.param("Fees rise by 5.2% after three months.", id="decimal-digits-swapped"),
        pytest.param("Fees rise by 2.5% after five months.", id="number-word"),
        pytest.param("You shouldn't keep backup codes offline.", id="contracted-negation"),
        pytest.param("Accounts younger than a year keep the old plan.", id="antonym"),
    ],
)
def test_a_near_miss_of_the_evidence_does_not_hold(quote: str) -> None:
    assert quote_holds(quote, NEAR) is False


def test_misspellings_still_hold_beside_numbers() -> None:
    assert quote_holds("The app shows a new 6-digit code evry 30 secnds.", NEAR) is True


@pytest.mark.parametrize(
    ("sentence", "quote", "why"),
    [
        pytest.param(
            "SMS codes never expire and stay valid for 90 days",
            "6-digit code every 30 seconds",
            "states never, 90",
            id="negation-and-number-beyond-the-quote",
        ),
        pytest.param(
            'Backup codes cannot be kept at all, said "the"',
            "the",
            "too short",
            id="one-word-quote",
        ),
    ],
)
def test_a_quote_does_not_carry_a_sentence_that_says_more(
    sentence: str, quote: str, why: str
) -> None:
    assert why in claim_holds(sentence, quote, NEAR)


def test_a_quote_carries_its_sentence_unless_the_sentence_adds_a_number_or_negation() -> None:
    sentence = 'Every half minute you get "a new 6-digit code"'
    assert claim_holds(sentence, "a new 6-digit code", NEAR) == (
        "the sentence states half beyond its quote"
    )
    assert claim_holds('In the app, "a new 6-digit code" appears', "a new 6-digit code", NEAR) == ""
