"""Rendered overlays, built once per session."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.deploy.tools import K8S, kustomize

Docs = list[dict[str, Any]]
VARIANTS = ("dev", "prod", "prod+components")


def _with_components(tmp: Path) -> Path:
    """prod plus every opt-in component (linkerd mesh, shadow threshold config, reader v5)."""

    def rel(p: Path) -> str:
        return os.path.relpath(p, tmp)

    (tmp / "kustomization.yaml").write_text(
        "apiVersion: kustomize.config.k8s.io/v1beta1\n"
        "kind: Kustomization\n"
        "namespace: candor\n"
        f"resources: [{rel(K8S / 'overlays' / 'prod')}]\n"
        f"components: [{rel(K8S / 'components' / 'linkerd')}, "
        f"{rel(K8S / 'components' / 'shadow-policy')}, "
        f"{rel(K8S / 'components' / 'reader-v5')}]\n"
    )
    return tmp


@pytest.fixture(scope="session")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Docs]]:
    out = {
        "dev": kustomize(K8S / "overlays" / "dev"),
        "prod": kustomize(K8S / "overlays" / "prod"),
        "prod+components": kustomize(_with_components(tmp_path_factory.mktemp("components"))),
    }
    yield out
