"""Whole-stack benchmark over gRPC: Retrieve, Evaluate, Ask refused, Ask answered.

    candor bench stack --chunks 10000 [--queries 200] [--per-service] [--json PATH]
                       [--out docs/benchmarks.md]

All three services run in one process (the embedded default, ``candor serve``) started as a
subprocess, or with ``--per-service`` in three (as deployed: one pod each); peak RSS is the
sum. After ingest the stack is restarted, as a deploy would, so the dense HNSW index is built
before measuring. "Answered" queries are sentence fragments of indexed chunks (the gate passes
most of them); "refused" queries are general-knowledge questions the
knowledge base cannot answer. Each operation runs at 1, 8 and 32 requests in flight.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path

import grpc

from candor.cli.client import status_line
from candor.gate.v1 import gate_pb2, gate_pb2_grpc
from candor.retrieval.v1 import retrieval_pb2, retrieval_pb2_grpc
from candor.runtime.server import health_check
from evals import bench_output
from evals.bench_retrieval import _rss_mib, make_documents, p50_p99_ms

REFUSED = [
    "Who won the 1998 football World Cup?",
    "What is the boiling point of mercury?",
    "How do I bake sourdough bread at home?",
    "Who painted the ceiling of the Sistine Chapel?",
    "What is the capital city of Australia?",
    "How many moons does Jupiter have?",
    "Who wrote the novel War and Peace?",
    "What year did the Berlin Wall fall?",
    "How tall is Mount Kilimanjaro?",
    "What is the speed of sound in water?",
]
IN_FLIGHT = (1, 8, 32)


def answered_queries(docs: list[retrieval_pb2.Document], n: int, seed: int = 5) -> list[str]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        # The opening of a chunk, asked back: close enough that the gate passes most of them.
        out.append(" ".join(rng.choice(docs).text.split()[:20]) + "?")
    return out


async def idle_decisions(
    gate: gate_pb2_grpc.GateServiceStub, queries: list[str]
) -> dict[str, gate_pb2.Decision]:
    """Each distinct query's decision, asked one at a time."""
    decisions = {}
    for q in dict.fromkeys(queries):
        reply = await gate.Evaluate(gate_pb2.EvaluateRequest(tenant="bench", query=q))
        decisions[q] = reply.decision
    return decisions


def passed(queries: list[str], decisions: dict[str, gate_pb2.Decision]) -> list[str]:
    """The ``queries`` whose decision passed, repeats kept (the load replays them)."""
    return [q for q in queries if decisions[q].outcome == gate_pb2.OUTCOME_PASS]


async def passing_when_idle(gate: gate_pb2_grpc.GateServiceStub, queries: list[str]) -> list[str]:
    """The queries the gate passes, asked one at a time."""
    return passed(queries, await idle_decisions(gate, queries))


def read_share(decisions: Iterable[gate_pb2.Decision]) -> float:
    """Share of ``decisions`` that ran the evidence reader.

    A read is most of a decision's cost beyond retrieval, and the read floor skips it where no
    reading could pass, so this says what the "refused" and "answered" figures paid for."""
    read = [any(s.name == "reader" for s in d.signals) for d in decisions]
    return sum(read) / max(1, len(read))


async def load(
    call: Callable[[str], Awaitable[object]], queries: list[str], in_flight: int
) -> tuple[list[float], float]:
    """Each query's latency and the calls per second, ``in_flight`` calls at a time."""
    latencies: list[float] = []
    it = iter(queries)

    async def worker() -> None:
        for q in it:
            start = time.perf_counter()
            await call(q)
            latencies.append(time.perf_counter() - start)

    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(in_flight)))
    return latencies, len(queries) / (time.perf_counter() - start)


async def _measure(
    ports: dict[str, int], answered: list[str], refused: list[str]
) -> dict[str, dict[str, float]]:
    results: dict[str, dict[str, float]] = {}
    async with (
        grpc.aio.insecure_channel(f"127.0.0.1:{ports['retrieval']}") as rch,
        grpc.aio.insecure_channel(f"127.0.0.1:{ports['gate']}") as gch,
    ):
        retrieval = retrieval_pb2_grpc.RetrievalServiceStub(rch)
        gate = gate_pb2_grpc.GateServiceStub(gch)

        async def retrieve(q: str) -> object:
            return await retrieval.Retrieve(
                retrieval_pb2.RetrieveRequest(tenant="bench", query=q), timeout=30
            )

        async def evaluate(q: str) -> object:
            return await gate.Evaluate(
                gate_pb2.EvaluateRequest(tenant="bench", query=q), timeout=30
            )

        async def ask(q: str) -> object:
            return [
                e async for e in gate.Ask(gate_pb2.AskRequest(tenant="bench", query=q), timeout=30)
            ]

        # Keep the fragments the gate passes, so "ask_answered" really reaches the generator.
        decided = await idle_decisions(gate, answered)
        passing = passed(answered, decided)
        results["answered_pass_rate"] = {"share": len(passing) / max(1, len(answered))}
        refusals = (await idle_decisions(gate, refused)).values()
        results["refused_read_rate"] = {"share": read_share(refusals)}
        results["answered_read_rate"] = {"share": read_share(decided[q] for q in set(passing))}
        n_answered = len(answered) // 3
        answered_passing = [passing[i % len(passing)] for i in range(n_answered)] if passing else []
        ops: dict[str, tuple[Callable[[str], Awaitable[object]], list[str]]] = {
            "retrieve": (retrieve, answered[:n_answered]),
            "evaluate": (evaluate, answered[:n_answered]),
            "ask_refused": (ask, refused),
            "ask_answered": (ask, answered_passing),
        }
        for name, (call, queries) in ops.items():
            await load(call, queries[:10], 1)  # warm-up
            for n in IN_FLIGHT:
                xs, rate = await load(call, queries, n)
                p50, p99 = p50_p99_ms(xs)
                results[f"{name}@{n}"] = {"p50_ms": p50, "p99_ms": p99, "rps": rate}
    return results


Procs = list[subprocess.Popen[bytes]]


def start_procs(env: dict[str, str], per_service: bool) -> Procs:
    """One process for the whole stack, or one per service as the Kubernetes manifests run it."""
    serve = [sys.executable, "-m", "candor.cli.main", "serve"]
    if not per_service:
        return [subprocess.Popen(serve, env=env, stderr=subprocess.DEVNULL)]
    # The gate writes the demo signing key pair the generator reads, so it goes first.
    gate = subprocess.Popen([*serve, "--service", "gate"], env=env, stderr=subprocess.DEVNULL)
    wait_ready([gate], {"gate": int(env["CANDOR_GATE__SERVER__PORT"])})
    return [gate] + [
        subprocess.Popen([*serve, "--service", s], env=env, stderr=subprocess.DEVNULL)
        for s in ("retrieval", "generator")
    ]


def wait_ready(procs: Procs, ports: dict[str, int]) -> None:
    for port in ports.values():
        while health_check(f"127.0.0.1:{port}") != "SERVING":
            if any(p.poll() is not None for p in procs):
                raise RuntimeError("stack exited during start-up")
            time.sleep(0.2)


def stop_procs(procs: Procs) -> None:
    for p in procs:
        p.send_signal(signal.SIGTERM)
    for p in procs:
        p.wait(60)


def stack_ports(port: int = 0) -> dict[str, int]:
    """Ports ``port`` .. ``port + 2`` for the three services (0: random in 57000-58499)."""
    base = port or 57000 + random.randrange(500) * 3
    return {"retrieval": base, "gate": base + 1, "generator": base + 2}


def stack_env(data_dir: str, ports: dict[str, int]) -> dict[str, str]:
    """The benchmarked stack's environment: its ports, one BLAS thread, no drain delay."""
    env = {**os.environ, "CANDOR_DATA_DIR": data_dir, "OMP_NUM_THREADS": "1"}
    for svc, port in ports.items():
        env[f"CANDOR_{svc.upper()}__SERVER__PORT"] = str(port)
        env[f"CANDOR_{svc.upper()}__SERVER__METRICS_PORT"] = "0"
        env[f"CANDOR_{svc.upper()}__SERVER__DRAIN_DELAY_SECONDS"] = "0"
    env["CANDOR_GATE__RETRIEVAL_TARGET"] = f"127.0.0.1:{ports['retrieval']}"
    env["CANDOR_GATE__GENERATOR_TARGET"] = f"127.0.0.1:{ports['generator']}"
    return env


def ingest(
    ports: dict[str, int], docs: list[retrieval_pb2.Document], tenant: str = "bench"
) -> float:
    """Upsert ``docs`` for ``tenant`` in batches of 200; chunks per second."""
    start = time.perf_counter()
    with grpc.insecure_channel(f"127.0.0.1:{ports['retrieval']}") as ch:
        stub = retrieval_pb2_grpc.RetrievalServiceStub(ch)
        for i in range(0, len(docs), 200):
            stub.UpsertDocuments(
                retrieval_pb2.UpsertDocumentsRequest(tenant=tenant, documents=docs[i : i + 200]),
                timeout=600,
            )
            done = min(i + 200, len(docs))
            status_line(f"  ingest {done}/{len(docs)}", done == len(docs))
    return len(docs) / (time.perf_counter() - start)


def run(
    n_chunks: int, n_queries: int, per_service: bool = False, port: int = 0
) -> dict[str, object]:
    """One size's run on ports ``port`` .. ``port + 2`` (0: random in 57000-58499)."""
    ports = stack_ports(port)
    with tempfile.TemporaryDirectory() as tmp:
        env = stack_env(tmp, ports)
        procs = start_procs(env, per_service)
        try:
            wait_ready(procs, ports)
            docs = make_documents(n_chunks)
            ingest_rate = ingest(ports, docs)
            stop_procs(procs)
            restart = time.perf_counter()
            procs = start_procs(env, per_service)
            wait_ready(procs, ports)
            startup = time.perf_counter() - restart
            refused = [REFUSED[i % len(REFUSED)] for i in range(n_queries)]
            # Three candidates per answered query; only those the gate passes are replayed.
            results = asyncio.run(_measure(ports, answered_queries(docs, 3 * n_queries), refused))
            return {
                "chunks": n_chunks,
                "ingest_chunks_per_s": ingest_rate,
                "restart_seconds": startup,
                "peak_rss_mib": sum(_rss_mib(p.pid) for p in procs),
                "processes": len(procs),
                "operations": results,
            }
        finally:
            stop_procs(procs)


def report(runs: list[dict[str, object]]) -> str:
    topology = (
        "each service in its own process (as deployed)"
        if runs and runs[0].get("processes", 1) != 1
        else "all three services in one process"
    )
    lines = [
        f"## Whole-stack benchmark — {time.strftime('%Y-%m-%d')}",
        "",
        f"Machine: {os.cpu_count()} cores, {platform.machine()}, Python "
        f"{platform.python_version()}; {topology} on the embedded "
        "backends, the shipped default policy, extractive generator. "
        "Command: `candor bench stack`.",
        "",
        "| chunks | operation | p50/p99 ms @1 | p50/p99 ms @8 | p50/p99 ms @32 | rps @1/@8/@32 |",
        "|---|---|---|---|---|---|",
    ]
    for r in runs:
        ops = r["operations"]
        assert isinstance(ops, dict)
        for op in ("retrieve", "evaluate", "ask_refused", "ask_answered"):
            cells = [ops[f"{op}@{n}"] for n in IN_FLIGHT]
            lat = " | ".join(f"{c['p50_ms']:.1f}/{c['p99_ms']:.1f}" for c in cells)
            rps = "/".join(f"{c['rps']:.0f}" for c in cells)
            lines.append(f"| {r['chunks']:,} | {op} | {lat} | {rps} |")
        lines.append(
            f"| {r['chunks']:,} | (stack) | ingest {r['ingest_chunks_per_s']:.0f} chunks/s, "
            f"peak RSS {r['peak_rss_mib']:.0f} MiB, restart {r['restart_seconds']:.1f} s, "
            f"answered queries passing the gate {ops['answered_pass_rate']['share']:.0%}, "
            f"read by the evidence reader: refused {ops['refused_read_rate']['share']:.0%}, "
            f"answered {ops['answered_read_rate']['share']:.0%} | | | |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="candor bench stack")
    ap.add_argument("--chunks", type=int, nargs="+", default=[10_000])
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--json", type=Path, default=None, help="write machine-readable results")
    ap.add_argument(
        "--port",
        type=int,
        default=0,
        help="first of three ports for the services (default: random)",
    )
    ap.add_argument(
        "--per-service",
        action="store_true",
        help="run each service in its own process (as deployed) instead of one process",
    )
    ap.add_argument("--out", type=Path, default=None, help="append the table to this file")
    args = ap.parse_args(argv)
    bench_output.prepare(args.out, args.json)
    runs = [run(n, args.queries, args.per_service, args.port) for n in args.chunks]
    flat = {}
    for r in runs:
        ops = r["operations"]
        assert isinstance(ops, dict)
        flat.update({f"{r['chunks']}:{op}": v for op, v in ops.items()})
    bench_output.publish(report(runs), args.out, args.json, flat)
    return 0


if __name__ == "__main__":
    sys.exit(main())
