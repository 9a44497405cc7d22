"""Overload probe over gRPC: what answerable questions get when more arrive than the stack can read.

    candor bench overload [--chunks 2000] [--in-flight 1 32 200] [--deadline 5] [--json PATH]

Starts the stack as ``candor bench stack`` does, keeps the sentence fragments the gate passes at
one call in flight, then asks them again at each level of calls in flight. Every one of them
passed when the stack was idle, so each refusal under load is the load's: the report gives the
share still passing, the share marked ``degraded`` (a reading or an arm missing), errors by
status code, and passes per second, the throughput that is worth anything.

A call the gate sheds (``server.max_in_flight``) is retried after its hinted delay, with
jitter and exponential backoff, until the call's deadline, as the README tells callers to: a
shed call that never got in counts as its last error, and each retry is counted.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from candor.gate.v1 import gate_pb2, gate_pb2_grpc
from candor.runtime.admission import retry_delay_of
from evals.bench_retrieval import make_documents, p50_p99_ms
from evals.bench_stack import (
    answered_queries,
    ingest,
    load,
    passing_when_idle,
    stack_env,
    stack_ports,
    start_procs,
    stop_procs,
    wait_ready,
)

MAX_BACKOFF_SECONDS = 2.0


@dataclass
class Level:
    """What the calls at one level of calls in flight got."""

    in_flight: int
    latencies: list[float] = field(default_factory=list)
    """Every call's, errors included."""
    passed: int = 0
    degraded: int = 0
    errors: Counter[str] = field(default_factory=Counter)
    retries: int = 0
    """Calls the gate shed and the client sent again."""
    seconds: float = 0.0

    def summary(self) -> dict[str, object]:
        """The level's figures; shares are of every call made, errors included."""
        calls = len(self.latencies)
        n = max(1, calls)
        p50, p99 = p50_p99_ms(self.latencies)
        return {
            "calls": calls,
            "pass_share": self.passed / n,
            "degraded_share": self.degraded / n,
            "errors": dict(sorted(self.errors.items())),
            "shed_retries": self.retries,
            "rps": calls / self.seconds if self.seconds else 0.0,
            "pass_rps": self.passed / self.seconds if self.seconds else 0.0,
            "p50_ms": p50,
            "p99_ms": p99,
        }


async def _level(
    gate: gate_pb2_grpc.GateServiceStub, questions: list[str], in_flight: int, deadline: float
) -> Level:
    level = Level(in_flight)

    rng = random.Random(0)

    async def evaluate(q: str) -> None:
        until = time.monotonic() + deadline
        attempt = 0
        while True:
            try:
                reply = await gate.Evaluate(
                    gate_pb2.EvaluateRequest(tenant="bench", query=q),
                    timeout=max(0.001, until - time.monotonic()),
                )
                break
            except grpc.aio.AioRpcError as exc:
                hint = retry_delay_of(exc)
                if hint is not None:
                    # Exponential backoff from the hint, full jitter: retrying every 100 ms,
                    # 170 waiting callers spent the CPU the admitted calls needed.
                    delay = rng.uniform(0, min(MAX_BACKOFF_SECONDS, hint * 2**attempt))
                    attempt += 1
                    if time.monotonic() + delay < until:
                        level.retries += 1
                        await asyncio.sleep(delay)
                        continue
                level.errors[exc.code().name] += 1
                return
        level.passed += reply.decision.outcome == gate_pb2.OUTCOME_PASS
        level.degraded += reply.decision.degraded

    # At least three calls per slot, so the queue is full for most of the run.
    want = max(len(questions), 3 * in_flight)
    calls = [questions[i % len(questions)] for i in range(want)]
    level.latencies, rate = await load(evaluate, calls, in_flight)
    level.seconds = len(calls) / rate
    return level


async def _measure(
    port: int, candidates: list[str], levels: list[int], deadline: float
) -> tuple[int, list[Level]]:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        gate = gate_pb2_grpc.GateServiceStub(channel)
        passing = await passing_when_idle(gate, candidates)
        if not passing:
            raise RuntimeError("the gate passed none of the questions when idle")
        return len(passing), [await _level(gate, passing, n, deadline) for n in levels]


def report(chunks: int, idle_passing: int, asked: int, levels: list[Level]) -> str:
    lines = [
        f"Overload probe (`candor bench overload`), {chunks:,} chunks: {idle_passing} of {asked} "
        "questions passed with one call in flight; each level asks those again.",
        "",
        "| in flight | calls | passing | degraded | errors | shed retries | rps | passes/s "
        "| p50/p99 ms |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for level in levels:
        s = level.summary()
        errors = ", ".join(f"{k} {v}" for k, v in level.errors.items()) or "none"
        lines.append(
            f"| {level.in_flight} | {s['calls']} | {s['pass_share']:.1%} | "
            f"{s['degraded_share']:.1%} | {errors} | {level.retries} | {s['rps']:.0f} | "
            f"{s['pass_rps']:.0f} | "
            f"{s['p50_ms']:.0f}/{s['p99_ms']:.0f} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="candor bench overload")
    ap.add_argument("--chunks", type=int, default=2000)
    ap.add_argument("--questions", type=int, default=120, help="fragments tried when idle")
    ap.add_argument("--in-flight", type=int, nargs="+", default=[1, 32, 200])
    ap.add_argument("--deadline", type=float, default=5.0, help="each call's deadline, seconds")
    ap.add_argument("--port", type=int, default=0, help="first of three ports (default: random)")
    ap.add_argument("--per-service", action="store_true", help="one process per service")
    ap.add_argument("--json", type=Path, default=None, help="write machine-readable results")
    args = ap.parse_args(argv)
    if min(args.in_flight) < 1 or args.deadline <= 0 or args.chunks < 1:
        ap.error("--in-flight, --deadline and --chunks must be positive")
    ports = stack_ports(args.port)
    with tempfile.TemporaryDirectory() as tmp:
        procs = start_procs(stack_env(tmp, ports), args.per_service)
        try:
            wait_ready(procs, ports)
            docs = make_documents(args.chunks)
            ingest(ports, docs)
            candidates = answered_queries(docs, args.questions)
            passing, levels = asyncio.run(
                _measure(ports["gate"], candidates, args.in_flight, args.deadline)
            )
        finally:
            stop_procs(procs)
    print(report(args.chunks, passing, len(candidates), levels))
    if args.json:
        out = {f"{args.chunks}:evaluate@{lv.in_flight}": lv.summary() for lv in levels}
        args.json.write_text(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
