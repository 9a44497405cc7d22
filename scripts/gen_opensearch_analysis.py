"""Write retrieval_svc/stores/opensearch_analysis.json: where OpenSearch differs from tantivy.

    python scripts/gen_opensearch_analysis.py --url http://127.0.0.1:9200
    python scripts/gen_opensearch_analysis.py --url ... --check   # exit 1 if it does not fit

The OpenSearch keyword arm rebuilds tantivy's ``en_stem`` analysis from OpenSearch's own parts
(``opensearch_store.ANALYSIS``) so both arms index the same terms. Two parts differ by release:

* ``alphanumeric_beyond_java``: code points Rust's ``char::is_alphanumeric`` (tantivy's
  tokenizer) accepts and the node's Java regex ``\\p{IsAlphabetic}\\p{N}`` does not: Rust's
  Unicode tables are newer than Java 17's. The tokenizer's pattern keeps them too.
* ``stem_overrides``: tokens Lucene's Snowball English stemmer stems otherwise than tantivy's
  rust-stemmers (another release of Porter2: "organization" is organiz / organ, "international"
  internat / intern, "added" add / ad, "psychologist" psycholog / psychologist), with tantivy's
  stem, for a ``stemmer_override`` filter. Checked over a large vocabulary (wordfreq's English
  list, and the commonest words of the other languages written in Latin script); a word outside
  it may still differ.

Needs a running OpenSearch 2.x node (nothing is written: only ``_analyze`` is called), the
oldest Java the production nodes run being the one to use; run it again when tantivy, the
OpenSearch version or wordfreq changes. A changed file changes the analyzer: existing
OpenSearch indices must then be reindexed (candor refuses them at start-up).
"""

from __future__ import annotations

import argparse
import json
import sys
import urllib.request
from pathlib import Path
from typing import Any

import tantivy
import wordfreq

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "retrieval_svc" / "stores" / "opensearch_analysis.json"
# English in full; for the others, the words common enough to reach an English help centre.
OTHER_LANGUAGES = ("de", "es", "fr", "it", "nl", "pt", "sv", "da", "nb", "pl", "cs", "ro", "tr")
OTHER_WORDS = 50_000
# _analyze returns at most index.analyze.max_token_count (10,000) tokens.
BATCH = 5000


def _analyze(url: str, body: dict[str, Any]) -> list[str]:
    request = urllib.request.Request(
        f"{url.rstrip('/')}/_analyze",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        return [t["token"] for t in json.load(response)["tokens"]]


def _ranges(code_points: set[int]) -> list[list[int]]:
    out: list[list[int]] = []
    for c in sorted(code_points):
        if out and out[-1][1] == c - 1:
            out[-1][1] = c
        else:
            out.append([c, c])
    return out


def alphanumeric_beyond_java(url: str) -> list[list[int]]:
    """[first, last] ranges of the code points only tantivy's tokenizer keeps in a token."""
    simple = tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.simple()).build()
    pattern = {"type": "pattern", "pattern": r"[^\p{IsAlphabetic}\p{N}]+"}
    code_points = [c for c in range(0x110000) if not 0xD800 <= c < 0xE000]
    rust: set[str] = set()
    java: set[str] = set()
    for start in range(0, len(code_points), BATCH):
        text = " ".join(chr(c) for c in code_points[start : start + BATCH])
        rust.update(simple.analyze(text))
        java.update(_analyze(url, {"tokenizer": pattern, "text": text}))
    if java - rust:
        raise RuntimeError(f"Java keeps chars Rust splits on: {sorted(java - rust)[:20]}")
    return _ranges({ord(c) for c in rust - java})


def _tokens() -> list[str]:
    """Every lowercased token (tantivy's tokenizer, before stemming) of the vocabulary."""
    split = (
        tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.simple())
        .filter(tantivy.Filter.remove_long(40))
        .filter(tantivy.Filter.lowercase())
        .build()
    )
    words = list(wordfreq.get_frequency_dict("en"))
    for lang in OTHER_LANGUAGES:
        words += wordfreq.top_n_list(lang, OTHER_WORDS)
    seen: dict[str, None] = {}
    for w in words:
        for t in split.analyze(w):
            seen.setdefault(t, None)
    return list(seen)


def stem_overrides(url: str) -> dict[str, str]:
    """Token -> tantivy's stem, for the tokens Lucene's Snowball English stems otherwise."""
    stem = (
        tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.raw())
        .filter(tantivy.Filter.stemmer("english"))
        .build()
    )
    snowball = [{"type": "snowball", "language": "English"}]
    tokens = _tokens()
    out = {}
    for start in range(0, len(tokens), BATCH):
        batch = tokens[start : start + BATCH]
        body = {"tokenizer": "whitespace", "filter": snowball, "text": " ".join(batch)}
        theirs = _analyze(url, body)
        if len(theirs) != len(batch):
            raise RuntimeError(f"{len(batch)} tokens analysed into {len(theirs)}")
        for token, lucene in zip(batch, theirs, strict=True):
            (ours,) = stem.analyze(token)
            if ours != lucene:
                out[token] = ours
    return dict(sorted(out.items()))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--url", required=True, help="an OpenSearch node, e.g. http://127.0.0.1:9200")
    ap.add_argument(
        "--check",
        action="store_true",
        help="fail unless the committed file covers this node (its ranges may hold more: an "
        "older Java's)",
    )
    args = ap.parse_args(argv)
    extra = alphanumeric_beyond_java(args.url)
    overrides = stem_overrides(args.url)
    if args.check:
        have = json.loads(OUT.read_text(encoding="utf-8"))
        covered = {c for a, b in have["alphanumeric_beyond_java"] for c in range(a, b + 1)}
        missing = [[a, b] for a, b in extra if not set(range(a, b + 1)) <= covered]
        stale = {
            k
            for k in overrides.keys() | have["stem_overrides"].keys()
            if overrides.get(k) != have["stem_overrides"].get(k)
        }
        if missing or stale:
            print(
                f"{OUT.relative_to(ROOT)} does not fit this node: ranges {missing[:10]} missing, "
                f"stems of {sorted(stale)[:10]} differ: run python scripts/{Path(__file__).name}"
            )
            return 1
        return 0
    # One range or one stem a line: a regenerated file diffs readably.
    ranges = ",\n".join(f"  {json.dumps(r)}" for r in extra)
    stems = ",\n".join(
        f"  {json.dumps(k, ensure_ascii=False)}: {json.dumps(v, ensure_ascii=False)}"
        for k, v in overrides.items()
    )
    text = (
        f'{{\n "alphanumeric_beyond_java": [\n{ranges}\n ],\n'
        f' "stem_overrides": {{\n{stems}\n }}\n}}\n'
    )
    assert json.loads(text) == {"alphanumeric_beyond_java": extra, "stem_overrides": overrides}
    OUT.write_text(text, encoding="utf-8")
    print(f"wrote {OUT.relative_to(ROOT)}: {len(extra)} ranges, {len(overrides)} stems")
    return 0


if __name__ == "__main__":
    sys.exit(main())
