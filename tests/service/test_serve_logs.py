"""`candor serve` writes nothing but JSON lines to its log stream (stderr), so the runbook's
`kubectl logs ... | jq` reads every line: at start-up, at shutdown and when it cannot start."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
from pathlib import Path

from tests.helpers import scrape, stack_env

ROOT = Path(__file__).resolve().parents[2]


def _serve(env: dict[str, str], *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "candor.cli.main", "serve", *args],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _json_lines(stderr: str) -> list[dict[str, object]]:
    lines = stderr.splitlines()
    assert lines
    for line in lines:
        assert line.startswith("{"), f"not a JSON log line: {line!r}"
    return [json.loads(line) for line in lines]


def test_a_served_service_logs_only_json(tmp_path: Path) -> None:
    env = stack_env(str(tmp_path / "data"))
    proc = _serve(env, "--service", "retrieval")
    try:
        deadline = time.monotonic() + 60
        while True:  # up once its metrics answer
            try:
                scrape(int(env["CANDOR_RETRIEVAL__SERVER__METRICS_PORT"]))
                break
            except (urllib.error.URLError, ConnectionError):
                assert proc.poll() is None, proc.communicate()[1]
                assert time.monotonic() < deadline, "retrieval did not start"
                time.sleep(0.1)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    messages = [line["msg"] for line in _json_lines(err)]
    assert "service started" in messages
    assert "shutdown complete" in messages


def test_invalid_settings_are_a_json_log_line(tmp_path: Path) -> None:
    config = tmp_path / "candor.yaml"
    config.write_text("retrieval: {chunk_tokens: -1}\n")
    proc = _serve({"CANDOR_CONFIG": str(config)})
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 2
    (line,) = _json_lines(err)
    assert line["level"] == "ERROR" and line["msg"] == "invalid settings"
    assert "chunk_tokens" in str(line["error"])


def test_a_generator_started_before_the_gate_made_its_key_says_so_in_one_json_line(
    tmp_path: Path,
) -> None:
    proc = _serve(stack_env(str(tmp_path / "data")), "--service", "generator")
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 2
    (line,) = _json_lines(err)
    assert line["level"] == "ERROR" and line["msg"] == "cannot start"
    assert "no pass-token public keys" in str(line["error"])
    assert "start the gate first" in str(line["error"])


def test_the_demo_answers_refuses_and_points_the_hint_at_its_own_gate(tmp_path: Path) -> None:
    # `make run`: what the README shows first. Ports moved off the defaults (as here, or for a
    # second stack) must still leave a hint that reaches this stack's gate.
    proc = _serve(stack_env(str(tmp_path / "data")), "--demo")
    out: list[str] = []
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + 120
        for line in proc.stdout:
            out.append(line)
            if "Ctrl-C to stop." in line or time.monotonic() > deadline:
                break
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    text = "".join(out)
    assert "> How long do I have to get a refund for a label I didn't use?" in text
    assert "05-refunds-for-unused-labels" in text and "verified" in text
    assert "[REFUSE: LOW_CONFIDENCE]" in text
    hint = next(line for line in out if "candor ask" in line)
    assert "--target 127.0.0.1:" in hint and "--target 127.0.0.1:50052" not in hint
