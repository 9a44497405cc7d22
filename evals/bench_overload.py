"""Overload probe over gRPC: what answerable questions get when more arrive than the stack can read.

    candor bench overload [--chunks 2000] [--in-flight 1 32 200] [--deadline 5] [--json PATH]

Starts the stack as ``candor bench stack`` does, keeps the sentence fragments the gate passes at
one call in flight, then asks them again at each level of calls in flight. Every one of them
passed when the stack was idle, so each refusal under load is the load's: the report gives the
share still passing, the share marked ``degraded`` (a reading or an arm missing), errors by
status code, and passes per second, the throughput that is worth anything.

With ``--quiet N``, a second tenant holding the same documents asks the same questions at N in
flight throughout each level: what one tenant's burst does to another's calls (set
``gate.max_in_flight_per_tenant`` to see the per-tenant limit's effect).

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
from collections.abc import Awaitable, Callable
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


def _evaluator(
    gate: gate_pb2_grpc.GateServiceStub, tenant: str, level: Level, deadline: float, seed: int
) -> Callable[[str], Awaitable[None]]:
    """One Evaluate for ``tenant`` as a well-behaved caller makes it, recorded in ``level``."""
    rng = random.Random(seed)

    async def evaluate(q: str) -> None:
        until = time.monotonic() + deadline
        attempt = 0
        while True:
            try:
                reply = await gate.Evaluate(
                    gate_pb2.EvaluateRequest(tenant=tenant, query=q),
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

    return evaluate


async def _level(
    gate: gate_pb2_grpc.GateServiceStub,
    questions: list[str],
    in_flight: int,
    deadline: float,
    quiet: int = 0,
) -> tuple[Level, Level | None]:
    level = Level(in_flight)
    evaluate = _evaluator(gate, "bench", level, deadline, 0)
    quiet_level = Level(quiet) if quiet else None
    stop = asyncio.Event()

    async def quiet_caller(worker: int) -> None:
        assert quiet_level is not None
        ask = _evaluator(gate, QUIET_TENANT, quiet_level, deadline, worker + 1)
        i = worker
        while not stop.is_set():
            start = time.perf_counter()
            await ask(questions[i % len(questions)])
            quiet_level.latencies.append(time.perf_counter() - start)
            i += quiet

    quiet_tasks = [asyncio.ensure_future(quiet_caller(w)) for w in range(quiet)]
    # At least three calls per slot, so the queue is full for most of the run.
    want = max(len(questions), 3 * in_flight)
    calls = [questions[i % len(questions)] for i in range(want)]
    started = time.perf_counter()
    level.latencies, rate = await load(evaluate, calls, in_flight)
    level.seconds = len(calls) / rate
    stop.set()
    await asyncio.gather(*quiet_tasks)
    if quiet_level is not None:
        quiet_level.seconds = time.perf_counter() - started
    return level, quiet_level


async def _measure(
    port: int, candidates: list[str], levels: list[int], deadline: float, quiet: int
) -> tuple[int, list[tuple[Level, Level | None]]]:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        gate = gate_pb2_grpc.GateServiceStub(channel)
        passing = await passing_when_idle(gate, candidates)
        if not passing:
            raise RuntimeError("the gate passed none of the questions when idle")
        return len(passing), [await _level(gate, passing, n, deadline, quiet) for n in levels]


QUIET_TENANT = "bench-quiet"


def report(
    chunks: int, idle_passing: int, asked: int, levels: list[tuple[Level, Level | None]]
) -> str:
    lines = [
        f"Overload probe (`candor bench overload`), {chunks:,} chunks: {idle_passing} of {asked} "
        "questions passed with one call in flight; each level asks those again.",
        "",
        "| in flight | calls | passing | degraded | errors | shed retries | rps | passes/s "
        "| p50/p99 ms |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    quiet = [(lv.in_flight, q) for lv, q in levels if q is not None]
    for level, _ in levels:
        lines.append(_row(str(level.in_flight), level))
    if quiet:
        lines += [
            "",
            f"The other tenant, {quiet[0][1].in_flight} in flight throughout each level:",
            "",
            lines[2],
            lines[3],
        ]
        lines += [_row(f"beside {n}", q) for n, q in quiet]
    return "\n".join(lines) + "\n"


def _row(label: str, level: Level) -> str:
    s = level.summary()
    errors = ", ".join(f"{k} {v}" for k, v in level.errors.items()) or "none"
    return (
        f"| {label} | {s['calls']} | {s['pass_share']:.1%} | "
        f"{s['degraded_share']:.1%} | {errors} | {level.retries} | {s['rps']:.0f} | "
        f"{s['pass_rps']:.0f} | {s['p50_ms']:.0f}/{s['p99_ms']:.0f} |"
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="candor bench overload")
    ap.add_argument("--chunks", type=int, default=2000)
    ap.add_argument("--questions", type=int, default=120, help="fragments tried when idle")
    ap.add_argument("--in-flight", type=int, nargs="+", default=[1, 32, 200])
    ap.add_argument("--deadline", type=float, default=5.0, help="each call's deadline, seconds")
    ap.add_argument("--port", type=int, default=0, help="first of three ports (default: random)")
    ap.add_argument("--per-service", action="store_true", help="one process per service")
    ap.add_argument(
        "--quiet", type=int, default=0, help="a second tenant's calls in flight meanwhile"
    )
    ap.add_argument("--json", type=Path, default=None, help="write machine-readable results")
    args = ap.parse_args(argv)
    if min(args.in_flight) < 1 or args.deadline <= 0 or args.chunks < 1 or args.quiet < 0:
        ap.error("--in-flight, --deadline and --chunks must be positive, --quiet not negative")
    ports = stack_ports(args.port)
    with tempfile.TemporaryDirectory() as tmp:
        procs = start_procs(stack_env(tmp, ports), args.per_service)
        try:
            wait_ready(procs, ports)
            docs = make_documents(args.chunks)
            ingest(ports, docs)
            if args.quiet:
                ingest(ports, docs, QUIET_TENANT)
            candidates = answered_queries(docs, args.questions)
            passing, levels = asyncio.run(
                _measure(ports["gate"], candidates, args.in_flight, args.deadline, args.quiet)
            )
        finally:
            stop_procs(procs)
    print(report(args.chunks, passing, len(candidates), levels))
    if args.json:
        out = {f"{args.chunks}:evaluate@{lv.in_flight}": lv.summary() for lv, _ in levels}
        for lv, q in levels:
            if q is not None:
                out[f"{args.chunks}:quiet@{q.in_flight}:beside@{lv.in_flight}"] = q.summary()
        args.json.write_text(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
