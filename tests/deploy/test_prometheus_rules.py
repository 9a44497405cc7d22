"""The recording and alerting rules: promtool checks them and runs their unit tests; every alert
fires in a test and stays silent in another; every alert links a runbook section that exists;
the PrometheusRule object is the rule file, regenerated."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import yaml

from tests.deploy.promql import RULES, alerts, rule_exprs, selectors
from tests.deploy.tools import DEPLOY, ROOT, run

RULE_TESTS = sorted((DEPLOY / "prometheus" / "tests").glob("*.yaml"))
RUNBOOK = ROOT / "docs" / "runbook.md"


def test_promtool_check_rules() -> None:
    out = run("promtool", "check", "rules", str(RULES))
    assert "SUCCESS" in out


def test_promtool_rule_unit_tests_pass() -> None:
    assert RULE_TESTS
    out = run("promtool", "test", "rules", *map(str, RULE_TESTS))
    assert "FAILED" not in out


def test_promtool_unit_tests_can_fail(tmp_path: Path) -> None:
    """A wrong expectation fails promtool, so the passing run above means something."""
    tests = yaml.safe_load(RULE_TESTS[0].read_text())
    # The shortest case (token rejections, 70 minutes of series) keeps this fast.
    tests["tests"] = [
        case
        for case in tests["tests"]
        if any(c["alertname"] == "CandorPassTokenRejected" for c in case.get("alert_rule_test", []))
    ]
    for case in tests["tests"]:
        for check in case.get("alert_rule_test", []):
            if check["exp_alerts"]:
                check["exp_alerts"] = []
    # Written outside the repository: rule files are found relative to the test file.
    tests["rule_files"] = [str(RULES)]
    broken = tmp_path / "broken_test.yaml"
    broken.write_text(yaml.safe_dump(tests))
    out = run("promtool", "test", "rules", str(broken), check=False)
    assert "FAILED" in out and "SUCCESS" not in out


def test_every_alert_fires_in_a_unit_test_and_stays_silent_in_another() -> None:
    fired: set[str] = set()
    silent: set[str] = set()
    for path in RULE_TESTS:
        for case in yaml.safe_load(path.read_text())["tests"]:
            for check in case.get("alert_rule_test", []):
                (fired if check["exp_alerts"] else silent).add(check["alertname"])
    names = {a["alert"] for a in alerts()}
    assert names - fired == set(), "alerts never shown to fire"
    assert names - silent == set(), "alerts never shown to stay silent"


def _anchors(markdown: str) -> set[str]:
    """GitHub's heading anchors."""
    out = set()
    for line in markdown.splitlines():
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if m:
            slug = re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-")
            out.add(slug)
    return out


def test_every_alert_is_documented_and_links_an_existing_runbook_section() -> None:
    anchors = _anchors(RUNBOOK.read_text())
    for alert in alerts():
        name = alert["alert"]
        ann, labels = alert["annotations"], alert["labels"]
        assert labels["severity"] in ("critical", "warning"), name
        assert ann["summary"] and ann["description"], name
        path, _, anchor = ann["runbook_url"].partition("#")
        assert (ROOT / path).resolve() == RUNBOOK.resolve(), name
        assert anchor == name.lower(), name
        assert anchor in anchors, f"docs/runbook.md has no section '{name}'"


def test_rule_expressions_parse_and_name_their_metrics() -> None:
    for where, expr in rule_exprs():
        assert selectors(expr), where


def test_prometheusrule_object_is_generated_from_the_rule_file() -> None:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gen_prometheus_rule.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    generated = yaml.safe_load((DEPLOY / "prometheus" / "prometheusrule.yaml").read_text())
    assert generated["spec"]["groups"] == yaml.safe_load(RULES.read_text())["groups"]


def test_recording_rule_names_follow_the_level_metric_operation_convention() -> None:
    for rule in yaml.safe_load(Path(RULES).read_text())["groups"]:
        for r in rule["rules"]:
            if "record" in r:
                assert re.fullmatch(r"candor:[a-z0-9_]+:[a-z0-9_]+", r["record"]), r["record"]
