"""Run the sample help-centre questions through a fresh embedded stack and print the numbers.

    python -m evals.sample_kb [--repeat N]

Prints, per question kind, how many passed and whether the admitted evidence holds the gold
article, then the p50/p95 latency of Ask for answered and refused questions.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

import grpc

from candor.cli import client
from candor.cli.stack import start_stack
from candor.gate.v1 import gate_pb2, gate_pb2_grpc
from candor.runtime.server import shutdown
from candor.settings import load_settings

SAMPLES = Path(__file__).resolve().parent.parent / "samples" / "helpcentre"


def _addresses(services: list) -> dict[str, str]:  # type: ignore[type-arg]
    return {s.spec.name.rsplit(".", 1)[-1]: s.address for s in services}


async def run(repeat: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        env = {
            "CANDOR_DATA_DIR": tmp,
            "CANDOR_RETRIEVAL__SERVER__PORT": "0",
            "CANDOR_RETRIEVAL__SERVER__METRICS_PORT": "0",
            "CANDOR_GATE__SERVER__PORT": "0",
            "CANDOR_GATE__SERVER__METRICS_PORT": "0",
            "CANDOR_GENERATOR__SERVER__PORT": "0",
            "CANDOR_GENERATOR__SERVER__METRICS_PORT": "0",
        }
        services = await start_stack(load_settings(env=env))
        try:
            await asyncio.to_thread(_measure, _addresses(services), repeat)
        finally:
            await shutdown(services)


def _measure(addr: dict[str, str], repeat: int) -> None:
    with grpc.insecure_channel(addr["RetrievalService"]) as ch:
        client.ingest(ch, SAMPLES, "default", None)
    questions = [
        json.loads(line)
        for line in (SAMPLES / "questions.jsonl").read_text().splitlines()
        if line.strip()
    ]
    by_kind: dict[str, list[tuple[bool, bool]]] = {}
    latency: dict[str, list[float]] = {"answered": [], "refused": []}
    with grpc.insecure_channel(addr["GateService"]) as ch:
        stub = gate_pb2_grpc.GateServiceStub(ch)
        for q in questions:
            d = stub.Evaluate(
                gate_pb2.EvaluateRequest(tenant="default", query=q["question"])
            ).decision
            passed = d.outcome == gate_pb2.OUTCOME_PASS
            gold_in = any(e.document_id in q["gold_ids"] for e in d.evidence)
            by_kind.setdefault(q["kind"], []).append((passed, gold_in))
            for _ in range(repeat):
                start = time.perf_counter()
                client.ask(ch, q["question"], "default", None)
                latency["answered" if passed else "refused"].append(time.perf_counter() - start)
    print(f"{'kind':<14}{'n':>4}{'passed':>8}{'gold in evidence':>18}")
    for kind, rows in sorted(by_kind.items()):
        print(
            f"{kind:<14}{len(rows):>4}{sum(p for p, _ in rows):>8}"
            f"{sum(p and g for p, g in rows):>18}"
        )
    for name, xs in latency.items():
        if xs:
            xs.sort()
            print(
                f"Ask latency {name:<9} n={len(xs):<4} p50={statistics.median(xs) * 1000:.1f} ms "
                f"p95={xs[int(0.95 * (len(xs) - 1))] * 1000:.1f} ms"
            )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    asyncio.run(run(args.repeat))


if __name__ == "__main__":
    main()
