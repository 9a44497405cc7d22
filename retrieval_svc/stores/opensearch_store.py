"""Keyword arm on OpenSearch 2.x: BM25 over title and text, tenant as a zero-score filter.

The production twin of ``tantivy_store.TantivyKeywordStore``; same contract, same semantics:

* Text is analysed as tantivy's ``en_stem`` does (``ANALYSIS``), so both arms index the same
  terms and their BM25 scores match (the gate's calibrated signals read them raw).
* ``search`` sums BM25 over the ``title`` and ``text`` fields for each distinct query word
  (``keyword_query.query_words``, shared with tantivy), which is what tantivy's query parser
  builds over its two default fields: a word is one term, or a phrase when it analyses to
  several. The tenant is a ``bool.filter`` term clause, so it selects without scoring;
  ``Hit.score`` is the raw ``_score``. The query string is never parsed as query syntax.
* ``replace`` swaps a document's chunks; ``delete`` returns how many chunks went; ``inventory``
  lists every chunk of every tenant (``published`` is always true: the keyword arm has no staging).

BM25 statistics (document frequency, average length) are per shard, so every index is created
with a single shard: scores then do not depend on how documents were routed. By default one index
holds every tenant, whose statistics then span all tenants; with ``index_per_tenant`` each tenant
has an index of its own (``tenant_index``), and its scores depend on its own documents only.
Two differences from tantivy's BM25 are left. Lucene counts a field's documents, and their
average length, over those with a term in that field, tantivy over all of them; so beside a chunk
whose title holds no token, title matches score apart (tests/stores/test_keyword_parity.py). And
a rewritten or deleted chunk stays in Lucene's statistics until its segment merges, so scores
drift from tantivy's after re-ingests (docs/operations.md).
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from opensearchpy import OpenSearch, helpers
from opensearchpy.exceptions import NotFoundError, RequestError, TransportError

from candor.runtime.validation import TENANT
from candor.settings import OpenSearchSettings
from retrieval_svc.stores.base import (
    Chunk,
    Hit,
    StoredChunk,
    StoreMissing,
    StoreReadOnly,
    StoreUnlistable,
)
from retrieval_svc.stores.keyword_query import MAX_TOKEN_BYTES, query_words

if TYPE_CHECKING:
    from retrieval_svc.stores.base import KeywordStore

log = logging.getLogger(__name__)

_KEYWORD_FIELDS = ("tenant", "document_id", "parent_id", "chunk_id", "generation", "uri")
_TEXT_FIELDS = ("title", "text")
ANALYZER = "candor_en_stem"
# Where OpenSearch's parts differ from tantivy's by release (scripts/gen_opensearch_analysis.py):
# code points only Rust's newer Unicode tables call alphanumeric, and the words Lucene's Snowball
# English (Porter2) stems otherwise than rust-stemmers, with tantivy's stem.
_BY_RELEASE: dict[str, Any] = json.loads(
    Path(__file__).with_name("opensearch_analysis.json").read_text(encoding="utf-8")
)
_TOKEN_CHARS = r"\p{IsAlphabetic}\p{N}" + "".join(
    rf"\x{{{first:X}}}-\x{{{last:X}}}" for first, last in _BY_RELEASE["alphanumeric_beyond_java"]
)
# A char no token holds (private use: neither letter nor number).
_PAD = "\ue000"
#: tantivy's ``en_stem``, rebuilt from OpenSearch's own parts (no plugin, no script), so that
#: both arms index the same terms and score them alike. OpenSearch's ``english`` analyzer, used
#: before, dropped stopwords ("to be or not to be" found nothing) and stemmed with Porter1.
#:
#: * SimpleTokenizer: a token is a run of chars Rust's ``char::is_alphanumeric`` accepts
#:   (Unicode Alphabetic, marks among them, or a number);
#: * RemoveLongFilter: drops a token of 40 UTF-8 bytes or more, before lowercasing. ``length``
#:   counts UTF-16 units, so each char is padded to its UTF-8 size first (a pad after a 2-byte
#:   char, two after a 3-byte one or a surrogate pair), measured, and unpadded;
#: * LowerCaser: Rust lowercases U+0130 to "i" and a combining dot, Java to "i";
#: * rust-stemmers' Snowball English (Porter2): Lucene's is another release; the words it stems
#:   otherwise get tantivy's stem first (a ``stemmer_override`` marks them done);
#: * no stopword removal.
#:
#: Left different: a word outside the override list's vocabulary that the two Porter2 releases
#: stem apart, and letters of Unicode 14+ that a JVM too old to know them does not lowercase.
ANALYSIS: dict[str, Any] = {
    "tokenizer": {
        "candor_alphanumeric_runs": {"type": "pattern", "pattern": f"[^{_TOKEN_CHARS}]+"}
    },
    "filter": {
        "candor_pad_2_byte_chars": {
            "type": "pattern_replace",
            "pattern": r"[\x{80}-\x{7FF}]",
            "replacement": "$0" + _PAD,
        },
        "candor_pad_3_and_4_byte_chars": {
            "type": "pattern_replace",
            "pattern": r"[^\x{0}-\x{7FF}" + _PAD + "]",
            "replacement": "$0" + _PAD * 2,
        },
        "candor_under_40_bytes": {"type": "length", "max": MAX_TOKEN_BYTES - 1},
        "candor_unpad": {"type": "pattern_replace", "pattern": _PAD, "replacement": ""},
        "candor_dotted_capital_i": {
            "type": "pattern_replace",
            "pattern": "\u0130",
            "replacement": "i\u0307",
        },
        "candor_tantivy_stems": {
            "type": "stemmer_override",
            "rules": [f"{word} => {stem}" for word, stem in _BY_RELEASE["stem_overrides"].items()],
        },
        "candor_english_stemmer": {"type": "snowball", "language": "English"},
    },
    "analyzer": {
        ANALYZER: {
            "type": "custom",
            "tokenizer": "candor_alphanumeric_runs",
            "filter": [
                "candor_pad_2_byte_chars",
                "candor_pad_3_and_4_byte_chars",
                "candor_under_40_bytes",
                "candor_unpad",
                "candor_dotted_capital_i",
                "lowercase",
                "candor_tantivy_stems",
                "candor_english_stemmer",
            ],
        }
    },
}
_TEXT: dict[str, Any] = {"type": "text", "analyzer": ANALYZER}
MAPPING: dict[str, Any] = {
    # A typo'd field must fail the write, not silently grow the mapping.
    "dynamic": "strict",
    "properties": {
        **{name: {"type": "keyword"} for name in _KEYWORD_FIELDS},
        **{name: dict(_TEXT) for name in _TEXT_FIELDS},
        "source_kind": {"type": "integer"},
        "published": {"type": "boolean"},
    },
}
# One shard: BM25 statistics are per shard, and one shard makes them index-wide (as in tantivy).
INDEX_SETTINGS: dict[str, Any] = {"index": {"number_of_shards": 1, "analysis": ANALYSIS}}

_SOURCE_FIELDS = [*_KEYWORD_FIELDS, *_TEXT_FIELDS, "source_kind"]
_INVENTORY_FIELDS = ["tenant", "document_id", "chunk_id", "generation", "published"]
_BULK_BATCH = 500
# Documents per delete-by-query: two term clauses each, well under Lucene's 1024-clause limit.
_DELETE_BATCH = 200
_SCROLL_PAGE = 1000
# Writes may move thousands of chunks; only searches must fit the arm's deadline.
_MIN_WRITE_TIMEOUT_SECONDS = 30.0


class OpenSearchMappingError(RuntimeError):
    """The configured index exists with a mapping this store cannot search correctly."""


class OpenSearchWriteError(RuntimeError):
    """OpenSearch rejected some of the chunks of a write."""


class OpenSearchReadError(RuntimeError):
    """OpenSearch could not read some of the chunks asked for (not: did not find them)."""


class OpenSearchBlocked(OpenSearchWriteError, StoreReadOnly):
    """The index or cluster is blocked for writes (``cluster_block_exception``)."""


_BLOCKED = "cluster_block_exception"
_BLOCKED_HINT = (
    "the OpenSearch index is blocked for writes (at the disk flood-stage watermark OpenSearch "
    "sets index.blocks.read_only_allow_delete, and lifts it once disk use falls below the high "
    "watermark: free disk on the cluster; or a block was set by hand); retry once it is lifted"
)


def _raise_if_blocked(exc: TransportError) -> None:
    """Raise ``OpenSearchBlocked`` from a request error that is a write block: the request's
    own (a cluster-wide block), or a delete-by-query's failures (an index blocked for writes
    and deletes: ``index.blocks.write`` / ``read_only``)."""
    info = exc.info if isinstance(exc.info, dict) else {}
    causes = [info.get("error")] + [f.get("cause") for f in info.get("failures") or []]
    for cause in causes:
        if isinstance(cause, dict) and cause.get("type") == _BLOCKED:
            raise OpenSearchBlocked(f"{_BLOCKED_HINT}: {cause.get('reason', cause)}") from exc


def check_deleted_all(response: Mapping[str, Any], what: str) -> None:
    """Raise unless a delete-by-query removed every chunk it matched. It answers 200 with
    ``failures`` (a shard or a bulk item that failed) or ``version_conflicts`` (a chunk changed
    under it, skipped: ``conflicts=proceed``): the chunks left behind would serve as the
    document's old version beside its new one, with the write reported done."""
    failures = response.get("failures") or []
    conflicts = int(response.get("version_conflicts") or 0)
    if failures or conflicts:
        first = failures[0] if failures else "none"
        raise OpenSearchWriteError(
            f"OpenSearch left some of {what} in place: {len(failures)} failure(s), "
            f"{conflicts} version conflict(s); first failure: {first}"
        )


def chunk_doc_id(tenant: str, chunk_id: str) -> str:
    """Deterministic ``_id``: a retried write overwrites instead of duplicating."""
    return hashlib.sha1(f"{tenant}\x00{chunk_id}".encode()).hexdigest()


#: Between ``opensearch.index`` and a tenant's name in the tenant's own index.
TENANT_INFIX = "-tenant-"


def tenant_index(prefix: str, tenant: str) -> str:
    """The tenant's own index (``index_per_tenant``): lowercase, as OpenSearch requires, with a
    hash of the exact name so that ``Acme`` and ``acme`` stay apart."""
    if not TENANT.fullmatch(tenant):
        raise ValueError(f"not a tenant id: {tenant!r}")
    digest = hashlib.sha256(tenant.encode()).hexdigest()[:12]
    return f"{prefix}{TENANT_INFIX}{tenant.lower()}-{digest}"


_NO_INDEX = "index_not_found_exception"


def _index_missing(error: object) -> bool:
    return isinstance(error, dict) and error.get("type") == _NO_INDEX


def _http_auth(settings: OpenSearchSettings) -> tuple[str, str] | None:
    if not settings.username:
        return None
    password = settings.password
    if settings.password_file:
        password = Path(settings.password_file).read_text(encoding="utf-8").rstrip("\r\n")
    return (settings.username, password)


def _describe(field: Mapping[str, Any] | None) -> str:
    """The parts of a field mapping that decide how it matches and scores."""
    if field is None:
        return "missing"
    kind = str(field.get("type", "object"))
    parts = []
    if kind == "text":
        analyzer = str(field.get("analyzer", "standard"))
        parts.append(f"analyzer={analyzer}")
        search_analyzer = str(field.get("search_analyzer", analyzer))
        if search_analyzer != analyzer:
            parts.append(f"search_analyzer={search_analyzer}")
        # A phrase (a query word of several tokens) is analysed with this one.
        quote_analyzer = str(field.get("search_quote_analyzer", search_analyzer))
        if quote_analyzer != search_analyzer:
            parts.append(f"search_quote_analyzer={quote_analyzer}")
        # What scores it: BM25 over term frequencies and field lengths, phrases by position.
        if str(field.get("similarity", "BM25")) != "BM25":
            parts.append(f"similarity={field['similarity']}")
        if field.get("norms") in (False, "false"):
            parts.append("norms=false")
        if str(field.get("index_options", "positions")) in ("docs", "freqs"):
            parts.append(f"index_options={field['index_options']}")
    if field.get("normalizer") is not None:
        parts.append(f"normalizer={field['normalizer']}")
    if field.get("index") in (False, "false"):
        parts.append("index=false")
    return f"{kind} ({', '.join(parts)})" if parts else kind


def mapping_differences(properties: Mapping[str, Any]) -> list[str]:
    """``field: expected ..., found ...`` for every field of ``MAPPING`` the index gets wrong."""
    out = []
    for name, want in MAPPING["properties"].items():
        expected, found = _describe(want), _describe(properties.get(name))
        if expected != found:
            out.append(f"{name}: expected {expected}, found {found}")
    return out


def _as_setting(value: Any) -> Any:
    """``value`` as OpenSearch returns settings: every scalar a string."""
    if isinstance(value, Mapping):
        return {k: _as_setting(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_as_setting(v) for v in value]
    return str(value).lower() if isinstance(value, bool) else str(value)


def analysis_differences(index_settings: Mapping[str, Any]) -> list[str]:
    """What the index's ``analysis`` settings get wrong about ``ANALYZER`` and its parts."""
    found = index_settings.get("analysis", {})
    if ANALYZER not in found.get("analyzer", {}):
        return [f"analysis: no analyzer {ANALYZER}"]
    out = []
    for kind in ("analyzer", "tokenizer", "filter"):
        for name, want in ANALYSIS[kind].items():
            have = found.get(kind, {}).get(name)
            if have is None:
                out.append(f"analysis {kind} {name}: missing")
                continue
            want, have = _as_setting(want), _as_setting(have)
            keys = sorted(k for k in want.keys() | have.keys() if want.get(k) != have.get(k))
            if keys:
                out.append(f"analysis {kind} {name}: {', '.join(keys)} not candor's")
    return out


#: tantivy's BM25 parameters; a field with no similarity of its own scores with the index's
#: ``similarity.default`` when the index defines one.
_BM25: dict[str, Any] = {"type": "BM25", "k1": 1.2, "b": 0.75}


def similarity_differences(index_settings: Mapping[str, Any]) -> list[str]:
    """What the index's default similarity gets wrong (the built-in BM25 when it has none)."""
    default = index_settings.get("similarity", {}).get("default")
    if default is None:
        return []
    found = {k: default.get(k, want) for k, want in _BM25.items()}
    same = str(found["type"]) == _BM25["type"] and all(
        float(found[k]) == float(_BM25[k]) for k in ("k1", "b")
    )
    if same:
        return []
    expected = ", ".join(f"{k}={v}" for k, v in _BM25.items())
    described = ", ".join(f"{k}={v}" for k, v in sorted(default.items()))
    return [f"similarity.default: expected {expected}, found {described}"]


def _chunk_source(c: Chunk) -> dict[str, Any]:
    return {
        "tenant": c.tenant,
        "document_id": c.document_id,
        "parent_id": c.parent_id,
        "chunk_id": c.chunk_id,
        "generation": c.generation,
        "uri": c.uri,
        "title": c.title,
        "text": c.text,
        "source_kind": c.source_kind,
        "published": True,
    }


_CHUNK_FIELDS = ("tenant", "chunk_id", "parent_id", "document_id", "text", "generation")
_INVENTORY_KEYS = ("tenant", "document_id", "chunk_id")


def _strings(s: Mapping[str, Any], keys: Sequence[str]) -> bool:
    return all(isinstance(s.get(k), str) for k in keys)


def _chunk(s: Mapping[str, Any], doc_id: str) -> Chunk | None:
    """The chunk a document holds, or None (logged) for one candor did not write: someone
    else's, or a partial one, in candor's index. It is no chunk of any tenant's, and one of them
    made search() and inventory() raise KeyError for every query it matched."""
    optional = (s.get(k) for k in ("title", "uri"))
    kind = s.get("source_kind")
    if (
        not _strings(s, _CHUNK_FIELDS)
        or not all(v is None or isinstance(v, str) for v in optional)
        or not (type(kind) is int or (isinstance(kind, str) and kind.isdecimal()))
    ):
        log.warning("skipping a document without candor's fields", extra={"id": doc_id})
        return None
    return Chunk(
        tenant=s["tenant"],
        chunk_id=s["chunk_id"],
        parent_id=s["parent_id"],
        document_id=s["document_id"],
        title=s.get("title") or "",
        text=s["text"],
        source_kind=int(kind),
        uri=s.get("uri") or "",
        generation=s["generation"],
    )


def _document_filter(tenant: str, document_id: str) -> list[dict[str, Any]]:
    return [{"term": {"tenant": tenant}}, {"term": {"document_id": document_id}}]


class OpenSearchKeywordStore:
    reads_in_process = False

    def __init__(self, settings: OpenSearchSettings, *, create: bool = True) -> None:
        self._index = settings.index
        self._per_tenant = settings.index_per_tenant
        # What reads over every tenant (count, inventory) and start-up's checks look at.
        self._every = f"{self._index}{TENANT_INFIX}*" if self._per_tenant else self._index
        self._write_timeout = max(settings.timeout_seconds, _MIN_WRITE_TIMEOUT_SECONDS)
        self._client = OpenSearch(
            hosts=list(settings.hosts),
            http_auth=_http_auth(settings),
            verify_certs=settings.verify_certs,
            ca_certs=settings.ca_certs or None,
            timeout=settings.timeout_seconds,
            max_retries=1,
            retry_on_timeout=False,
        )
        try:
            if self._per_tenant:
                self._open_tenant_indexes(create)
            else:
                if not create and not self._client.indices.exists(index=self._index):
                    raise StoreMissing(f"OpenSearch index {self._index!r} does not exist")
                self._ensure_index(self._index)
                self._warn_about_settings(self._indices(self._index))
        except BaseException:
            self._client.close()
            raise

    def _open_tenant_indexes(self, create: bool) -> None:
        """Check every tenant's index as start-up checks the shared one. Chunks in the shared
        index stop start-up: this layout would not read them, and the knowledge base would
        look empty."""
        if self._client.indices.exists(index=self._index):
            held = int(cast(dict[str, Any], self._client.count(index=self._index))["count"])
            if held:
                raise OpenSearchMappingError(
                    f"opensearch.index_per_tenant is on, but {self._index!r} holds {held} "
                    "chunks of the shared layout, which it would not read. Copy them into "
                    "per-tenant indexes (docs/operations.md, 'Keyword index per tenant'), or "
                    "turn index_per_tenant off."
                )
        # One request for every tenant's index, not one each: a start-up with thousands of
        # tenants must not be thousands of round trips.
        found = self._indices(self._every)
        if not create and not found:
            self._refuse_closed()  # every tenant index closed: not "nothing to verify"
            raise StoreMissing(f"no OpenSearch index matches {self._every!r}")
        for concrete, body in sorted(found.items()):
            self._check_found(concrete, {concrete: body})
        self._warn_about_settings(found)

    def _indices(self, pattern: str, **params: Any) -> dict[str, Any]:
        """What OpenSearch says about the indices ``pattern`` names (mappings and settings)."""
        return cast(
            dict[str, Any],
            self._client.indices.get(index=pattern, request_timeout=self._write_timeout, **params),
        )

    def _no_tenant_index(self, exc: NotFoundError) -> bool:
        """``exc`` says the tenant has no index of its own yet (not: a closed one)."""
        return self._per_tenant and exc.error == _NO_INDEX

    def _warn_about_settings(self, found: Mapping[str, Any]) -> None:
        """An index made elsewhere may have the right fields but other settings: say so."""
        for concrete, body in sorted(found.items()):
            shards = str(body.get("settings", {}).get("index", {}).get("number_of_shards", "1"))
            if shards != "1":
                log.warning(
                    "OpenSearch index has %s shards: BM25 statistics are per shard, so keyword "
                    "scores (and the gate's signals) vary with where a chunk lands",
                    shards,
                    extra={"index": concrete},
                )
            if str(body.get("mappings", {}).get("dynamic", "true")) != "strict":
                log.warning(
                    "OpenSearch index mapping is not dynamic: strict: a misnamed field would "
                    "grow the mapping instead of failing the write",
                    extra={"index": concrete},
                )

    def _index_of(self, tenant: str) -> str:
        return tenant_index(self._index, tenant) if self._per_tenant else self._index

    def _ensure_index(self, index: str) -> None:
        """Check ``index`` has candor's mapping, creating it first if it is missing. Every write
        asks, so an index that exists costs one round trip (an existence check before it was a
        second)."""
        # ignore=404: the client would log each tenant's first write as a failed request.
        found = self._indices(index, ignore=404)
        if found.get("status") == 404:  # an index's entry is a dict, never the int
            if not _index_missing(found.get("error")):
                raise NotFoundError(404, str(found.get("error")), found)
            if self._create_index(index):
                return
            found = self._indices(index)  # another replica of the service created it first
        self._check_found(index, found)

    def _create_index(self, index: str) -> bool:
        """Create ``index``; False when it already exists."""
        try:
            self._client.indices.create(
                index=index,
                body={"settings": INDEX_SETTINGS, "mappings": MAPPING},
                request_timeout=self._write_timeout,
            )
        except RequestError as exc:
            if "max_shards_per_node" in str(exc.info) or "maximum shards open" in str(exc.info):
                raise OpenSearchWriteError(
                    f"OpenSearch refused to create {index!r}: the cluster is at its shard "
                    "limit (cluster.max_shards_per_node). With opensearch.index_per_tenant "
                    "every tenant needs a shard (and one per replica): raise the limit, add "
                    f"data nodes, or share one index. OpenSearch said: {exc.info}"
                ) from exc
            if exc.error != "resource_already_exists_exception":
                raise
            return False
        log.info("created OpenSearch index", extra={"index": index})
        return True

    def _check_found(self, index: str, found: Mapping[str, Any]) -> None:
        """Refuse ``index`` (what ``found`` says of it) unless it is one index with candor's
        mapping, analysis and similarity."""
        if len(found) > 1:
            # Each index would count its own BM25 statistics, a write would go to one (or, with
            # no write index, fail) and get() by id could not say which copy it means: mget
            # answered "not found" for every chunk, and a failed write's clean-up then discarded
            # staged dense chunks the keyword store held.
            raise OpenSearchMappingError(
                f"opensearch.index {index!r} names {len(found)} indices "
                f"({', '.join(sorted(found))}): the keyword arm needs exactly one. Point the "
                "alias at one index (move it from the old index to the new one in a single "
                "_aliases request), or opensearch.index at the index itself."
            )
        problems = []
        for concrete, body in sorted(found.items()):
            properties = body.get("mappings", {}).get("properties", {})
            settings = body.get("settings", {}).get("index", {})
            where = "" if concrete == index else f"[{concrete}] "
            differences = [
                *mapping_differences(properties),
                *analysis_differences(settings),
                *similarity_differences(settings),
            ]
            problems += [where + difference for difference in differences]
        if problems:
            # An index made before the analyzer matched tantivy's (analyzer=english) lands here.
            raise OpenSearchMappingError(
                f"OpenSearch index {index!r} exists with a mapping, analysis or similarity "
                f"the keyword arm cannot use: {'; '.join(problems)}. Its chunks must be indexed "
                "again, into an index candor creates: see docs/operations.md, 'Reindex the "
                "OpenSearch index' (create it under a new name, copy the chunks with _reindex, "
                "point opensearch.index or an alias at it)."
            )

    def replace(self, tenant: str, document_id: str, chunks: Sequence[Chunk]) -> None:
        self.replace_many([(tenant, document_id, chunks)])

    def replace_many(self, documents: Sequence[tuple[str, str, Sequence[Chunk]]]) -> None:
        # Index the new chunks first, then delete the documents' chunks that are not among them,
        # then refresh once. Not the other way round (delete-by-query, then bulk): that leaves a
        # window in which a document has no chunks at all, and a failure between the two steps
        # loses it until a retry. This order never shows a document missing; a reader racing a
        # periodic refresh may briefly see old and new chunks together (the arm's collapse by
        # parent absorbs that); a failure after the bulk write leaves the new chunks beside the
        # old ones not yet deleted (`candor verify` reports a chunk mismatch), and a retry lands
        # on the same ids and converges. The final refresh makes the whole batch
        # visible at once. "Not among them" is by _id rather than by generation: exact even
        # when a retry repeats the same generation, and it never races the overwritten old
        # versions of reused ids.
        # A bulk write to a missing index makes OpenSearch create it with a dynamic mapping, in
        # which tenant becomes analysed text: "acme" would then match "Acme-Corp". Every write
        # first checks the index is there with candor's mapping (recreating it if it was deleted
        # behind our back, refusing a wrong one), like start-up does.
        latest: dict[tuple[str, str], Sequence[Chunk]] = {}
        for tenant, document_id, chunks in documents:
            for c in chunks:
                if c.tenant != tenant or c.document_id != document_id:
                    raise ValueError(
                        f"chunk {c.chunk_id!r} belongs to {c.tenant!r}/{c.document_id!r}, "
                        f"not {tenant!r}/{document_id!r}"
                    )
            latest[(tenant, document_id)] = chunks  # a repeated document: the last one wins
        by_index: dict[str, dict[tuple[str, str], Sequence[Chunk]]] = {}
        for (tenant, document_id), chunks in latest.items():
            by_index.setdefault(self._index_of(tenant), {})[(tenant, document_id)] = chunks
        for index, batch in by_index.items():
            self._ensure_index(index)
            try:
                self._replace(index, batch)
            except TransportError as exc:
                _raise_if_blocked(exc)
                raise

    def _replace(self, index: str, latest: Mapping[tuple[str, str], Sequence[Chunk]]) -> None:
        new = [c for chunks in latest.values() for c in chunks]
        ids = [chunk_doc_id(c.tenant, c.chunk_id) for c in new]
        for start in range(0, len(new), _BULK_BATCH):
            self._bulk_index(
                index, new[start : start + _BULK_BATCH], ids[start : start + _BULK_BATCH]
            )
        keys = list(latest)
        for start in range(0, len(keys), _DELETE_BATCH):
            stale: dict[str, Any] = {
                "should": [
                    {"bool": {"filter": _document_filter(tenant, document_id)}}
                    for tenant, document_id in keys[start : start + _DELETE_BATCH]
                ],
                "minimum_should_match": 1,
            }
            if ids:  # a new chunk is never stale, whichever document of the batch it is in
                stale["must_not"] = [{"ids": {"values": ids}}]
            response = self._client.delete_by_query(
                index=index,
                body={"query": {"bool": stale}},
                conflicts="proceed",
                request_timeout=self._write_timeout,
            )
            check_deleted_all(cast(dict[str, Any], response), "an old version's chunks")
        # delete_by_query only refreshes when it deleted something; the new chunks need it too.
        self._client.indices.refresh(index=index, request_timeout=self._write_timeout)

    def _bulk_index(self, index: str, chunks: Sequence[Chunk], ids: Sequence[str]) -> None:
        body: list[dict[str, Any]] = []
        for c, doc_id in zip(chunks, ids, strict=True):
            body.append({"index": {"_index": index, "_id": doc_id}})
            body.append(_chunk_source(c))
        response = cast(
            dict[str, Any],
            self._client.bulk(body=body, request_timeout=self._write_timeout),
        )
        if response.get("errors"):
            failed = [
                item["index"] for item in response["items"] if "error" in item.get("index", {})
            ]
            first = failed[0]["error"] if failed else "unknown error"
            blocked = [f["error"] for f in failed if f["error"].get("type") == _BLOCKED]
            if blocked:
                # Every chunk would meet the same block: no document of the write is the cause.
                raise OpenSearchBlocked(
                    f"{_BLOCKED_HINT}: {blocked[0].get('reason', blocked[0])} "
                    f"({len(failed)} of {len(chunks)} chunks rejected)"
                )
            raise OpenSearchWriteError(
                f"OpenSearch rejected {len(failed)} of {len(chunks)} chunks; first: {first}"
            )

    def delete(self, tenant: str, document_id: str) -> int:
        index = self._index_of(tenant)
        try:
            response = cast(
                dict[str, Any],
                self._client.delete_by_query(
                    index=index,
                    body={"query": {"bool": {"filter": _document_filter(tenant, document_id)}}},
                    conflicts="proceed",
                    refresh=True,
                    request_timeout=self._write_timeout,
                ),
            )
        except NotFoundError as exc:
            if self._no_tenant_index(exc):
                return 0  # the tenant has no index of its own yet: nothing to delete
            raise
        except TransportError as exc:
            _raise_if_blocked(exc)
            # At the flood stage delete-by-query is retried inside OpenSearch past our timeout:
            # the block is only in the index's settings.
            self._raise_if_index_blocked(index, exc)
            raise
        check_deleted_all(response, f"document {document_id!r}")
        return int(response.get("deleted", 0))

    def _raise_if_index_blocked(self, index: str, exc: TransportError) -> None:
        try:
            settings = self._client.indices.get_settings(
                index=index, params={"filter_path": "*.settings.index.blocks"}
            )
        except TransportError:
            return  # the original error says more
        for body in cast(dict[str, Any], settings or {}).values():
            blocks = body.get("settings", {}).get("index", {}).get("blocks", {})
            held = sorted(k for k, v in blocks.items() if str(v).lower() == "true")
            if held:
                raise OpenSearchBlocked(f"{_BLOCKED_HINT}: index.blocks {held}") from exc

    def search(self, tenant: str, query: str, limit: int) -> list[Hit]:
        words = query_words(query)
        if limit <= 0 or not words:
            return []
        # What tantivy's parser builds: per distinct word and field, its term, or a phrase when
        # the word analyses to several tokens ("nai\u0308ve" is "nai ve"); the scores add up. One
        # multi_match over the whole query instead counted a repeated word once per copy.
        body = {
            "size": limit,
            "track_total_hits": False,
            # Equal scores otherwise come in Lucene's doc order, which follows segment merges:
            # which tied chunks made the limit differed between builds (tantivy's did too).
            "sort": ["_score", {"chunk_id": "asc"}],
            "track_scores": True,
            "_source": _SOURCE_FIELDS,
            "query": {
                "bool": {
                    "should": [
                        {"match_phrase": {field: word}} for word in words for field in _TEXT_FIELDS
                    ],
                    "minimum_should_match": 1,
                    "filter": [{"term": {"tenant": tenant}}],
                }
            },
        }
        try:
            response = cast(
                dict[str, Any], self._client.search(index=self._index_of(tenant), body=body)
            )
        except NotFoundError as exc:
            # Only a missing index: a closed one (ignore_unavailable would skip it too) is a
            # failing arm, not a tenant with nothing.
            if self._no_tenant_index(exc):
                return []
            raise
        hits: list[Hit] = []
        for h in response["hits"]["hits"]:
            if (c := _chunk(h["_source"], h["_id"])) is not None:
                hits.append(Hit(c, float(h["_score"])))
        return hits

    def get(self, tenant: str, chunk_ids: Sequence[str]) -> list[Chunk]:
        docs = self._mget(tenant, chunk_ids, ",".join(_SOURCE_FIELDS))
        # The _id already hashes the tenant; the check keeps isolation explicit.
        found = (_chunk(d["_source"], d["_id"]) for d in docs if d.get("found"))
        return [c for c in found if c is not None and c.tenant == tenant]

    def holds(self, tenant: str, versions: Sequence[tuple[str, str]]) -> set[tuple[str, str]]:
        ids = [chunk_id for chunk_id, _ in versions]
        found = {
            (s.get("chunk_id"), s.get("generation"))
            for d in self._mget(tenant, ids, "tenant,chunk_id,generation")
            if d.get("found") and (s := d.get("_source") or {}).get("tenant") == tenant
        }
        return {v for v in versions if v in found}

    def _mget(self, tenant: str, chunk_ids: Sequence[str], fields: str) -> list[dict[str, Any]]:
        """The tenant's chunk documents among ``chunk_ids``, with ``fields`` of their source."""
        ids = sorted(set(chunk_ids))
        if not ids:
            return []
        index = self._index_of(tenant)
        response = cast(
            dict[str, Any],
            self._client.mget(
                index=index,
                body={"ids": [chunk_doc_id(tenant, i) for i in ids]},
                _source_includes=fields,
            ),
        )
        # An item that could not be read is no "not found": callers act on absence (a failed
        # write's clean-up discards the staged dense chunks of a document not found here).
        failed = [d for d in response["docs"] if "error" in d]
        if failed and self._per_tenant and all(_index_missing(d["error"]) for d in failed):
            return []  # the tenant has no index yet: it holds nothing
        if failed:
            raise OpenSearchReadError(
                f"OpenSearch could not read {len(failed)} of {len(ids)} chunks from "
                f"{index!r}; first: {failed[0]['error']}"
            )
        return list(response["docs"])

    def inventory(self) -> list[StoredChunk]:
        # A wildcard reads open indexes only: a closed tenant's chunks would be listed as
        # missing here, and `verify --repair --drop-partial` would delete their dense copies.
        if self._per_tenant:
            self._refuse_closed()
        out = []
        for doc_id, s in self._scan_sources(_INVENTORY_FIELDS):
            if not _strings(s, _INVENTORY_KEYS):
                # As in the Qdrant store: no document of any tenant, so `verify` lists the rest.
                log.warning("skipping a document without candor's fields", extra={"id": doc_id})
                continue
            generation = s.get("generation")
            out.append(
                StoredChunk(
                    s["tenant"],
                    s["document_id"],
                    s["chunk_id"],
                    generation if isinstance(generation, str) else "",
                    bool(s.get("published", True)),
                )
            )
        return out

    def _scan_sources(self, fields: list[str]) -> Iterator[tuple[str, dict[str, Any]]]:
        # Scroll in index order (no sorting, no scoring); the helper clears the scroll context.
        hits = helpers.scan(
            self._client,
            index=self._every,
            query={"query": {"match_all": {}}, "_source": fields},
            size=_SCROLL_PAGE,
            scroll="2m",
            request_timeout=self._write_timeout,
        )
        for h in hits:
            yield str(h["_id"]), cast(dict[str, Any], h.get("_source") or {})

    def _refuse_closed(self) -> None:
        """Raise StoreUnlistable while a tenant index is closed."""
        closed = sorted(
            self._indices(self._every, expand_wildcards="closed", allow_no_indices=True)
        )
        if closed:
            raise StoreUnlistable(
                f"closed tenant indexes cannot be listed: {', '.join(closed)}. Open them "
                "(POST /<index>/_open) and run again; their chunks would read as missing."
            )

    def count(self) -> int:
        """Chunks held (all tenants) in the indexes that can be read (closed ones are not)."""
        response = cast(dict[str, Any], self._client.count(index=self._every))
        return int(response["count"])

    def close(self) -> None:
        self._client.close()


if TYPE_CHECKING:

    def _satisfies_protocol(store: OpenSearchKeywordStore) -> KeywordStore:
        return store
