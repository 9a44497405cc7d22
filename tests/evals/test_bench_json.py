"""The benchmark's machine-readable output follows the documented schema."""

from __future__ import annotations

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
