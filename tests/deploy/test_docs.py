"""docs/operations.md and docs/runbook.md cover what the issue asks and point at real files."""

from __future__ import annotations

import re

from tests.deploy.promql import alerts
from tests.deploy.tools import ROOT

OPERATIONS = (ROOT / "docs" / "operations.md").read_text()
RUNBOOK = (ROOT / "docs" / "runbook.md").read_text()
README = (ROOT / "deploy" / "README.md").read_text()


def _headings(text: str) -> list[str]:
    return [m.group(1) for m in re.finditer(r"(?m)^#{2,3} (.+)$", text)]


def test_operations_covers_deploy_rollout_rotation_and_scaling() -> None:
    headings = _headings(OPERATIONS)
    for needed in (
        "Deploy",
        "Roll a new threshold version (shadow first, then promote)",
        "Rotate the signing key",
        "Scale",
        "Load balancing",
        "Monitoring",
    ):
        assert needed in headings, needed


def test_runbook_has_one_section_per_alert() -> None:
    assert sorted(_headings(RUNBOOK)) == sorted({a["alert"] for a in alerts()})


def test_every_repository_path_the_docs_mention_exists() -> None:
    for name, text in (("operations.md", OPERATIONS), ("runbook.md", RUNBOOK), ("README", README)):
        for path in re.findall(r"`((?:deploy|scripts|docs|tests)/[\w./+-]+)`", text):
            assert (ROOT / path.rstrip("/")).exists(), f"{name}: {path}"


def test_the_readme_lists_every_metric_the_services_export() -> None:
    from candor.runtime.metrics import ServiceMetrics
    from gate_svc.service import GateMetrics
    from generator_svc.service import GeneratorMetrics
    from retrieval_svc.service import RetrievalMetrics

    readme = (ROOT / "README.md").read_text()
    for metrics_of in (GateMetrics, RetrievalMetrics, GeneratorMetrics):
        service = ServiceMetrics()
        metrics_of(service)
        for family in service.registry.collect():
            name = family.name + ("_total" if family.type == "counter" else "")
            assert f"`{name}" in readme, f"README.md does not list {name}"
