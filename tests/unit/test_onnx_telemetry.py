"""ONNX Runtime loaded by our code writes no telemetry (its device id and event database)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MODEL = ROOT / "gate_svc" / "models" / "reader-v4.onnx"


def _session_in_a_fresh_process(home: Path, import_line: str) -> None:
    env = {k: v for k, v in os.environ.items() if k != "ORT_DISABLE_TELEMETRY"}
    env |= {"HOME": str(home), "PYTHONPATH": str(ROOT)}
    code = (
        f"{import_line}; ort.InferenceSession({str(MODEL)!r}, providers=['CPUExecutionProvider'])"
    )
    subprocess.run([sys.executable, "-c", code], env=env, check=True, cwd=ROOT, timeout=120)


def test_our_onnx_runtime_import_writes_no_telemetry(tmp_path: Path) -> None:
    _session_in_a_fresh_process(tmp_path, "from candor.onnx_runtime import ort")
    assert not (tmp_path / ".cache" / "Microsoft").exists()


def test_the_library_imported_bare_does_so_this_test_can_fail(tmp_path: Path) -> None:
    _session_in_a_fresh_process(tmp_path, "import onnxruntime as ort")
    assert (tmp_path / ".cache" / "Microsoft").exists()
