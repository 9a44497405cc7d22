"""Write deploy/prometheus/prometheusrule.yaml (a prometheus-operator PrometheusRule) from
deploy/prometheus/rules.yaml, the plain rule file that promtool checks and tests.

    python scripts/gen_prometheus_rule.py           # regenerate
    python scripts/gen_prometheus_rule.py --check   # exit 1 if the committed file is stale
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import yaml
from generated_file import write_or_check

ROOT = Path(__file__).resolve().parents[1]
RULES = ROOT / "deploy" / "prometheus" / "rules.yaml"
OUT = ROOT / "deploy" / "prometheus" / "prometheusrule.yaml"
HEADER = (
    "# GENERATED from deploy/prometheus/rules.yaml by scripts/gen_prometheus_rule.py: edit that\n"
    "# file, then run `python scripts/gen_prometheus_rule.py`. The Prometheus that should load\n"
    "# these rules must select this object (ruleSelector; kube-prometheus-stack selects by its\n"
    "# `release` label unless ruleSelectorNilUsesHelmValues is false): add the label in an\n"
    "# overlay if yours needs one.\n"
)


class _Dumper(yaml.SafeDumper):
    pass


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def render() -> str:
    rules: dict[str, Any] = yaml.safe_load(RULES.read_text())
    doc = {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {
            "name": "candor",
            "labels": {"app.kubernetes.io/name": "candor", "app.kubernetes.io/component": "rules"},
        },
        "spec": {"groups": rules["groups"]},
    }
    body = yaml.dump(doc, Dumper=_Dumper, sort_keys=False, width=120, allow_unicode=True)
    return HEADER + body


def main(argv: list[str] | None = None) -> int:
    return write_or_check(render, OUT, ROOT, "gen_prometheus_rule.py", argv, __doc__)


if __name__ == "__main__":
    sys.exit(main())
