"""Every PromQL expression the rules and the dashboard use, and the selectors inside them."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

import yaml

from tests.deploy.tools import DEPLOY, promql_parser

RULES = DEPLOY / "prometheus" / "rules.yaml"
DASHBOARD = DEPLOY / "grafana" / "candor.json"
# Grafana's variables, replaced by something PromQL parses.
GRAFANA_VARS = {"$__rate_interval": "5m", "$__interval": "1m", "$__range": "1h", "$namespace": "ns"}


@dataclass(frozen=True)
class Selector:
    name: str
    matchers: tuple[tuple[str, str, str], ...]
    """(label, op, value) with op one of = != =~ !~"""


_OPS = {"Equal": "=", "NotEqual": "!=", "Re": "=~", "NotRe": "!~"}


def selectors(expr: str) -> list[Selector]:
    parser = promql_parser()
    out: list[Selector] = []

    def walk(node: Any) -> None:
        kind = type(node).__name__
        if kind == "VectorSelector":
            matchers = [
                (m.name, _OPS[str(m.op).rsplit(".", 1)[-1]], m.value)
                for m in node.matchers.matchers
            ]
            name = node.name or next(v for (k, _, v) in matchers if k == "__name__")
            out.append(Selector(name, tuple(m for m in matchers if m[0] != "__name__")))
            return
        if kind == "MatrixSelector":
            walk(node.vector_selector)
            return
        for attr in ("expr", "lhs", "rhs", "param"):
            child = getattr(node, attr, None)
            if child is not None:
                walk(child)
        for child in getattr(node, "args", None) or []:
            walk(child)

    walk(parser.parse(expr))
    return out


def rules() -> list[dict[str, Any]]:
    doc = yaml.safe_load(RULES.read_text())
    return [rule for group in doc["groups"] for rule in group["rules"]]


def recorded() -> set[str]:
    return {r["record"] for r in rules() if "record" in r}


def alerts() -> list[dict[str, Any]]:
    return [r for r in rules() if "alert" in r]


def dashboard() -> dict[str, Any]:
    return dict(json.loads(DASHBOARD.read_text()))


def grafana_to_promql(expr: str) -> str:
    for var, value in GRAFANA_VARS.items():
        expr = expr.replace(var, value)
    assert "$" not in expr, f"unknown Grafana variable in {expr}"
    return expr


def dashboard_exprs() -> list[tuple[str, str]]:
    """(where, PromQL) for every panel target and templating query."""
    out = []
    d = dashboard()
    for panel in d["panels"]:
        for target in panel.get("targets", []):
            out.append((panel["title"], grafana_to_promql(target["expr"])))
    for var in d["templating"]["list"]:
        query = var.get("query")
        if isinstance(query, dict):
            m = re.fullmatch(r"label_values\((.*),\s*\w+\)", query["query"])
            assert m, query
            out.append((f"variable {var['name']}", grafana_to_promql(m.group(1))))
    return out


def rule_exprs() -> list[tuple[str, str]]:
    return [(r.get("record") or r["alert"], str(r["expr"])) for r in rules()]
