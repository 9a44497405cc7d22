"""Write deploy/grafana/candor.json, the candor Grafana dashboard, from the panel list below.

    python scripts/gen_grafana_dashboard.py           # regenerate
    python scripts/gen_grafana_dashboard.py --check   # exit 1 if the committed file is stale

Panels read the recording rules of deploy/prometheus/rules.yaml where one exists (so the
dashboard and the alerts agree on what "refusal rate" means) and raw metrics otherwise. Every
metric a panel names is checked against what the services export (tests/deploy).
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from generated_file import write_or_check

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "deploy" / "grafana" / "candor.json"
NS = 'namespace="$namespace"'
RI = "$__rate_interval"
DS = {"type": "prometheus", "uid": "${datasource}"}


@dataclass
class Panel:
    title: str
    targets: list[tuple[str, str]]
    """(PromQL, legend)"""
    unit: str = "short"
    kind: str = "timeseries"
    width: int = 8
    height: int = 8
    description: str = ""
    stack: bool = False
    options: dict[str, Any] = field(default_factory=dict)


QUANTILES = (("0.5", "50"), ("0.95", "95"), ("0.99", "99"))
RPC_QUANTILE = "candor:grpc_server_handling_seconds:quantile_rate5m"
NAMESPACES = 'label_values(grpc_server_started_total{grpc_service=~"candor\\\\..+"}, namespace)'


def rpc_latency(method: str, service: str) -> Panel:
    sel = f'{NS},grpc_service="{service}",grpc_method="{method}"'
    return Panel(
        f"{method} latency p50 / p95 / p99",
        [(f'{RPC_QUANTILE}{{{sel},quantile="{q}"}}', f"p{p}") for q, p in QUANTILES],
        unit="s",
        width=6,
        description=f"{service}/{method}, server side, from the handling-time histogram.",
    )


ROWS: list[tuple[str, list[Panel]]] = [
    (
        "Gate decisions",
        [
            Panel(
                "Refusal rate (5m)",
                [(f"candor:gate_refusal_ratio:rate5m{{{NS}}}", "refused")],
                unit="percentunit",
                kind="stat",
                width=4,
                description="Refused decisions / all decisions. Alerts compare the 15m rate "
                "with the 1-day baseline (CandorRefusalRateSpike / Collapse).",
            ),
            Panel(
                "Refusal rate vs 1-day baseline",
                [
                    (f"candor:gate_refusal_ratio:rate15m{{{NS}}}", "last 15m"),
                    (f"candor:gate_refusal_ratio:rate1d{{{NS}}}", "1-day baseline"),
                ],
                unit="percentunit",
                width=10,
            ),
            Panel(
                "Decisions by tier",
                [
                    (
                        f"sum by (outcome, tier) (rate(candor_gate_decisions_total{{{NS}}}[{RI}]))",
                        "{{outcome}} / {{tier}}",
                    )
                ],
                unit="reqps",
                width=10,
                stack=True,
            ),
            Panel(
                "Refusal rate by reason",
                [(f"candor:gate_refusal_ratio_by_reason:rate5m{{{NS}}}", "{{reason}}")],
                unit="percentunit",
                width=12,
                stack=True,
                description="Share of all decisions refused for each reason; the stack is "
                "the refusal rate.",
            ),
            Panel(
                "Refusal rate by policy version",
                [
                    (
                        f"candor:gate_refusal_ratio_by_policy_version:rate5m{{{NS}}}",
                        "{{policy_version}}",
                    )
                ],
                unit="percentunit",
                width=12,
                description="During a threshold-config rollout two versions serve side by side.",
            ),
            Panel(
                "Confidence distribution",
                [
                    (
                        f"sum by (le) (increase(candor_gate_confidence_bucket{{{NS}}}[{RI}]))",
                        "{{le}}",
                    )
                ],
                unit="short",
                kind="heatmap",
                width=12,
                description="Decision confidence (0..1) over time, all outcomes.",
            ),
            Panel(
                "Threshold config versions",
                [
                    (f"candor_gate_policy_info{{{NS}}}", "{{role}}: {{policy_version}}"),
                    (f"candor_gate_evidence_reader_info{{{NS}}}", "reader {{model}}: {{digest}}"),
                ],
                kind="table",
                width=6,
                description="Version in each role (active, shadow) and the evidence reader "
                "(v4, v5) per gate pod; a config names the reader it was fitted on.",
            ),
            Panel(
                "Shadow disagreement / config reloads",
                [
                    (
                        f"candor:gate_shadow_disagreement_ratio:rate15m{{{NS}}}",
                        "shadow {{shadow_version}} disagrees",
                    ),
                    (
                        "sum by (role, result) "
                        f"(increase(candor_gate_config_reloads_total{{{NS}}}[{RI}]))",
                        "reload {{role}} {{result}}",
                    ),
                ],
                width=6,
            ),
        ],
    ),
    (
        "Latency",
        [
            rpc_latency("Ask", "candor.gate.v1.GateService"),
            rpc_latency("Evaluate", "candor.gate.v1.GateService"),
            rpc_latency("Retrieve", "candor.retrieval.v1.RetrievalService"),
            rpc_latency("Generate", "candor.generator.v1.GeneratorService"),
            Panel(
                "Ask latency SLO: share slower than 10 s",
                [
                    (f"candor:ask_latency_slo_errors:ratio_rate5m{{{NS}}}", "5m"),
                    (f"candor:ask_latency_slo_errors:ratio_rate1h{{{NS}}}", "1h"),
                    (f"candor:ask_latency_slo_errors:ratio_rate6h{{{NS}}}", "6h"),
                    (f"candor:ask_latency_slo_errors:ratio_rate1d{{{NS}}}", "1d"),
                ],
                unit="percentunit",
                width=12,
                description="SLO: 99% of Ask calls within 10 s (error budget 1%). "
                "CandorAskLatencyBudgetBurn pages at 14.4x / 6x the budget rate.",
            ),
            Panel(
                "Ask availability SLO: share failed on the server side",
                [
                    (f"candor:ask_availability_slo_errors:ratio_rate5m{{{NS}}}", "5m"),
                    (f"candor:ask_availability_slo_errors:ratio_rate1h{{{NS}}}", "1h"),
                    (f"candor:ask_availability_slo_errors:ratio_rate6h{{{NS}}}", "6h"),
                    (f"candor:ask_availability_slo_errors:ratio_rate1d{{{NS}}}", "1d"),
                ],
                unit="percentunit",
                width=12,
                description="SLO: 99.5% of Ask calls end without UNKNOWN, INTERNAL, UNAVAILABLE, "
                "DATA_LOSS or UNIMPLEMENTED (error budget 0.5%; a refusal is an answer). "
                "CandorAskAvailabilityBudgetBurn pages at 14.4x / 6x the budget rate.",
            ),
            Panel(
                "Evidence reader p50 / p99 and fallbacks",
                [
                    (
                        f"histogram_quantile({q}, sum by (le) "
                        f"(rate(candor_gate_reader_seconds_bucket{{{NS}}}[{RI}])))",
                        f"p{p}",
                    )
                    for q, p in (("0.5", "50"), ("0.99", "99"))
                ]
                + [
                    (
                        f"sum by (reason) (rate(candor_gate_reader_fallbacks_total{{{NS}}}[{RI}]))",
                        "fallback {{reason}} /s",
                    ),
                    (
                        f"sum by (bound) (rate(candor_gate_reader_skips_total{{{NS}}}[{RI}]))",
                        "skipped {{bound}} /s",
                    ),
                ],
                unit="s",
                width=12,
                description="Time the bundled reader spends on the top chunks of a decision "
                "whose policy weighs it; on a fallback (timeout, error, disabled) the reading "
                "weighs as 0, the lowest it can be. Skipped: refusals not read because even a "
                "certain reading would stay under the pass bound or the config's read floor; a "
                "rising read_floor rate after a corpus change is worth a look at the refused "
                "questions.",
            ),
            Panel(
                "Time to a decision p95 (retrieval included)",
                [
                    (
                        "histogram_quantile(0.95, sum by (le) "
                        f"(rate(candor_gate_evaluate_seconds_bucket{{{NS}}}[{RI}])))",
                        "p95",
                    )
                ],
                unit="s",
                width=12,
            ),
        ],
    ),
    (
        "Retrieval",
        [
            Panel(
                "Arm latency p50 / p95 / p99",
                [
                    (
                        f'candor:retrieval_arm_seconds:quantile_rate5m{{{NS},quantile="{q}"}}',
                        f"{{{{arm}}}} p{p}",
                    )
                    for q, p in QUANTILES
                ],
                unit="s",
            ),
            Panel(
                "Arm results by state",
                [
                    (
                        "sum by (arm, state) "
                        f"(rate(candor_retrieval_arm_outcomes_total{{{NS}}}[{RI}]))",
                        "{{arm}} {{state}}",
                    )
                ],
                unit="ops",
                stack=True,
            ),
            Panel(
                "Arm error + timeout rate",
                [(f"candor:retrieval_arm_failure_ratio:rate5m{{{NS}}}", "{{arm}}")],
                unit="percentunit",
                description="CandorRetrievalArmFailing fires above 5% for 10 minutes. A "
                "`deadline` state (the caller's deadline cut an arm short) is not counted.",
            ),
            Panel(
                "Gate calls to retrieval / generator failing",
                [(f"candor:gate_downstream_error_ratio:rate5m{{{NS}}}", "{{downstream}}")],
                unit="percentunit",
                description="The gate's own view of its calls (candor_gate_downstream_calls_total):"
                " it sees a network or DNS failure between the pods that the retrieval arms' "
                "panel cannot. CandorGateDownstreamFailing fires above 5% for 10 minutes.",
            ),
            Panel(
                "Index size (chunks) / empty results",
                [
                    (f"max by (arm) (candor_retrieval_index_chunks{{{NS}}})", "{{arm}} chunks"),
                    (
                        f"sum(rate(candor_retrieval_empty_results_total{{{NS}}}[{RI}]))",
                        "empty results/s",
                    ),
                ],
                width=12,
            ),
            Panel(
                "Ingest: documents by outcome",
                [
                    (
                        "sum by (op, outcome) "
                        f"(rate(candor_retrieval_documents_total{{{NS}}}[{RI}]))",
                        "{{op}} {{outcome}}",
                    ),
                    (
                        f"sum(rate(candor_retrieval_chunks_written_total{{{NS}}}[{RI}]))",
                        "chunks written/s",
                    ),
                ],
                unit="ops",
                width=12,
            ),
            Panel(
                "Documents out of step between the stores (read at the keyword store's)",
                [
                    (
                        f"sum(rate(candor_retrieval_out_of_step_total{{{NS}}}[{RI}]))",
                        "documents/s",
                    ),
                ],
                unit="ops",
                width=12,
            ),
        ],
    ),
    (
        "Generator",
        [
            Panel(
                "LLM calls by backend and outcome",
                [
                    (
                        f"sum by (backend) (rate(candor_generator_llm_calls_total{{{NS}}}[{RI}]))",
                        "{{backend}} calls",
                    ),
                    (
                        "sum by (backend, outcome) "
                        f"(rate(candor_generator_llm_outcomes_total{{{NS}}}[{RI}]))",
                        "{{backend}} {{outcome}}",
                    ),
                ],
                unit="ops",
            ),
            Panel(
                "LLM tokens by direction",
                [
                    (
                        "sum by (backend, direction) "
                        f"(rate(candor_generator_llm_tokens_total{{{NS}}}[{RI}]))",
                        "{{backend}} {{direction}}",
                    )
                ],
                unit="short",
                description="Tokens per second the backend reported (or estimated).",
            ),
            Panel(
                "LLM time to first token / generation p95",
                [
                    (
                        "histogram_quantile(0.95, sum by (le, backend) "
                        "(rate(candor_generator_time_to_first_token_seconds_bucket"
                        f"{{{NS}}}[{RI}])))",
                        "{{backend}} first token p95",
                    ),
                    (
                        "histogram_quantile(0.95, sum by (le, backend) "
                        f"(rate(candor_generator_generation_seconds_bucket{{{NS}}}[{RI}])))",
                        "{{backend}} generation p95",
                    ),
                ],
                unit="s",
            ),
            Panel(
                "Pass-token rejections by reason",
                [
                    (
                        "sum by (reason) "
                        f"(increase(candor_generator_token_rejections_total{{{NS}}}[{RI}]))",
                        "{{reason}}",
                    )
                ],
                unit="short",
                kind="bars",
                width=12,
                description="Any rejection fires CandorPassTokenRejected.",
            ),
            Panel(
                "Citation verifications",
                [
                    (
                        "sum by (result) "
                        f"(rate(candor_generator_verifications_total{{{NS}}}[{RI}]))",
                        "{{result}}",
                    ),
                    (
                        f"candor:generator_verification_failure_ratio:rate15m{{{NS}}}",
                        "failure ratio (15m)",
                    ),
                    (
                        "sum by (reason) "
                        f"(rate(candor_generator_verification_failures_total{{{NS}}}[{RI}]))",
                        "failed: {{reason}}",
                    ),
                ],
                unit="short",
                width=12,
                description="failed = an answer cited text its evidence does not contain "
                "(tier VERIFICATION_FAILED); failed: <reason> = why, one per failed citation "
                "or uncited sentence (runbook: CandorCitationVerificationFailures).",
            ),
        ],
    ),
    (
        "gRPC",
        [
            Panel(
                "Requests by method and code",
                [
                    (
                        "sum by (grpc_method, grpc_code) (rate(grpc_server_handled_total"
                        f'{{{NS},grpc_service=~"candor\\\\..+"}}[{RI}]))',
                        "{{grpc_method}} {{grpc_code}}",
                    )
                ],
                unit="reqps",
                width=12,
                stack=True,
            ),
            Panel(
                "Server-side error ratio",
                [
                    (
                        f"candor:grpc_server_error_ratio:rate5m{{{NS}}}",
                        "{{grpc_service}}/{{grpc_method}}",
                    )
                ],
                unit="percentunit",
                width=12,
            ),
            Panel(
                "Calls in flight per pod, against the limit",
                [
                    (
                        f"candor_server_calls_in_flight{{{NS}}}",
                        "{{pod}} in flight",
                    ),
                    (
                        f"candor_server_max_in_flight{{{NS}}} > 0",
                        "{{pod}} limit",
                    ),
                ],
                width=12,
                description="server.max_in_flight: a pod at its limit refuses the next call "
                "UNAVAILABLE (OVERLOADED). Health checks are not counted.",
            ),
            Panel(
                "Shed calls (over the in-flight limit)",
                [
                    (
                        f"sum by (grpc_service) (rate(candor_server_shed_total{{{NS}}}[{RI}]))",
                        "{{grpc_service}}",
                    ),
                    (
                        f"sum(rate(candor_gate_tenant_limited_total{{{NS}}}[{RI}]))",
                        "gate: one tenant over its share",
                    ),
                ],
                unit="reqps",
                width=12,
                description="Calls refused before any work because their pod had "
                "server.max_in_flight running (UNAVAILABLE), or their tenant had "
                "gate.max_in_flight_per_tenant (RESOURCE_EXHAUSTED, tenant in the gate log); "
                "callers retry with backoff. Sustained: add replicas (runbook CandorLoadShedding).",
            ),
        ],
    ),
]


def _panel_json(p: Panel, pid: int, x: int, y: int) -> dict[str, Any]:
    targets = [
        {
            "datasource": DS,
            "expr": expr,
            "legendFormat": legend,
            "refId": chr(ord("A") + i),
            **({"format": "heatmap"} if p.kind == "heatmap" else {}),
            **({"instant": True, "format": "table"} if p.kind == "table" else {}),
        }
        for i, (expr, legend) in enumerate(p.targets)
    ]
    kind = "timeseries" if p.kind == "bars" else p.kind
    custom: dict[str, Any] = {}
    if kind == "timeseries":
        custom = {
            "drawStyle": "bars" if p.kind == "bars" else "line",
            "fillOpacity": 30 if (p.stack or p.kind == "bars") else 10,
            "stacking": {"mode": "normal" if p.stack else "none", "group": "A"},
            "showPoints": "never",
        }
    out: dict[str, Any] = {
        "id": pid,
        "type": kind,
        "title": p.title,
        "description": p.description,
        "datasource": DS,
        "gridPos": {"h": p.height, "w": p.width, "x": x, "y": y},
        "targets": targets,
        "fieldConfig": {"defaults": {"unit": p.unit, "custom": custom}, "overrides": []},
        "options": p.options,
    }
    if kind == "heatmap":
        out["options"] = {
            "calculate": False,
            "yAxis": {"unit": "short"},
            "cellGap": 1,
            "color": {"mode": "scheme", "scheme": "Oranges"},
        }
        out["fieldConfig"] = {"defaults": {"custom": {}}, "overrides": []}
    if kind == "stat":
        out["options"] = {"reduceOptions": {"calcs": ["lastNotNull"]}, "colorMode": "value"}
    return out


def render() -> str:
    panels: list[dict[str, Any]] = []
    pid, y = 1, 0
    for title, row in ROWS:
        panels.append(
            {
                "id": pid,
                "type": "row",
                "title": title,
                "collapsed": False,
                "gridPos": {"h": 1, "w": 24, "x": 0, "y": y},
                "panels": [],
            }
        )
        pid, y, x, row_h = pid + 1, y + 1, 0, 0
        for p in row:
            if x + p.width > 24:
                x, y, row_h = 0, y + row_h, 0
            panels.append(_panel_json(p, pid, x, y))
            pid, x, row_h = pid + 1, x + p.width, max(row_h, p.height)
        y += row_h
    dashboard = {
        "uid": "candor-overview",
        "title": "candor",
        "description": "candor: refusals, latency, retrieval arms, LLM use, pass tokens and "
        "citation verification (generated by scripts/gen_grafana_dashboard.py).",
        "tags": ["candor"],
        "timezone": "utc",
        "editable": True,
        "graphTooltip": 1,
        "refresh": "30s",
        "schemaVersion": 39,
        "version": 1,
        "time": {"from": "now-6h", "to": "now"},
        "links": [],
        "annotations": {"list": []},
        "templating": {
            "list": [
                {
                    "name": "datasource",
                    "label": "Data source",
                    "type": "datasource",
                    "query": "prometheus",
                    "current": {},
                    "hide": 0,
                },
                {
                    "name": "namespace",
                    "label": "Namespace",
                    "type": "query",
                    "datasource": DS,
                    "query": {
                        "query": NAMESPACES,
                        "refId": "namespace",
                    },
                    "definition": NAMESPACES,
                    "refresh": 2,
                    "sort": 1,
                    "current": {},
                    "hide": 0,
                },
            ]
        },
        "panels": panels,
    }
    return json.dumps(dashboard, indent=2) + "\n"


def main(argv: list[str] | None = None) -> int:
    return write_or_check(render, OUT, ROOT, "gen_grafana_dashboard.py", argv, __doc__)


if __name__ == "__main__":
    sys.exit(main())
