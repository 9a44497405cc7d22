"""The two keyword backends score alike: same chunks in, same hits and BM25 scores out.

The gate's calibrated keyword signals (``top_bm25``, ``bm25_per_query_term``) read the raw BM25
of whichever backend runs, tantivy embedded or OpenSearch in production; a config fitted on one
holds on the other only if both index the same terms and count a query's words alike.
"""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import tantivy
import wordfreq

from candor.settings import OpenSearchSettings
from retrieval_svc.stores.base import Chunk, Hit
from retrieval_svc.stores.opensearch_store import ANALYZER, OpenSearchKeywordStore
from retrieval_svc.stores.tantivy_store import TantivyKeywordStore

pytestmark = [pytest.mark.opensearch, pytest.mark.timeout(300)]

ROOT = Path(__file__).resolve().parents[2]

DOCS = [
    (
        "return",
        "How to Return an Item",
        "You can return the item within 30 days. The refund is issued to the card you paid with.",
    ),
    (
        "shipping",
        "Shipping",
        "Labels are printed on the shipping page; the carrier scans them. "
        "Shipping's cost is added at checkout.",
    ),
    ("hamlet", "Who we are", "This is it. To be or not to be, that is the question."),
    (
        "2fa",
        "Account security",
        "Turn on two-factor authentication (2FA) under Settings, then "
        "Security. An e-mail with a 6-digit code follows.",
    ),
    (
        "webhooks",
        "Webhooks",
        "Webhook deliveries are retried with exponential backoff for up to "
        "24 hours; after 24 failed attempts the endpoint is disabled.",
    ),
    (
        "org",
        "Organizations",
        "An organization administrator adds members; international "
        "organizations need a university e-mail. The psychologist added notes.",
    ),
    (
        "cafe",
        "Café naïve",
        "Le café est naïve et déjà servi. Straße, Größe; nai\u0308ve "
        "written with a combining diaeresis.",
    ),
    ("cyrillic", "Доставка", "Доставка заказа занимает три дня, возврат денег — пять дней."),
    ("cjk", "账户安全", "我想知道如何为我的账户开启双重身份验证 账户 安全 设置"),
    ("hindi", "दुनिया", "नमस्ते दुनिया, यह एक परीक्षण है।"),
    (
        "long",
        "Hashes",
        "the build hash " + "a3f5" * 10 + " and " + "b7" * 19 + " differ; İstanbul office",
    ),
]

QUERIES = [
    "refund",
    "to be or not to be",  # stopwords only: the english analyzer dropped every word
    "what is it",
    "the",
    "refund refund",  # a repeated word counts once
    "Refund refund returns",  # ... case-sensitively, as tantivy's parser does
    "two-factor e-mail",  # hyphenated
    "2FA 6-digit code",  # digits
    "24 hours",
    "30",
    "shipping's labels",
    "organization international university",  # stemmed apart by the two Porter2 releases
    "added adding psychologists",
    "naïve café",
    "nai\u0308ve",  # a combining mark: tantivy splits it, so the word is a phrase
    "Straße Größe",
    "Доставка возврат",
    "账户",
    "我想知道如何为我的账户开启双重身份验证",  # one token of 57 bytes: dropped by both
    "दुनिया",
    "a3f5" * 10,  # exactly 40 bytes: dropped by both
    "b7" * 19 + " hash",  # 38 bytes: kept by both
    "İstanbul",
    "AND OR NOT",
    "settings security webhook deliveries retried endpoint",
]


def _hits(hits: list[Hit]) -> list[tuple[str, float]]:
    # Equal scores may come in either order; anything else must be in the same one.
    return sorted(((h.chunk.chunk_id, round(h.score, 4)) for h in hits), key=lambda x: (-x[1], x))


@pytest.fixture(scope="module")
def stores(
    opensearch_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[TantivyKeywordStore, OpenSearchKeywordStore]]:
    tv = TantivyKeywordStore(tmp_path_factory.mktemp("parity"))
    index = f"candor-parity-{uuid.uuid4().hex[:8]}"
    os_ = OpenSearchKeywordStore(OpenSearchSettings(hosts=(opensearch_url,), index=index))
    batch = [
        (
            "t",
            doc,
            [
                Chunk("t", f"{doc}#p0c0", f"{doc}#p0", doc, title, text, 1, "", "g1"),
                # Every chunk of a document has its title (see the untitled case below).
                Chunk("t", f"{doc}#p0c1", f"{doc}#p0", doc, title, text.split(".")[0], 1, "", "g1"),
            ],
        )
        for doc, title, text in DOCS
    ]
    tv.replace_many(batch)
    os_.replace_many(batch)
    yield tv, os_
    os_._client.indices.delete(index=index)
    os_.close()
    tv.close()


@pytest.mark.parametrize("query", QUERIES)
def test_both_backends_find_the_same_chunks_with_the_same_scores(
    stores: tuple[TantivyKeywordStore, OpenSearchKeywordStore], query: str
) -> None:
    tv, os_ = stores
    want = _hits(tv.search("t", query, 30))
    got = _hits(os_.search("t", query, 30))
    assert [c for c, _ in got] == [c for c, _ in want]
    assert [s for _, s in got] == pytest.approx([s for _, s in want], rel=1e-3, abs=1e-3)


@pytest.mark.xfail(
    strict=True,
    reason="Lucene's BM25 counts a field's documents and average length over the documents that "
    "have a term in it, tantivy over all: beside an untitled chunk, title matches score apart",
)
def test_an_untitled_chunk_leaves_title_scores_alike(opensearch_url: str, tmp_path: Path) -> None:
    tv = TantivyKeywordStore(tmp_path)
    index = f"candor-parity-{uuid.uuid4().hex[:8]}"
    os_ = OpenSearchKeywordStore(OpenSearchSettings(hosts=(opensearch_url,), index=index))
    try:
        for store in (tv, os_):
            store.replace_many(
                [
                    ("t", "a", [Chunk("t", "a#p0c0", "a#p0", "a", "Refunds", "text", 1, "", "g")]),
                    ("t", "b", [Chunk("t", "b#p0c0", "b#p0", "b", "", "refund", 1, "", "g")]),
                ]
            )
        want = _hits(tv.search("t", "refunds", 5))
        got = _hits(os_.search("t", "refunds", 5))
        assert [s for _, s in got] == pytest.approx([s for _, s in want], rel=1e-3, abs=1e-3)
    finally:
        os_._client.indices.delete(index=index)
        os_.close()
        tv.close()


def test_the_analyzers_agree_on_the_english_vocabulary(opensearch_url: str) -> None:
    """Token for token over wordfreq's 30,000 commonest English words (stems included)."""
    from opensearchpy import OpenSearch

    en_stem = (
        tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.simple())
        .filter(tantivy.Filter.remove_long(40))
        .filter(tantivy.Filter.lowercase())
        .filter(tantivy.Filter.stemmer("english"))
        .build()
    )
    client = OpenSearch(hosts=[opensearch_url], timeout=60)
    index = f"candor-analysis-{uuid.uuid4().hex[:8]}"
    OpenSearchKeywordStore(OpenSearchSettings(hosts=(opensearch_url,), index=index)).close()
    try:
        words = wordfreq.top_n_list("en", 30_000)
        for start in range(0, len(words), 3000):
            text = " ".join(words[start : start + 3000])
            response = client.indices.analyze(
                index=index, body={"analyzer": ANALYZER, "text": text}
            )
            assert [t["token"] for t in response["tokens"]] == en_stem.analyze(text)
    finally:
        client.indices.delete(index=index)
        client.close()


def test_the_committed_analysis_table_is_what_the_node_needs(opensearch_url: str) -> None:
    """retrieval_svc/stores/opensearch_analysis.json against the test node's Java and Lucene."""
    script = ROOT / "scripts" / "gen_opensearch_analysis.py"
    result = subprocess.run(
        [sys.executable, str(script), "--url", opensearch_url, "--check"],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
