"""The words both keyword backends search for (retrieval_svc/stores/keyword_query.py)."""

from __future__ import annotations

from retrieval_svc.stores.keyword_query import MAX_QUERY_WORDS, query_words


def test_a_repeated_word_is_searched_once_case_sensitively() -> None:
    # tantivy's parser keeps one copy of a repeated word; OpenSearch must not count it twice.
    assert query_words("to be or not to be") == ["to", "be", "or", "not"]
    assert query_words("Refund refund refund") == ["Refund", "refund"]


def test_syntax_operators_and_unindexable_words_are_left_out() -> None:
    assert query_words('title:"refund" AND label^2 (void)') == [
        "title",
        "refund",
        "label",
        "2",
        "void",
    ]
    assert query_words("a3f5" * 10 + " b7 " + "b7" * 19) == ["b7", "b7" * 19]  # 40 bytes: out
    assert query_words("\u0308 \u0301 nai\u0308ve") == ["nai\u0308ve"]  # marks alone: out


def test_a_query_keeps_its_first_distinct_words_up_to_the_cap() -> None:
    words = [f"w{i}" for i in range(MAX_QUERY_WORDS + 100)]
    assert query_words(" ".join(["w0", *words])) == words[:MAX_QUERY_WORDS]
