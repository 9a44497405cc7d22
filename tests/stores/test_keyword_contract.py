"""The KeywordStore contract, run against every keyword backend (see conftest.KEYWORD_BACKENDS)."""

from __future__ import annotations

import itertools
import string

import pytest

from retrieval_svc.stores.base import Hit, KeywordStore, StoredChunk
from tests.stores.conftest import Backend, chunk, known_bug

DOCS = {
    "refunds": "refund an unused shipping label within thirty days of purchase",
    "labels": "print a shipping label and attach the label to the parcel",
    "tracking": "track a parcel with the tracking number on the receipt",
}


def _write(store: KeywordStore, tenant: str, docs: dict[str, str], generation: str = "g1") -> None:
    for doc, text in docs.items():
        store.replace(tenant, doc, [chunk(tenant, doc, 0, generation, text=text)])


def _docs(hits: list[Hit]) -> list[str]:
    return [h.chunk.document_id for h in hits]


def _inventory(store: KeywordStore) -> set[StoredChunk]:
    items = store.inventory()
    assert len(items) == len(set(items)), "inventory lists a chunk twice"
    assert store.count() == len(items), "count() disagrees with inventory()"
    return set(items)


def test_search_is_best_first_with_positive_bm25_scores(keyword_store: KeywordStore) -> None:
    _write(keyword_store, "t", DOCS)

    hits = keyword_store.search("t", "shipping label", limit=10)

    # "labels" has label twice (and a shorter text than "refunds"): it is the exact top hit.
    assert _docs(hits) == ["labels", "refunds"]
    scores = [h.score for h in hits]
    assert scores == sorted(scores, reverse=True)
    assert scores[0] > scores[1] > 0


def test_search_returns_the_whole_chunk(keyword_store: KeywordStore) -> None:
    c = chunk("t", "doc", 0, "gen-1", text="the parcel body", title="Parcels", source_kind=3)
    keyword_store.replace("t", "doc", [c])

    (hit,) = keyword_store.search("t", "parcel", limit=5)

    assert hit.chunk == c


def test_search_matches_the_title(keyword_store: KeywordStore) -> None:
    keyword_store.replace("t", "doc", [chunk("t", "doc", 0, text="body", title="Customs forms")])

    assert _docs(keyword_store.search("t", "customs", limit=5)) == ["doc"]


def test_search_respects_limit(keyword_store: KeywordStore) -> None:
    _write(keyword_store, "t", {f"d{i}": "parcel " * (i + 1) for i in range(5)})

    assert len(keyword_store.search("t", "parcel", limit=2)) == 2


@pytest.mark.parametrize("write_order", ["first_to_last", "last_to_first", "one_batch_reversed"])
def test_chunks_tied_at_the_limit_are_cut_by_chunk_id(
    keyword_store: KeywordStore, write_order: str
) -> None:
    # Identical texts score alike. Which of them make the list must not follow the store's own
    # order (writes, segments, merges): it feeds RRF, and it differed between builds of a corpus.
    tied = [f"d{i:02}" for i in range(12)]
    keyword_store.replace("t", "best", [chunk("t", "best", 0, text="parcel parcel tracking")])
    if write_order == "one_batch_reversed":
        keyword_store.replace_many(
            [("t", d, [chunk("t", d, 0, text="parcel tracking")]) for d in reversed(tied)]
        )
    else:
        _write(
            keyword_store,
            "t",
            {
                d: "parcel tracking"
                for d in (tied if write_order == "first_to_last" else tied[::-1])
            },
        )

    hits = keyword_store.search("t", "parcel", limit=5)

    assert _docs(hits) == ["best", "d00", "d01", "d02", "d03"]
    assert len({h.score for h in hits[1:]}) == 1, "the texts should tie"


def test_search_with_limit_zero_is_empty(
    request: pytest.FixtureRequest, keyword_backend: Backend[KeywordStore]
) -> None:
    store = keyword_backend.new()
    _write(store, "t", DOCS)

    assert store.search("t", "parcel", limit=0) == []


@pytest.mark.parametrize(
    "query",
    [
        "",
        "   ",
        "?!",
        "AND OR NOT",
        'title:"x',
        "label)",
        "label\u00a0refund",
        "label\u3000x",
        # Words over tantivy's 40-byte token limit: two or more made its parser raise.
        "我想知道如何为我的账户开启双重身份验证功能，以及开启之后每次登录时需要输入什么样的验证码才行",
        "a3f5" * 16 + " " + "b7c9" * 16,
        # Exactly 40 bytes is too long too (tantivy keeps tokens under 40); and marks alone.
        "a3f5" * 10 + " " + "b7c9" * 10,
        "\u0308 \u0301",
    ],
)
def test_queries_with_no_terms_or_syntax_do_not_raise(
    keyword_store: KeywordStore, query: str
) -> None:
    _write(keyword_store, "t", DOCS)

    hits = keyword_store.search("t", query, limit=5)

    assert all(h.chunk.tenant == "t" for h in hits)


@pytest.mark.parametrize(
    "rest",
    [
        " ".join(chr(0x4E00 + i) for i in range(1000)),  # 1,000 distinct one-character words
        " ".join(a + b for a, b in itertools.product(string.ascii_lowercase, repeat=2)),
    ],
)
def test_a_query_of_many_distinct_words_is_searched(keyword_store: KeywordStore, rest: str) -> None:
    # Within max_query_chars (2,000); ~550 distinct words exceeded OpenSearch's 1,024 clauses.
    _write(keyword_store, "t", DOCS)
    query = ("parcel " + rest)[:2000]

    hits = keyword_store.search("t", query, limit=5)

    assert {"labels", "tracking"} <= set(_docs(hits))  # the two parcel chunks


def test_a_word_too_long_to_index_leaves_the_others_searched(keyword_store: KeywordStore) -> None:
    _write(keyword_store, "t", DOCS)
    plain = keyword_store.search("t", "parcel", limit=5)

    hits = keyword_store.search("t", "parcel " + "a3f5" * 16 + " " + "b7c9" * 16, limit=5)

    assert plain and [h.chunk.chunk_id for h in hits] == [h.chunk.chunk_id for h in plain]


def test_tenants_are_isolated(keyword_store: KeywordStore) -> None:
    keyword_store.replace("acme", "doc", [chunk("acme", "doc", 0, text="parcel for acme")])
    keyword_store.replace("globex", "doc", [chunk("globex", "doc", 0, text="parcel for globex")])

    hits = keyword_store.search("acme", "parcel globex", limit=10)

    assert [(h.chunk.tenant, h.chunk.text) for h in hits] == [("acme", "parcel for acme")]
    assert keyword_store.search("Acme", "parcel", limit=10) == []
    assert keyword_store.delete("acme", "doc") == 1
    assert _docs(keyword_store.search("globex", "parcel", limit=10)) == ["doc"]


def test_replace_removes_the_old_chunks(keyword_store: KeywordStore) -> None:
    keyword_store.replace(
        "t", "doc", [chunk("t", "doc", i, "g1", text=f"old wording {i}") for i in range(3)]
    )
    keyword_store.replace("t", "other", [chunk("t", "other", 0, "g1", text="old wording")])

    keyword_store.replace("t", "doc", [chunk("t", "doc", 0, "g2", text="new wording")])

    assert _docs(keyword_store.search("t", "old", limit=10)) == ["other"]
    assert [h.chunk.generation for h in keyword_store.search("t", "new", limit=10)] == ["g2"]
    assert _inventory(keyword_store) == {
        StoredChunk("t", "doc", "doc#p0c0", "g2", True),
        StoredChunk("t", "other", "other#p0c0", "g1", True),
    }


def test_replace_many_replaces_each_document(keyword_store: KeywordStore) -> None:
    _write(keyword_store, "t", {"doc": "old parcel", "keep": "old parcel"})
    _write(keyword_store, "u", {"doc": "old parcel"})

    keyword_store.replace_many(
        [
            ("t", "doc", [chunk("t", "doc", 0, "g2", text="new parcel")]),
            ("u", "new", [chunk("u", "new", i, "g1", text="new label") for i in range(2)]),
        ]
    )
    keyword_store.replace_many([])

    assert _inventory(keyword_store) == {
        StoredChunk("t", "doc", "doc#p0c0", "g2", True),
        StoredChunk("t", "keep", "keep#p0c0", "g1", True),
        StoredChunk("u", "doc", "doc#p0c0", "g1", True),
        StoredChunk("u", "new", "new#p0c0", "g1", True),
        StoredChunk("u", "new", "new#p0c1", "g1", True),
    }
    assert _docs(keyword_store.search("t", "old", limit=10)) == ["keep"]
    assert _docs(keyword_store.search("u", "old", limit=10)) == ["doc"]


def test_replace_is_idempotent(keyword_store: KeywordStore) -> None:
    chunks = [chunk("t", "doc", i, text=f"parcel {i}") for i in range(3)]

    keyword_store.replace("t", "doc", chunks)
    keyword_store.replace("t", "doc", chunks)

    assert len(keyword_store.inventory()) == keyword_store.count() == 3
    assert len(keyword_store.search("t", "parcel", limit=10)) == 3


def test_get_returns_the_tenants_chunks_by_id(keyword_store: KeywordStore) -> None:
    mine = [chunk("t", "doc", i, text=f"parcel {i}", title="Parcels") for i in range(3)]
    keyword_store.replace("t", "doc", mine)
    keyword_store.replace("u", "doc", [chunk("u", "doc", 0, text="someone else's parcel")])

    got = keyword_store.get("t", ["doc#p0c2", "doc#p0c0", "doc#p0c9", "doc#p0c0"])

    assert sorted(got, key=lambda c: c.chunk_id) == [mine[0], mine[2]]
    assert keyword_store.get("t", []) == []
    assert keyword_store.get("nobody", ["doc#p0c0"]) == []
    (other,) = keyword_store.get("u", ["doc#p0c0"])
    assert other.tenant == "u" and "someone else" in other.text


def test_holds_says_which_chunk_versions_the_tenant_has(keyword_store: KeywordStore) -> None:
    keyword_store.replace("t", "doc", [chunk("t", "doc", i, text=f"parcel {i}") for i in range(2)])
    keyword_store.replace("u", "other", [chunk("u", "other", 0, text="someone else's")])
    (mine,) = keyword_store.get("t", ["doc#p0c0"])
    (theirs,) = keyword_store.get("u", ["other#p0c0"])
    asked = [
        ("doc#p0c0", mine.generation),  # held
        ("doc#p0c1", mine.generation),  # held
        ("doc#p0c0", "another-version"),  # the chunk, at a version the store no longer holds
        ("doc#p0c7", mine.generation),  # no such chunk
        ("other#p0c0", theirs.generation),  # another tenant's
    ]
    assert keyword_store.holds("t", asked) == {asked[0], asked[1]}
    assert keyword_store.holds("t", []) == set()
    assert keyword_store.holds("u", asked) == {asked[4]}
    keyword_store.delete("t", "doc")
    assert keyword_store.holds("t", asked) == set()


def test_one_tenants_documents_do_not_move_anothers_scores(
    request: pytest.FixtureRequest, keyword_backend: Backend[KeywordStore]
) -> None:
    known_bug(
        request,
        keyword_backend,
        opensearch="known limitation of the shared index (index_per_tenant off, the "
        "default): BM25's statistics are every tenant's (README, 'Tenants and keyword "
        "statistics')",
    )
    keyword_store = keyword_backend.new()
    keyword_store.replace("t", "doc", [chunk("t", "doc", 0, text="quokka habitat notes")])
    keyword_store.replace("t", "pad", [chunk("t", "pad", 0, text="unrelated filler text")])
    (alone,) = [h.score for h in keyword_store.search("t", "quokka", limit=5)]
    others = [chunk("u", f"d{i}", 0, text="quokka quokka sightings") for i in range(20)]
    keyword_store.replace_many([("u", f"d{i}", [c]) for i, c in enumerate(others)])
    (beside, *_) = [h.score for h in keyword_store.search("t", "quokka", limit=5)]
    assert beside == pytest.approx(alone)


def test_delete_returns_the_count_and_removes(keyword_store: KeywordStore) -> None:
    keyword_store.replace("t", "doc", [chunk("t", "doc", i, text="parcel") for i in range(3)])
    _write(keyword_store, "t", {"keep": "parcel"})

    assert keyword_store.delete("t", "doc") == 3
    assert keyword_store.delete("t", "doc") == 0
    assert keyword_store.delete("t", "never-written") == 0
    assert _docs(keyword_store.search("t", "parcel", limit=10)) == ["keep"]
    assert {s.document_id for s in keyword_store.inventory()} == {"keep"}
    assert keyword_store.count() == 1


def test_delete_counts_only_live_chunks_after_a_restart(
    request: pytest.FixtureRequest, keyword_backend: Backend[KeywordStore]
) -> None:
    store = keyword_backend.new()
    for i in range(10):  # enough commits for tantivy's merge policy to merge segments
        store.replace("t", f"d{i}", [chunk("t", f"d{i}", n, text="parcel") for n in range(2)])
    store = keyword_backend.reopen(store)

    assert store.delete("t", "d1") == 2
    assert store.delete("t", "d1") == 0


def test_inventory_reports_every_chunk(keyword_store: KeywordStore) -> None:
    assert keyword_store.inventory() == []
    assert keyword_store.count() == 0
    keyword_store.replace(
        "a", "d1", [chunk("a", "d1", 0, "g1", text="x"), chunk("a", "d1", 1, "g1", text="y")]
    )
    keyword_store.replace("b", "d2", [chunk("b", "d2", 0, "g7", text="z")])

    assert _inventory(keyword_store) == {
        StoredChunk("a", "d1", "d1#p0c0", "g1", True),
        StoredChunk("a", "d1", "d1#p0c1", "g1", True),
        StoredChunk("b", "d2", "d2#p0c0", "g7", True),
    }


def test_data_survives_reopening(keyword_backend: Backend[KeywordStore]) -> None:
    store = keyword_backend.new()
    _write(store, "t", DOCS)

    store = keyword_backend.reopen(store)

    assert {s.document_id for s in store.inventory()} == set(DOCS)
    assert _docs(store.search("t", "tracking", limit=5)) == ["tracking"]


@pytest.mark.parametrize("word", ["दुनिया", "nai\u0308ve", "كَتَبَ"])
def test_a_word_with_combining_marks_is_one_query_term(
    keyword_store: KeywordStore, word: str
) -> None:
    # The query's marks were taken for syntax: "दुनिया" was searched as "द न य" and not found.
    _write(keyword_store, "t", {"marks": f"hello {word} again", "other": "nothing here"})
    assert _docs(keyword_store.search("t", word, limit=10)) == ["marks"]


@pytest.mark.parametrize(
    ("text", "query"),
    [
        ("अन्तर्राष्ट्रीय नियम लागू होते हैं", "अन्तर्राष्ट्रीय"),  # 45 bytes, short tokens
        ("ภาษาไทยเป็นภาษาราชการ ของประเทศ", "ภาษาไทยเป็นภาษาราชการ"),  # 63 bytes
    ],
)
def test_a_long_word_the_analyser_splits_into_short_tokens_is_searched(
    keyword_store: KeywordStore, text: str, query: str
) -> None:
    # The query dropped any word of 40 bytes or more, though the analyser indexes such a word as
    # several short tokens: a Hindi or Thai question found nothing.
    _write(keyword_store, "t", {"indic": text, **DOCS})

    assert _docs(keyword_store.search("t", query, limit=5))[:1] == ["indic"]
