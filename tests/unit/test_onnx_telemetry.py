"""ONNX Runtime loaded by our code writes no telemetry (its device id and event database)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MODEL = ROOT / "gate_svc" / "models" / "reader-v4.onnx"


def _session_in_a_fresh_process(home: Path, import_line: str) -> None:
    # A bare environment: the library stays silent when it sees a CI runner's variables
    # (GITHUB_ACTIONS, JENKINS_URL, TF_BUILD, … are in its binary) or ORT_RUNNING_UNIT_TESTS, which
    # made the control below fail in CI. It writes under $XDG_CACHE_HOME, else $HOME/.cache.
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "XDG_CACHE_HOME": str(home / ".cache"),
        "PYTHONPATH": str(ROOT),
    }
    code = (
        f"{import_line}; ort.InferenceSession({str(MODEL)!r}, providers=['CPUExecutionProvider'])"
    )
    subprocess.run([sys.executable, "-c", code], env=env, check=True, cwd=ROOT, timeout=120)


def test_our_onnx_runtime_import_writes_no_telemetry(tmp_path: Path) -> None:
    _session_in_a_fresh_process(tmp_path, "from candor.onnx_runtime import ort")
    assert _written(tmp_path) == []


def test_the_library_imported_bare_does_so_this_test_can_fail(tmp_path: Path) -> None:
    _session_in_a_fresh_process(tmp_path, "import onnxruntime as ort")
    assert any("Microsoft" in path for path in _written(tmp_path))


def _written(home: Path) -> list[str]:
    return sorted(str(p.relative_to(home)) for p in home.rglob("*") if p.is_file())
