"""The words a keyword query searches for: one home for both keyword backends.

tantivy (embedded) and OpenSearch (production) must score a query alike, since the gate's
calibrated signals (``top_bm25``, ``bm25_per_query_term``) read the raw BM25. Both index with
tantivy's ``en_stem`` analysis (OpenSearch rebuilds it in ``opensearch_store.ANALYSIS``); this
module gives both the same words to look up.
"""

from __future__ import annotations

import re
import unicodedata

#: tantivy's en_stem analyser removes tokens of this many UTF-8 bytes or more (RemoveLongFilter
#: keeps ``len < 40``), at index and query time; OpenSearch's analyzer does the same.
MAX_TOKEN_BYTES = 40

#: The distinct words a query searches for, at most. OpenSearch asks for each word in two fields,
#: and Lucene refuses a query of over 1024 clauses (``indices.query.bool.max_clause_count``):
#: 2,000 characters hold up to 1,000 distinct words ("a b c ..."), and ~550 made the arm fail.
#: tantivy takes the same words, so that both still score alike.
MAX_QUERY_WORDS = 500

# Query-parser keywords would change the query's meaning if a user typed them.
_OPERATORS = re.compile(r"\b(AND|OR|NOT|IN|TO)\b")


def query_text(query: str) -> str:
    """Letters, digits and combining marks; anything else is query syntax or space to blank.

    Marks are part of their word: Devanagari's vowel signs, Arabic's harakat, Thai's tone marks
    ("दुनिया" read as "द न य" found nothing)."""
    # Every kind of space becomes " ": tantivy's parser ends a word at a no-break or
    # ideographic space but only skips ASCII ones between terms, and raised on the rest.
    return "".join(c if c.isalnum() or unicodedata.category(c)[0] == "M" else " " for c in query)


def query_words(query: str) -> list[str]:
    """The distinct words of ``query`` that can match something, in their first order.

    * A word of ``MAX_TOKEN_BYTES`` or more is dropped: the index dropped it too, so it can match
      nothing, and a query of two or more of them made tantivy's parser raise ("Only excluding
      terms given"): the arm failed on a long Chinese clause or two hashes, ordinary input. So
      is a word of marks alone (no letter or digit: no token either).
    * A repeated word counts once: tantivy's parser keeps one copy of a word it is given twice
      (case-sensitively: "Refund refund" is two words), so OpenSearch must be asked for it once.
    * The first ``MAX_QUERY_WORDS`` are kept.
    """
    words = [w for w in _OPERATORS.sub(" ", query_text(query)).split() if _has_token(w)]
    return list(dict.fromkeys(words))[:MAX_QUERY_WORDS]


def _has_token(word: str) -> bool:
    """Whether the analyser keeps a token of ``word``: it splits a word at characters that are
    neither letters nor digits (a Devanagari virama, some Thai marks), so a long Hindi or Thai
    word is several short tokens, found in the index; only a word whose every piece is
    ``MAX_TOKEN_BYTES`` or longer can match nothing."""
    pieces = "".join(c if c.isalnum() else " " for c in word).split()
    return any(len(p.encode()) < MAX_TOKEN_BYTES for p in pieces)
