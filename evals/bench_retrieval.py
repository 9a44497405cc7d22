"""Retrieval benchmark: ingest N chunks into a fresh retrieval service, then measure Retrieve.

    candor bench retrieval --chunks 10000 100000 [--queries 300] [--json PATH]
                           [--out docs/benchmarks.md]

The service runs in its own process (so its RSS is its own) on the embedded backends. Text is
generated from the sample help centre's sentences recombined with random vocabulary, so chunk
lengths and term statistics look like a real help centre rather than random tokens.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import random
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import grpc

from candor.cli.client import status_line
from candor.retrieval.v1 import retrieval_pb2, retrieval_pb2_grpc
from candor.runtime.server import health_check
from evals import bench_output

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "samples" / "helpcentre"


def _sentences() -> list[str]:
    out = []
    for f in sorted(SAMPLES.glob("[0-9]*.md")):
        for s in re.split(r"(?<=[.!?])\s+", f.read_text()):
            s = " ".join(s.replace("#", " ").replace("*", "").split())
            if len(s.split()) >= 6:
                out.append(s)
    return out


def make_documents(n_chunks: int, seed: int = 7) -> list[retrieval_pb2.Document]:
    """Documents of ~1 chunk each (50-60 words), deterministic for a seed."""
    rng = random.Random(seed)
    sentences = _sentences()
    vocab = sorted({w.lower().strip(".,:;()") for s in sentences for w in s.split()})
    docs = []
    for i in range(n_chunks):
        words: list[str] = []
        while len(words) < 50:
            s = rng.choice(sentences).split()
            # Swap a few words so chunks are not exact copies of each other.
            for _ in range(2):
                s[rng.randrange(len(s))] = rng.choice(vocab)
            words.extend(s)
        docs.append(
            retrieval_pb2.Document(
                document_id=f"bench-{i}", title=f"Article {i % 997}", text=" ".join(words[:58])
            )
        )
    return docs


def make_queries(n: int, seed: int = 11) -> list[str]:
    rng = random.Random(seed)
    sentences = _sentences()
    out = []
    for _ in range(n):
        words = rng.choice(sentences).split()
        start = rng.randrange(max(1, len(words) - 8))
        out.append(" ".join(words[start : start + rng.randint(5, 10)]))
    return out


@dataclass
class Result:
    chunks: int
    ingest_chunks_per_s: float
    latency_ms: dict[int, tuple[float, float]]
    throughput: dict[int, float]
    rss_mib: float
    startup_seconds: float


def p50_p99_ms(seconds: list[float]) -> tuple[float, float]:
    """Median and 99th percentile (nearest rank below) in ms; (0, 0) for no calls."""
    xs = sorted(seconds)
    if not xs:
        return 0.0, 0.0
    return statistics.median(xs) * 1000, xs[int(0.99 * (len(xs) - 1))] * 1000


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


async def _load(target: str, queries: list[str], in_flight: int) -> tuple[list[float], float]:
    async with grpc.aio.insecure_channel(target) as ch:
        stub = retrieval_pb2_grpc.RetrievalServiceStub(ch)
        latencies: list[float] = []
        it = iter(queries)

        async def worker() -> None:
            for q in it:
                start = time.perf_counter()
                await stub.Retrieve(
                    retrieval_pb2.RetrieveRequest(tenant="bench", query=q), timeout=10
                )
                latencies.append(time.perf_counter() - start)

        start = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(in_flight)))
        return latencies, len(queries) / (time.perf_counter() - start)


def run_one(n_chunks: int, n_queries: int, port: int = 0) -> Result:
    """One size's run; ``port`` 0 picks one in 56000-56999."""
    with tempfile.TemporaryDirectory() as tmp:
        port = port or 56000 + random.randrange(1000)
        env = {
            **os.environ,
            "CANDOR_DATA_DIR": tmp,
            "CANDOR_RETRIEVAL__SERVER__PORT": str(port),
            "CANDOR_RETRIEVAL__SERVER__METRICS_PORT": "0",
            "OMP_NUM_THREADS": "1",
        }
        command = [sys.executable, "-m", "candor.cli.main", "serve", "--service", "retrieval"]
        proc = subprocess.Popen(
            command,
            env=env,
            stderr=subprocess.DEVNULL,
        )
        target = f"127.0.0.1:{port}"
        try:
            while health_check(target) != "SERVING":
                if proc.poll() is not None:
                    raise RuntimeError("retrieval service exited")
                time.sleep(0.2)
            docs = make_documents(n_chunks)
            with grpc.insecure_channel(target) as ch:
                stub = retrieval_pb2_grpc.RetrievalServiceStub(ch)
                start = time.perf_counter()
                for i in range(0, len(docs), 200):
                    stub.UpsertDocuments(
                        retrieval_pb2.UpsertDocumentsRequest(
                            tenant="bench", documents=docs[i : i + 200]
                        ),
                        timeout=600,
                    )
                    done = min(i + 200, len(docs))
                    status_line(f"  ingest {done}/{len(docs)}", done == len(docs))
                ingest_rate = len(docs) / (time.perf_counter() - start)
            # Restart as a deploy would: start-up builds the dense HNSW index (Edge's optimizer
            # blocks its process, so the service does it before reporting SERVING).
            proc.send_signal(signal.SIGTERM)
            proc.wait(60)
            restart = time.perf_counter()
            proc = subprocess.Popen(command, env=env, stderr=subprocess.DEVNULL)
            while health_check(target) != "SERVING":
                if proc.poll() is not None:
                    raise RuntimeError("retrieval service exited")
                time.sleep(0.2)
            startup = time.perf_counter() - restart
            queries = make_queries(n_queries)
            asyncio.run(_load(target, queries[:20], 1))  # warm-up
            latency, throughput = {}, {}
            for in_flight in (1, 8, 32):
                xs, rate = asyncio.run(_load(target, queries, in_flight))
                latency[in_flight] = p50_p99_ms(xs)
                throughput[in_flight] = rate
            rss = _rss_mib(proc.pid)
            return Result(n_chunks, ingest_rate, latency, throughput, rss, startup)
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(30)


def report(results: list[Result]) -> str:
    lines = [
        f"## Retrieval benchmark — {time.strftime('%Y-%m-%d')}",
        "",
        f"Machine: {os.cpu_count()} cores, {platform.machine()}, "
        f"Python {platform.python_version()}; "
        "embedded backends (Qdrant Edge + tantivy), MiniLM q8 (dynamic int8) query embedding, "
        "1 ORT thread. "
        "Command: `candor bench retrieval`.",
        "",
        "| chunks | ingest chunks/s | p50 ms (1 in flight) | p99 ms (1) | p50/p99 ms (8) "
        "| p50/p99 ms (32) | Retrieve/s @1 | @8 | @32 | server peak RSS MiB | restart s |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        lat = r.latency_ms
        lines.append(
            f"| {r.chunks:,} | {r.ingest_chunks_per_s:.0f} | {lat[1][0]:.1f} | {lat[1][1]:.1f} "
            f"| {lat[8][0]:.1f}/{lat[8][1]:.1f} | {lat[32][0]:.1f}/{lat[32][1]:.1f} "
            f"| {r.throughput[1]:.0f} | {r.throughput[8]:.0f} | {r.throughput[32]:.0f} "
            f"| {r.rss_mib:.0f} | {r.startup_seconds:.1f} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="candor bench retrieval")
    ap.add_argument("--chunks", type=int, nargs="+", default=[10_000, 100_000])
    ap.add_argument("--queries", type=int, default=300)
    ap.add_argument("--out", type=Path, default=None, help="append the table to this markdown file")
    ap.add_argument("--json", type=Path, default=None, help="write machine-readable results")
    ap.add_argument("--port", type=int, default=0, help="the service's port (default: random)")
    args = ap.parse_args(argv)
    bench_output.prepare(args.out, args.json)
    results = []
    for n in args.chunks:
        print(f"benchmark: {n} chunks", file=sys.stderr)
        results.append(run_one(n, args.queries, args.port))
    bench_output.publish(report(results), args.out, args.json, as_json(results))
    return 0


def as_json(results: list[Result]) -> dict[str, dict[str, float]]:
    """``{"<chunks>:retrieve@<in flight>": {p50_ms, p99_ms, rps}, "<chunks>:ingest": {...}}``."""
    out: dict[str, dict[str, float]] = {}
    for r in results:
        for in_flight, (p50, p99) in r.latency_ms.items():
            out[f"{r.chunks}:retrieve@{in_flight}"] = {
                "p50_ms": round(p50, 2),
                "p99_ms": round(p99, 2),
                "rps": round(r.throughput[in_flight], 1),
            }
        out[f"{r.chunks}:ingest"] = {"chunks_per_s": round(r.ingest_chunks_per_s, 1)}
        out[f"{r.chunks}:server"] = {
            "peak_rss_mib": round(r.rss_mib, 1),
            "restart_s": round(r.startup_seconds, 2),
        }
    return out


if __name__ == "__main__":
    sys.exit(main())
