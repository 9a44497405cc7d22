"""The benchmark's machine-readable output follows the documented schema."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evals.bench_overload import Level
from evals.bench_retrieval import Result, as_json


def test_retrieval_bench_json_schema() -> None:
    r = Result(
        10_000,
        81.2,
        {1: (8.04, 12.5), 8: (30.0, 61.0), 32: (120.0, 190.0)},
        {1: 120.0, 8: 210.5, 32: 230.25},
        512.3,
        2.5,
    )
    out = as_json([r])
    assert out["10000:retrieve@1"] == {"p50_ms": 8.04, "p99_ms": 12.5, "rps": 120.0}
    assert out["10000:retrieve@32"]["rps"] == 230.2 or out["10000:retrieve@32"]["rps"] == 230.3
    assert out["10000:ingest"] == {"chunks_per_s": 81.2}
    assert out["10000:server"] == {"peak_rss_mib": 512.3, "restart_s": 2.5}
    assert len(out) == 5


def test_overload_figures_count_errors_as_calls_that_did_not_pass() -> None:
    level = Level(200, latencies=[0.1, 0.3, 0.2, 0.4], passed=2, degraded=1, seconds=2.0)
    level.errors["DEADLINE_EXCEEDED"] = 1
    s = level.summary()
    assert s["calls"] == 4
    assert (s["pass_share"], s["degraded_share"]) == (0.5, 0.25)
    assert (s["rps"], s["pass_rps"]) == (2.0, 1.0)
    assert s["p50_ms"] == pytest.approx(250.0)
    assert s["p99_ms"] == pytest.approx(300.0)  # nearest rank below: index int(0.99 * 3) = 2
    assert s["errors"] == {"DEADLINE_EXCEEDED": 1}
    assert Level(1).summary()["pass_share"] == 0.0  # no calls: no division by zero


def test_overload_report_gives_the_quiet_tenant_its_own_table() -> None:
    from evals.bench_overload import report

    noisy = Level(200, latencies=[0.1, 0.2], passed=2, seconds=1.0, retries=7)
    quiet = Level(4, latencies=[0.05], passed=1, seconds=1.0)
    quiet.errors["UNAVAILABLE"] = 1
    text = report(2000, 119, 120, [(noisy, quiet)])
    rows = [line for line in text.splitlines() if line.startswith("| ")]
    assert rows[1].startswith("| 200 | 2 | 100.0% |") and "| 7 |" in rows[1]
    assert "4 in flight throughout each level" in text
    assert rows[-1].startswith("| beside 200 | 1 | 100.0% |") and "UNAVAILABLE 1" in rows[-1]
    assert noisy.summary()["shed_retries"] == 7
    assert "beside" not in report(2000, 119, 120, [(noisy, None)])


def test_keyword_bench_measures_every_operation_and_writes_its_schema(tmp_path: Path) -> None:
    from evals import bench_keyword
    from retrieval_svc.stores.tantivy_store import OPEN_WRITERS

    out = tmp_path / "keyword.json"
    tenants = OPEN_WRITERS + 2
    argv = ["--chunks", "120", "--tenants", "1", str(tenants), "--queries", "25"]
    assert bench_keyword.main([*argv, "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    ops = {"search", "holds", "holds_beside_new_tenants", "write"}
    expected = {f"tantivy:120x1:{op}" for op in ops | {"ingest"}}
    expected |= {f"tantivy:120x{tenants}:{op}" for op in ops | {"ingest", "write_rotating"}}
    assert set(data) == expected  # rotating writes only where tenants outnumber open writers
    for key, figures in data.items():
        if key.endswith(":ingest"):
            assert figures["chunks_per_s"] > 0
        else:
            assert set(figures) == {"p50_ms", "p99_ms", "rps"}
            assert 0 < figures["p50_ms"] <= figures["p99_ms"] and figures["rps"] > 0


def test_keyword_bench_spreads_chunks_evenly_over_tenants() -> None:
    from evals.bench_keyword import make_chunks

    chunks = make_chunks(60, 4)
    assert {c.tenant for c in chunks} == {"t0", "t1", "t2", "t3"}
    assert all(sum(c.tenant == t for c in chunks) == 15 for t in ("t0", "t1", "t2", "t3"))
    assert len({c.chunk_id for c in chunks}) == 60


async def test_stack_bench_decides_each_query_once_and_counts_the_reads() -> None:
    from candor.gate.v1 import gate_pb2
    from evals.bench_stack import idle_decisions, passing_when_idle, read_share

    class Gate:
        def __init__(self) -> None:
            self.asked: list[str] = []

        async def Evaluate(self, request: gate_pb2.EvaluateRequest) -> gate_pb2.EvaluateResponse:
            self.asked.append(request.query)
            # Only a decision that ran the reader carries its score; a skipped one says so.
            read = request.query.startswith("read")
            signals = [gate_pb2.Signal(name="reader" if read else "reader_skipped", value=1.0)]
            outcome = gate_pb2.OUTCOME_PASS if read else gate_pb2.OUTCOME_REFUSE
            decision = gate_pb2.Decision(outcome=outcome, signals=signals)
            return gate_pb2.EvaluateResponse(decision=decision)

    gate = Gate()
    queries = ["read a", "skip b", "read a", "skip c", "read d"]
    decisions = await idle_decisions(gate, queries)  # type: ignore[arg-type]
    assert gate.asked == ["read a", "skip b", "skip c", "read d"]  # each once, in order
    assert read_share(decisions.values()) == 0.5  # 2 of the 4 distinct queries
    assert read_share([]) == 0.0
    # Duplicates that pass stay, as the load replays them.
    assert await passing_when_idle(gate, queries) == ["read a", "read a", "read d"]  # type: ignore[arg-type]
