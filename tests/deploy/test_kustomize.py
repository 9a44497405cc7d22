"""Every overlay builds with kustomize; built-in objects pass kubernetes-validate --strict;
prometheus-operator objects pass their (vendored) schemas."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
import yaml

from tests.deploy.conftest import VARIANTS, Docs
from tests.deploy.tools import DEPLOY, K8S, kustomize, run

# Oldest and newest Kubernetes the manifests are validated against (docs/operations.md).
KUBERNETES_VERSIONS = ("1.30.0", "1.37.0")
CRD_SCHEMAS = {
    "ServiceMonitor": DEPLOY / "schemas" / "servicemonitor_v1.json",
    "PrometheusRule": DEPLOY / "schemas" / "prometheusrule_v1.json",
}


def _builtin(docs: Docs) -> Docs:
    return [d for d in docs if not d["apiVersion"].startswith("monitoring.coreos.com/")]


@pytest.mark.parametrize("variant", VARIANTS)
def test_every_overlay_builds_the_whole_stack(rendered: dict[str, Docs], variant: str) -> None:
    kinds = Counter(d["kind"] for d in rendered[variant])
    # Each service, and retrieval's one writer (no autoscaler, no disruption budget: one pod).
    for kind in ("Deployment", "ServiceMonitor"):
        assert kinds[kind] == 4, (kind, kinds)
    for kind in ("HorizontalPodAutoscaler", "PodDisruptionBudget"):
        assert kinds[kind] == 3, (kind, kinds)
    assert kinds["PrometheusRule"] == 1
    assert kinds["NetworkPolicy"] >= 3
    assert kinds["StatefulSet"] == (2 if variant == "dev" else 0)
    names = [(d["kind"], d["metadata"]["name"]) for d in rendered[variant]]
    assert len(names) == len(set(names)), "duplicate objects"
    namespace = "candor-dev" if variant == "dev" else "candor"
    assert {d["metadata"].get("namespace") for d in rendered[variant]} == {namespace}


def test_base_builds_on_its_own() -> None:
    assert kustomize(K8S / "base")


def test_builtin_objects_pass_kubernetes_validate_strict(
    rendered: dict[str, Docs], tmp_path: Path
) -> None:
    files = []
    for variant in VARIANTS:
        f = tmp_path / f"{variant}.yaml"
        f.write_text(yaml.safe_dump_all(_builtin(rendered[variant])))
        files.append(str(f))
    for version in KUBERNETES_VERSIONS:
        out = run("kubernetes-validate", "--strict", "--quiet", "-k", version, *files)
        assert "ERROR" not in out and "did not validate" not in out, out


def test_kubernetes_validate_strict_rejects_an_unknown_field(tmp_path: Path) -> None:
    """The check above is not vacuous: a misspelt field fails it."""
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "apiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata: {name: x}\n"
        "spec: {maxUnavailabel: 1, selector: {matchLabels: {a: b}}}\n"
    )
    out = run("kubernetes-validate", "--strict", str(bad), check=False)
    assert "maxUnavailabel" in out


def test_crd_objects_pass_their_schemas(rendered: dict[str, Docs], tmp_path: Path) -> None:
    run("check-jsonschema", "--check-metaschema", *map(str, CRD_SCHEMAS.values()))
    for kind, schema in CRD_SCHEMAS.items():
        files = []
        for variant in VARIANTS:
            for i, doc in enumerate(d for d in rendered[variant] if d["kind"] == kind):
                f = tmp_path / f"{variant}-{kind}-{i}.json"
                f.write_text(json.dumps(doc))
                files.append(str(f))
        assert files, kind
        run("check-jsonschema", "--schemafile", str(schema), *files)


def test_crd_schemas_reject_a_misspelt_field(rendered: dict[str, Docs], tmp_path: Path) -> None:
    monitor = next(d for d in rendered["prod"] if d["kind"] == "ServiceMonitor")
    monitor["spec"]["endpoints"][0]["intervall"] = "30s"
    f = tmp_path / "bad.json"
    f.write_text(json.dumps(monitor))
    out = run(
        "check-jsonschema",
        "--schemafile",
        str(CRD_SCHEMAS["ServiceMonitor"]),
        str(f),
        check=False,
    )
    assert "intervall" in out
