"""No dashboard panel or rule on a metric that doesn't exist: start the real stack, drive
traffic that touches every labelled counter (answered and refused Ask, Evaluate, Retrieve,
ingest, delete, a refused pass token, a rejected config reload, a shadow config), scrape all
three /metrics and check every selector in deploy/prometheus/rules.yaml and
deploy/grafana/candor.json against what is exported: metric names, label names, and the
label values the expressions match on."""

from __future__ import annotations

import re
from collections.abc import Iterator

import grpc
import pytest

import retrieval_svc.service as retrieval_service
from tests.deploy.promql import Selector, dashboard_exprs, recorded, rule_exprs, selectors
from tests.deploy.tools import ROOT
from tests.deploy.traffic import Family, drive, families, running_stack, scrape_all

pytestmark = pytest.mark.e2e

# Added by Prometheus (the scrape itself, the target, or the ServiceMonitor's relabelling).
PROMETHEUS_SERIES = {"up"}
TARGET_LABELS = {"namespace", "pod", "job", "instance", "service", "container", "endpoint"}
# Label values the offline stack cannot produce (failures), taken from the code that emits them.
POSSIBLE_VALUES: dict[tuple[str, str], set[str]] = {
    # candor/runtime/metrics.py labels grpc_code with grpc.StatusCode names.
    ("grpc_server_handled_total", "grpc_code"): {c.name for c in grpc.StatusCode},
    # gate_svc/service.py labels its downstream calls with grpc.StatusCode names too.
    ("candor_gate_downstream_calls_total", "grpc_code"): {c.name for c in grpc.StatusCode},
    ("candor_retrieval_arm_outcomes_total", "state"): set(retrieval_service._STATES),
    # generator_svc/service.py: verifications.labels("passed" if passed else "failed")
    ("candor_generator_verifications_total", "result"): {"passed", "failed"},
    # gate_svc/service.py: a shadow config that cannot decide is counted agreement="error".
    ("candor_gate_shadow_decisions_total", "agreement"): {"agree", "disagree", "error"},
}
VERIFICATION_LABELS = ("generator_svc/service.py", '"passed" if passed else "failed"')
SHADOW_ERROR_LABEL = ("gate_svc/service.py", 'self._m.shadow.labels("error"')


@pytest.fixture(scope="module")
def exported() -> Iterator[dict[str, Family]]:
    with running_stack() as (stack, policy):
        drive(stack, policy)
        yield families(scrape_all(stack))


def _used() -> list[tuple[str, Selector]]:
    return [
        (where, sel) for where, expr in rule_exprs() + dashboard_exprs() for sel in selectors(expr)
    ]


def test_traffic_exercised_every_labelled_family(exported: dict[str, Family]) -> None:
    for name in (
        "candor_gate_decisions_total",
        "candor_gate_shadow_decisions_total",
        "candor_gate_config_reloads_total",
        "candor_generator_token_rejections_total",
        "candor_generator_verifications_total",
        "candor_generator_llm_calls_total",
        "candor_retrieval_arm_outcomes_total",
        "grpc_server_handling_seconds_bucket",
    ):
        assert name in exported, name
    assert {"refuse", "pass"} <= exported["candor_gate_decisions_total"].values["outcome"]
    assert "failure" in exported["candor_gate_config_reloads_total"].values["result"]


def test_every_metric_the_rules_and_dashboard_read_is_exported(
    exported: dict[str, Family],
) -> None:
    rules = recorded()
    missing = sorted(
        {
            f"{sel.name} ({where})"
            for where, sel in _used()
            if sel.name not in rules
            and sel.name not in PROMETHEUS_SERIES
            and sel.name not in exported
        }
    )
    assert not missing, "not exported by any service:\n" + "\n".join(missing)


def test_every_label_the_rules_and_dashboard_match_on_exists(exported: dict[str, Family]) -> None:
    wrong = []
    for where, sel in _used():
        family = exported.get(sel.name)
        if family is None:
            continue  # a recording rule or a Prometheus series
        for label, op, value in sel.matchers:
            if label in TARGET_LABELS:
                continue
            if label not in family.labels:
                wrong.append(f"{where}: {sel.name} has no label {label!r}")
                continue
            possible = family.values[label] | POSSIBLE_VALUES.get((sel.name, label), set())
            if op in ("=", "!="):
                wanted = [value]
            elif re.fullmatch(r"[\w|]+", value):  # an alternation of literal values
                wanted = value.split("|")
            else:
                pattern = re.compile(value)
                if not any(pattern.fullmatch(v) for v in family.values[label]):
                    wrong.append(f"{where}: {sel.name}{{{label}=~{value!r}}} matches nothing seen")
                continue
            for v in wanted:
                if v not in possible:
                    wrong.append(
                        f"{where}: {sel.name}{{{label}={v!r}}} is never exported; "
                        f"seen {sorted(family.values[label])}"
                    )
    assert not wrong, "\n".join(wrong)


def test_the_failure_label_values_assumed_above_are_still_in_the_code() -> None:
    for path, snippet in (VERIFICATION_LABELS, SHADOW_ERROR_LABEL):
        assert snippet in (ROOT / path).read_text(), (path, snippet)
