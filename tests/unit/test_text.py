"""candor.text: word tokens, content terms, sentence splitting, expected answer types."""

from __future__ import annotations

import pytest

from candor.text import (
    content_terms,
    expected_answer_type,
    has_answer_type,
    sentences,
    stem,
    words,
)


def test_words_lowercase_and_keep_inner_punctuation() -> None:
    assert words("How do I track PX-412? Don't ship 3.5kg.") == [
        "how",
        "do",
        "i",
        "track",
        "px-412",
        "don't",
        "ship",
        "3.5kg",
    ]


def test_words_strip_edge_punctuation_and_fold_unicode() -> None:
    assert words("'quoted' -dash- ＡＢＣ Straße") == ["quoted", "dash", "abc", "strasse"]
    assert words("...") == []


@pytest.mark.parametrize(
    ("word", "stemmed"),
    [
        ("labels", "label"),
        ("printing", "print"),
        ("printed", "print"),
        ("passes", "pass"),
        ("is", "is"),
        ("red", "red"),  # too short to strip
        ("bus", "bus"),
    ],
)
def test_stem(word: str, stemmed: str) -> None:
    assert stem(word) == stemmed


def test_content_terms_drop_stopwords_and_stem_without_duplicates() -> None:
    text = "How do I void the labels I printed? Printing a label is easy."
    assert content_terms(text) == ["void", "label", "print", "easy"]


def test_content_terms_keep_single_digits_but_not_single_letters() -> None:
    assert content_terms("Plan B costs 5 x") == ["plan", "cost", "5"]


def test_content_terms_of_only_stopwords_is_empty() -> None:
    assert content_terms("What is it, and how do I do that?") == []


def test_sentences_split_on_terminal_punctuation_before_a_capital() -> None:
    assert sentences("First one. Second one! Third? fourth stays. E.g. this") == [
        "First one.",
        "Second one!",
        "Third? fourth stays.",
        "E.g. this",
    ]


def test_sentences_split_before_a_capital_or_a_letter_of_any_script() -> None:
    # Only ASCII [A-Z0-9] started a sentence: Arabic, Hebrew, Cyrillic, Greek and "Émile"
    # never did, and an Arabic curated answer was quoted with its own question in front.
    assert sentences("كم يوما لدي؟ يمكنك إرجاعه خلال 30 يوما.") == [
        "كم يوما لدي؟",
        "يمكنك إرجاعه خلال 30 يوما.",
    ]
    assert sentences("Привет. Как дела? Ελλάδα. Émile said so.") == [
        "Привет.",
        "Как дела?",
        "Ελλάδα.",
        "Émile said so.",
    ]
    assert sentences("See p. xii. and e.g. that.") == ["See p. xii. and e.g. that."]


def test_sentences_do_not_split_on_inner_dots() -> None:
    assert sentences("Version 2.5 ships today. Weight is 3.5 kg.") == [
        "Version 2.5 ships today.",
        "Weight is 3.5 kg.",
    ]


def test_sentences_headings_and_list_items_stand_alone() -> None:
    text = "## Limits\n\nVoid within 30 days\n- first item\n* second item\n\nA paragraph\nwrapped."
    assert sentences(text) == [
        "Limits",
        "Void within 30 days",
        "first item",
        "second item",
        "A paragraph wrapped.",
    ]


def test_sentences_of_blank_text() -> None:
    assert sentences(" \n\n  ") == []


@pytest.mark.parametrize(
    ("question", "kind"),
    [
        ("How long do refunds take?", "duration"),
        ("For how long is a label valid?", "duration"),
        ("How many days until the refund arrives?", "duration"),
        ("How much does the Pro plan cost?", "money"),
        ("What does the Pro plan cost?", "money"),
        ("How many labels can I print per month?", "number"),
        ("What is the maximum parcel weight?", "number"),
        ("How often is the balance charged?", "number"),
        ("When is the pickup?", "date"),
        ("What day are invoices issued?", "date"),
        ("Who is the account owner?", "person"),
        ("What is a shipping label?", ""),
        ("Can I void a label?", ""),
    ],
)
def test_expected_answer_type(question: str, kind: str) -> None:
    assert expected_answer_type(question) == kind


@pytest.mark.parametrize(
    ("text", "kind", "has"),
    [
        ("Refunds complete within 5 business days.", "duration", True),
        ("Refunds complete within 2-3 weeks.", "duration", True),
        ("It takes three days.", "duration", True),
        ("Refunds are reviewed by our team.", "duration", False),
        ("The Pro plan costs $29 a month.", "money", True),
        ("The Pro plan costs 29 euros.", "money", True),
        ("The Pro plan is our most popular.", "money", False),
        ("You can print 500 labels.", "number", True),
        ("You can print twenty labels.", "number", True),
        ("You can print labels.", "number", False),
        ("Pickups happen on Monday at 10:30.", "date", True),
        ("Invoices are issued in 2026.", "date", True),
        ("Pickups happen regularly.", "date", False),
        ("Contact Jane Doe in support.", "person", True),
        ("Contact support.", "person", False),
        ("Anything at all.", "", True),
    ],
)
def test_has_answer_type(text: str, kind: str, has: bool) -> None:
    assert has_answer_type(text, kind) is has


@pytest.mark.parametrize(("plural", "singular"), [("invoices", "invoice"), ("files", "file")])
def test_plural_matches_singular(plural: str, singular: str) -> None:
    assert content_terms(plural) == content_terms(singular)


def test_curly_apostrophe_contraction_is_a_stopword() -> None:
    assert content_terms("What’s the fee?") == content_terms("What's the fee?") == ["fee"]


def test_heading_on_its_own_line_stands_alone() -> None:
    assert sentences("# Refunds\nRefunds take 5 days.") == ["Refunds", "Refunds take 5 days."]


def test_wrapped_line_starting_with_a_digit_does_not_split() -> None:
    assert sentences("Refunds are processed within\n5 business days.") == [
        "Refunds are processed within 5 business days."
    ]


def test_numbered_list_item_is_one_sentence() -> None:
    assert sentences("Steps:\n1. Go to Shipments.\n2. Click Void.") == [
        "Steps:",
        "1. Go to Shipments.",
        "2. Click Void.",
    ]
