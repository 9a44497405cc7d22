"""Keyword store benchmark: one store in process, no gRPC, the calls the knowledge base makes.

    candor bench keyword [--chunks 100000] [--tenants 1 20] [--queries 400]
                         [--opensearch URL] [--json PATH] [--out docs/benchmarks.md]

For each layout (tantivy's index per tenant; with ``--opensearch``, OpenSearch's shared index
and its index per tenant) and each tenant count, the chunks are spread evenly over the tenants
and tenant ``t0`` is measured:

- ``search``: 30 hits with their text, as the keyword arm asks;
- ``holds``: whether 8 of its chunks are held at their version, as Retrieve checks a reply;
- ``holds_beside_new_tenants``: the same while another thread writes new tenants' first
  documents (Retrieve asks tantivy on its event loop, so this is every request's wait);
- ``write``: one document replaced, in the same tenant each time;
- ``write_rotating``: one document replaced in each of ``OPEN_WRITERS + 2`` tenants in turn,
  so the embedded store closes a writer (and waits for its merges) on every write.

The text is the retrieval benchmark's (help-centre sentences recombined), one chunk per
document. Calls are made one at a time: this measures a store, not a service under load.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import platform
import random
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from candor.settings import OpenSearchSettings
from evals import bench_output
from evals.bench_retrieval import make_documents, make_queries, p50_p99_ms
from retrieval_svc.stores.base import Chunk, KeywordStore
from retrieval_svc.stores.tantivy_store import OPEN_WRITERS, TantivyKeywordStore

INGEST_BATCH = 1000
HITS = 30
HELD = 8
WRITES = 60
MEASURED = "t0"
FIRST = Chunk("", "first#0", "first#0", "first", "", "first document of a new tenant", 0, "", "g0")


Opener = Callable[[], AbstractContextManager[KeywordStore]]


@dataclass
class Run:
    """One layout at one tenant count: ingest rate and each operation's latencies."""

    layout: str
    chunks: int
    tenants: int
    ingest_chunks_per_s: float = 0.0
    seconds: dict[str, list[float]] = field(default_factory=dict)

    @property
    def key(self) -> str:
        return f"{self.layout}:{self.chunks}x{self.tenants}"


def tenant_of(i: int, tenants: int) -> str:
    return f"t{i % tenants}"


def make_chunks(n_chunks: int, tenants: int) -> list[Chunk]:
    """``n_chunks`` one-chunk documents spread evenly over ``tenants``, deterministic."""
    out = []
    for i, d in enumerate(make_documents(n_chunks)):
        tenant = tenant_of(i, tenants)
        out.append(
            Chunk(
                tenant=tenant,
                chunk_id=f"{d.document_id}#0",
                parent_id=f"{d.document_id}#0",
                document_id=d.document_id,
                title=d.title,
                text=d.text,
                source_kind=0,
                uri="",
                generation="g0",
            )
        )
    return out


def _timed(calls: Sequence[Callable[[], object]], pause: float = 0.0) -> list[float]:
    out = []
    for call in calls:
        start = time.perf_counter()
        call()
        out.append(time.perf_counter() - start)
        time.sleep(pause)
    return out


def _beside_first_writes(store: KeywordStore, calls: Sequence[Callable[[], object]]) -> list[float]:
    """``calls`` timed while another thread writes the first document of one new tenant
    after another (each creates an index in a layout with one per tenant)."""
    stop = threading.Event()

    def first_writes() -> None:
        n = 0
        while not stop.is_set():
            new = dataclasses.replace(FIRST, tenant=f"new{n}")
            store.replace(new.tenant, new.document_id, [new])
            n += 1

    writer = threading.Thread(target=first_writes, daemon=True)
    writer.start()
    try:
        return _timed(calls, pause=0.001)  # leaves the writer the GIL between calls
    finally:
        stop.set()
        writer.join()


def _rewrite(store: KeywordStore, c: Chunk, n: int) -> Callable[[], None]:
    """A call replacing ``c``'s document with a new version of it (generation ``w<n>``)."""
    new = dataclasses.replace(c, generation=f"w{n}", text=f"{c.text} revision {n}")
    return lambda: store.replace(c.tenant, c.document_id, [new])


def measure(store: KeywordStore, run: Run, chunks: list[Chunk], queries: list[str]) -> None:
    """Ingest ``chunks`` into ``store`` and time each operation on tenant ``t0``."""
    start = time.perf_counter()
    for i in range(0, len(chunks), INGEST_BATCH):
        store.replace_many([(c.tenant, c.document_id, [c]) for c in chunks[i : i + INGEST_BATCH]])
    run.ingest_chunks_per_s = len(chunks) / (time.perf_counter() - start)

    rng = random.Random(3)
    own = [c for c in chunks if c.tenant == MEASURED]
    for q in queries[:20]:  # warm caches (and OpenSearch's JIT) before timing
        store.search(MEASURED, q, HITS)
    run.seconds["search"] = _timed([partial(store.search, MEASURED, q, HITS) for q in queries])
    samples = [rng.sample(own, min(HELD, len(own))) for _ in queries]
    run.seconds["holds"] = _timed(
        [partial(store.holds, MEASURED, [(c.chunk_id, c.generation) for c in s]) for s in samples]
    )
    run.seconds["holds_beside_new_tenants"] = _beside_first_writes(
        store,
        [partial(store.holds, MEASURED, [(c.chunk_id, c.generation) for c in s]) for s in samples],
    )
    run.seconds["write"] = _timed([_rewrite(store, rng.choice(own), n) for n in range(WRITES)])
    if run.tenants > OPEN_WRITERS:
        by_tenant = [
            [c for c in chunks if c.tenant == tenant_of(t, run.tenants)]
            for t in range(OPEN_WRITERS + 2)
        ]
        run.seconds["write_rotating"] = _timed(
            [
                _rewrite(store, by_tenant[n % len(by_tenant)][n // len(by_tenant)], WRITES + n)
                for n in range(WRITES)
            ]
        )


@contextmanager
def _tantivy() -> Iterator[KeywordStore]:
    with tempfile.TemporaryDirectory() as tmp:
        store = TantivyKeywordStore(Path(tmp))
        try:
            yield store
        finally:
            store.close()


def _opensearch(url: str, per_tenant: bool) -> Opener:
    from opensearchpy import OpenSearch

    from retrieval_svc.stores.opensearch_store import OpenSearchKeywordStore

    @contextmanager
    def opened() -> Iterator[KeywordStore]:
        index = f"candor-bench-{uuid.uuid4().hex[:8]}"
        settings = OpenSearchSettings(
            hosts=(url,), index=index, index_per_tenant=per_tenant, timeout_seconds=30.0
        )
        store = OpenSearchKeywordStore(settings)
        try:
            yield store
        finally:
            store.close()
            admin = OpenSearch(hosts=[url], timeout=60)
            admin.indices.delete(index=f"{index}*", expand_wildcards="all")
            admin.close()

    return opened


def report(runs: list[Run]) -> str:
    lines = [
        f"## Keyword store benchmark — {time.strftime('%Y-%m-%d')}",
        "",
        f"Machine: {os.cpu_count()} cores, {platform.machine()}, "
        f"Python {platform.python_version()}. Command: `candor bench keyword`. Tenant "
        f"`{MEASURED}` measured, one call at a time; p50 / p99 ms.",
        "",
        "| layout | chunks × tenants | ingest chunks/s | search | holds "
        "| holds beside new tenants | write | write rotating |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in runs:
        cells = []
        for op in ("search", "holds", "holds_beside_new_tenants", "write", "write_rotating"):
            if op in r.seconds:
                p50, p99 = p50_p99_ms(r.seconds[op])
                cells.append(f"{p50:.2f} / {p99:.2f}")
            else:
                cells.append("–")
        lines.append(
            f"| {r.layout} | {r.chunks:,} × {r.tenants} | {r.ingest_chunks_per_s:,.0f} | "
            + " | ".join(cells)
            + " |"
        )
    return "\n".join(lines) + "\n"


def as_json(runs: list[Run]) -> dict[str, dict[str, float]]:
    """``{"<layout>:<chunks>x<tenants>:<op>": {p50_ms, p99_ms, rps}, "…:ingest": {...}}``; rps
    is one caller's calls per second."""
    out: dict[str, dict[str, float]] = {}
    for r in runs:
        out[f"{r.key}:ingest"] = {"chunks_per_s": round(r.ingest_chunks_per_s, 1)}
        for op, seconds in r.seconds.items():
            p50, p99 = p50_p99_ms(seconds)
            out[f"{r.key}:{op}"] = {
                "p50_ms": round(p50, 3),
                "p99_ms": round(p99, 3),
                "rps": round(len(seconds) / sum(seconds), 1) if seconds else 0.0,
            }
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="candor bench keyword")
    ap.add_argument("--chunks", type=int, default=100_000)
    ap.add_argument("--tenants", type=int, nargs="+", default=[1, 20])
    ap.add_argument("--queries", type=int, default=400)
    ap.add_argument(
        "--opensearch",
        default="",
        metavar="URL",
        help="also measure OpenSearch, shared index and index per tenant (throwaway indexes)",
    )
    ap.add_argument("--out", type=Path, default=None, help="append the table to this markdown file")
    ap.add_argument("--json", type=Path, default=None, help="write machine-readable results")
    args = ap.parse_args(argv)
    if any(t < 1 for t in args.tenants) or args.chunks < max(args.tenants):
        ap.error("every --tenants must be at least 1 and at most --chunks")
    bench_output.prepare(args.out, args.json)
    layouts: list[tuple[str, Opener]] = [("tantivy", _tantivy)]
    if args.opensearch:
        layouts += [
            ("opensearch-shared", _opensearch(args.opensearch, per_tenant=False)),
            ("opensearch-per-tenant", _opensearch(args.opensearch, per_tenant=True)),
        ]
    queries = make_queries(args.queries)
    runs = []
    for tenants in args.tenants:
        chunks = make_chunks(args.chunks, tenants)
        for layout, opened in layouts:
            print(f"benchmark: {layout}, {args.chunks} chunks in {tenants}", file=sys.stderr)
            run = Run(layout, args.chunks, tenants)
            with opened() as store:
                measure(store, run, chunks, queries)
            runs.append(run)
    bench_output.publish(report(runs), args.out, args.json, as_json(runs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
