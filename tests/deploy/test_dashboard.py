"""The Grafana dashboard: generated, valid, covering what the issue asks for, every query
parses and every recording rule it reads exists."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

from tests.deploy.promql import dashboard, dashboard_exprs, recorded, selectors
from tests.deploy.tools import ROOT


def test_dashboard_is_generated_from_its_script() -> None:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gen_grafana_dashboard.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_dashboard_structure() -> None:
    d = dashboard()
    assert d["uid"] == "candor-overview" and d["schemaVersion"] >= 36
    ids = [p["id"] for p in d["panels"]]
    assert len(ids) == len(set(ids))
    variables = {v["name"]: v for v in d["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    for panel in d["panels"]:
        if panel["type"] == "row":
            continue
        assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
        assert panel["targets"], panel["title"]
        for t in panel["targets"]:
            assert 'namespace="$namespace"' in t["expr"], panel["title"]
        g = panel["gridPos"]
        assert g["x"] >= 0 and g["x"] + g["w"] <= 24, panel["title"]
    cells: dict[tuple[int, int], str] = {}
    for panel in d["panels"]:
        g = panel["gridPos"]
        for x in range(g["x"], g["x"] + g["w"]):
            for y in range(g["y"], g["y"] + g["h"]):
                assert (x, y) not in cells, f"{panel['title']} overlaps {cells[(x, y)]}"
                cells[(x, y)] = panel["title"]


def _panel(title_part: str) -> dict[str, Any]:
    found = [p for p in dashboard()["panels"] if title_part.lower() in p["title"].lower()]
    assert len(found) == 1, (title_part, [p["title"] for p in found])
    return found[0]


def _exprs(panel: dict[str, Any]) -> str:
    return "\n".join(t["expr"] for t in panel["targets"])


def test_dashboard_has_the_panels_sre_asked_for() -> None:
    assert "by_reason" in _exprs(_panel("Refusal rate by reason"))
    assert "by_policy_version" in _exprs(_panel("Refusal rate by policy version"))
    assert "tier" in _exprs(_panel("Decisions by tier"))
    heatmap = _panel("Confidence distribution")
    assert heatmap["type"] == "heatmap" and "candor_gate_confidence_bucket" in _exprs(heatmap)
    assert heatmap["targets"][0]["format"] == "heatmap"
    for method in ("Ask", "Evaluate", "Retrieve", "Generate"):
        p = _panel(f"{method} latency p50")
        legends = sorted(t["legendFormat"] for t in p["targets"])
        assert legends == ["p50", "p95", "p99"], method
        assert f'grpc_method="{method}"' in _exprs(p)
    assert "candor:retrieval_arm_seconds" in _exprs(_panel("Arm latency"))
    assert "candor_retrieval_arm_outcomes_total" in _exprs(_panel("Arm results by state"))
    assert "arm_failure_ratio" in _exprs(_panel("Arm error + timeout rate"))
    assert "candor_generator_llm_calls_total" in _exprs(_panel("LLM calls"))
    assert "candor_generator_llm_tokens_total" in _exprs(_panel("LLM tokens"))
    assert "candor_generator_token_rejections_total" in _exprs(_panel("token rejections"))
    assert "result" in _exprs(_panel("Citation verifications"))


def test_every_query_parses_and_reads_existing_recording_rules() -> None:
    rules = recorded()
    for where, expr in dashboard_exprs():
        for sel in selectors(expr):
            if ":" in sel.name:
                assert sel.name in rules, f"{where}: no recording rule {sel.name}"
