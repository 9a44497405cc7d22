"""`candor serve` stops on what it cannot open with one JSON log line naming it (exit 2)."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from candor.cli.main import main
from candor.runtime import server
from candor.runtime.server import RunningService
from retrieval_svc.stores import data_dir
from retrieval_svc.stores.data_dir import MIB
from retrieval_svc.stores.edge import EdgeDenseStore
from retrieval_svc.stores.tantivy_store import TENANTS_DIR, TantivyKeywordStore, tenant_dir_name
from tests.helpers import free_ports, stack_env
from tests.stores.conftest import chunk


async def _stop_at_once(services: list[RunningService]) -> None:
    """A serve that started anyway stops at once (and fails the test) instead of serving."""
    for svc in services:
        await svc.stop(0)


def _taken_port() -> tuple[socket.socket, int]:
    """A port another socket listens on (close the socket when done)."""
    port = free_ports(1)[0]
    holder = socket.socket()
    holder.bind(("127.0.0.1", port))
    holder.listen()
    return holder, port


def _one_line(err: str) -> dict[str, object]:
    """The only line on stderr: a JSON log line, no traceback."""
    (line,) = err.strip().splitlines()
    return dict(json.loads(line))


def test_an_unloadable_signing_key_stops_start_up_naming_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    key = tmp_path / "keys" / "candor-1.pem"
    key.parent.mkdir()
    key.write_bytes(b"")  # what a full disk left behind before keys were written atomically
    monkeypatch.setenv("CANDOR_DATA_DIR", str(tmp_path))
    assert main(["serve", "--service", "gate"]) == 2
    line = _one_line(capsys.readouterr().err)
    assert (line["level"], line["msg"]) == ("ERROR", "cannot start")
    assert str(line["error"]).startswith(f"cannot load the signing key {key}: ")
    assert key.read_bytes() == b""


def test_too_little_free_disk_stops_start_up_before_the_stores_open(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # On a nearly full disk Qdrant Edge dies by SIGBUS creating its files: refuse first.
    monkeypatch.setattr(data_dir, "free_bytes", lambda path: 8 * MIB)
    for name, value in stack_env(str(tmp_path)).items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(server, "serve_until_signal", _stop_at_once)
    assert main(["serve", "--service", "retrieval"]) == 2
    line = _one_line(capsys.readouterr().err)
    assert (line["level"], line["msg"]) == ("ERROR", "cannot start")
    assert line["error"] == (
        f"not enough free disk for the embedded stores in {tmp_path / 'dense'}: "
        f"{8 * MIB} bytes free, {256 * MIB} needed (retrieval.min_free_disk_mb 256 MiB); "
        "free space on that filesystem (or move data_dir) and retry"
    )
    assert not (tmp_path / "dense").exists()


def test_a_data_dir_that_cannot_be_opened_is_one_line_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name, value in stack_env(str(tmp_path)).items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(server, "serve_until_signal", _stop_at_once)
    EdgeDenseStore(tmp_path / "dense", 384).close()
    keyword = TantivyKeywordStore(tmp_path / "keyword")
    keyword.replace("acme", "doc", [chunk("acme", "doc", 0)])
    keyword.close()
    meta = tmp_path / "keyword" / TENANTS_DIR / tenant_dir_name("acme") / "meta.json"
    good = meta.read_bytes()
    meta.write_text("{not json")  # a damaged tantivy index: one tenant's stops start-up
    assert main(["verify"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"candor: cannot open the data dir {tmp_path}: ValueError: ")
    assert "meta.json" in err and len(err.strip().splitlines()) == 1
    assert main(["serve", "--service", "retrieval"]) == 2
    line = _one_line(capsys.readouterr().err)
    assert line["msg"] == "cannot start"
    assert str(line["error"]).startswith(f"cannot open the data dir {tmp_path}: ValueError: ")
    # The lock was released each time: the next opener is not told the dir is in use.
    meta.write_bytes(good)
    keyword = TantivyKeywordStore(tmp_path / "keyword")
    assert keyword.delete("acme", "doc") == 1  # opens again; and the stores agree for verify
    keyword.close()
    assert main(["verify"]) == 0


def test_a_lock_file_that_cannot_be_created_is_one_line_naming_the_data_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # What a read-only data dir does to the lock file, without needing one.
    (tmp_path / ".candor.lock").mkdir()
    for name, value in stack_env(str(tmp_path)).items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(server, "serve_until_signal", _stop_at_once)
    why = (
        f"cannot open the data dir {tmp_path}: IsADirectoryError: "
        f"[Errno 21] Is a directory: '{tmp_path / '.candor.lock'}'"
    )
    assert main(["serve", "--service", "retrieval"]) == 2
    line = _one_line(capsys.readouterr().err)
    assert (line["msg"], line["error"]) == ("cannot start", why)
    assert main(["verify"]) == 2
    assert capsys.readouterr().err == f"candor: {why}\n"


@pytest.mark.parametrize("cause", ["grpc_port", "metrics_port", "tracing", "key_file"])
def test_a_start_that_fails_after_the_stores_opened_is_one_line_and_a_clean_stop(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    cause: str,
) -> None:
    # Each was a Python traceback (exit 1), and the lock file kept the pid, so the next start
    # warned that the previous run had not shut down cleanly.
    env = stack_env(str(tmp_path))
    holder = socket.socket()
    if cause in ("grpc_port", "metrics_port"):
        holder, port = _taken_port()
        key = "PORT" if cause == "grpc_port" else "METRICS_PORT"
        env[f"CANDOR_RETRIEVAL__SERVER__{key}"] = str(port)
    elif cause == "tracing":
        from candor.runtime import tracing

        env["OTEL_TRACES_EXPORTER"] = "zipkin"
        monkeypatch.setattr(tracing, "_configured", False)  # as in a process of its own
    else:
        env.update(
            {
                "CANDOR_RETRIEVAL__REWRITE__BACKEND": "openai_compat",
                "CANDOR_RETRIEVAL__REWRITE__BASE_URL": "http://127.0.0.1:9/v1",
                "CANDOR_RETRIEVAL__REWRITE__MODEL": "m",
                "CANDOR_RETRIEVAL__REWRITE__API_KEY_FILE": str(tmp_path / "missing-key"),
            }
        )
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(server, "serve_until_signal", _stop_at_once)
    try:
        assert main(["serve", "--service", "retrieval"]) == 2
    finally:
        holder.close()
    lines = [json.loads(text) for text in capsys.readouterr().err.strip().splitlines()]
    errors = [line for line in lines if line["level"] == "ERROR"]
    # Each error's last traceback line, should one come back: once (2026-12-06, in CI) grpc's
    # poller logged "Exception in callback" four times here, of a type that run did not
    # record; most likely events for an earlier test's closed loop (candor.runtime.event_loop).
    why = [(line["msg"][:60], str(line.get("exc", "")).splitlines()[-1:]) for line in errors]
    assert [line["msg"] for line in errors] == ["cannot start"], why
    assert (tmp_path / ".candor.lock").read_text() == "", "the lock file says an unclean stop"


@pytest.mark.parametrize("cause", ["grpc_port", "generator_port", "low_disk", "verify"])
def test_a_failed_start_or_verify_keeps_the_mark_of_an_unclean_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cause: str
) -> None:
    # After a crash (SIGBUS on a full disk), a restart that failed again erased the pid, and
    # the start after the disk was freed no longer said to run candor verify.
    env = stack_env(str(tmp_path))
    holder = socket.socket()
    if cause in ("grpc_port", "generator_port"):
        # The generator's: retrieval, started first in the one process, is stopped again.
        holder, port = _taken_port()
        service = "RETRIEVAL" if cause == "grpc_port" else "GENERATOR"
        env[f"CANDOR_{service}__SERVER__PORT"] = str(port)
    else:
        monkeypatch.setattr(data_dir, "free_bytes", lambda path: 8 * MIB)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(server, "serve_until_signal", _stop_at_once)
    if cause == "verify":
        EdgeDenseStore(tmp_path / "dense", 384).close()
        TantivyKeywordStore(tmp_path / "keyword").close()
    (tmp_path / ".candor.lock").write_text("4242\n")
    try:
        args = {"verify": ["verify"], "generator_port": ["serve"]}.get(
            cause, ["serve", "--service", "retrieval"]
        )
        assert main(args) == 2
    finally:
        holder.close()
    assert (tmp_path / ".candor.lock").read_text() == "4242\n"


def test_a_signing_key_that_cannot_be_written_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # A full disk while the gate creates its key pair was a traceback (exit 1).
    import errno

    from candor import token

    def full_disk(*args: object, **kwargs: object) -> None:
        raise OSError(errno.EFBIG, "File too large")

    monkeypatch.setattr(token, "write_atomically", full_disk)
    monkeypatch.setenv("CANDOR_DATA_DIR", str(tmp_path))
    assert main(["serve", "--service", "gate"]) == 2
    line = _one_line(capsys.readouterr().err)
    assert (line["level"], line["msg"]) == ("ERROR", "cannot start")
    assert str(line["error"]).startswith(f"cannot create the signing key {tmp_path / 'keys'}/"), (
        line
    )


def test_a_configured_signing_key_that_does_not_exist_stops_start_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # A typo in the path used to create a new key no generator knows: every answer failed.
    missing = tmp_path / "secrets" / "signing-kye.pem"
    monkeypatch.setenv("CANDOR_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("CANDOR_GATE__SIGNING_KEY_PATH", str(missing))
    assert main(["serve", "--service", "gate"]) == 2
    line = _one_line(capsys.readouterr().err)
    assert str(line["error"]).startswith(f"the signing key {missing} (gate.signing_key_path)")
    assert not missing.exists()


@pytest.mark.parametrize("waits", ["blocking", "awaiting"])
def test_sigterm_during_start_up_stops_it_cleanly(tmp_path: Path, waits: str) -> None:
    # As PID 1 a process ignores SIGTERM until it has a handler: a pod deleted mid-start-up
    # waited out its whole grace period for the SIGKILL.
    import os
    import signal
    import subprocess
    import sys
    import time

    root = Path(__file__).resolve().parents[2]
    # A step that blocks the event loop (building an index), or one that awaits in it.
    blocking = (
        "def slow(settings):\n"
        "    print('building', file=sys.stderr, flush=True)\n"
        "    time.sleep(60)\n"
        "stack.build_retrieval = slow\n"
    )
    awaiting = (
        "async def slow(settings, which='all'):\n"
        "    print('building', file=sys.stderr, flush=True)\n"
        "    await asyncio.sleep(60)\n"
        "stack.start_stack = slow\n"
    )
    slow_start = (
        "import asyncio, sys, time\n"
        "import candor.cli.stack as stack\n"
        "from candor.cli.main import main\n"
        + (blocking if waits == "blocking" else awaiting)
        + "sys.exit(main(['serve', '--service', 'retrieval']))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(root), **stack_env(str(tmp_path))}
    proc = subprocess.Popen(
        [sys.executable, "-c", slow_start], cwd=root, env=env, stderr=subprocess.PIPE, text=True
    )
    try:
        assert proc.stderr is not None
        while "building" not in proc.stderr.readline():
            assert proc.poll() is None, "start-up ended before the slow step"
        started = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(15) == 128 + signal.SIGTERM
        assert time.monotonic() - started < 10
        assert '"msg": "stopped by SIGTERM during start-up"' in proc.stderr.read()
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.parametrize("auth", [False, True])
def test_a_demo_that_cannot_run_is_refused_before_anything_starts(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    auth: bool,
) -> None:
    # It crashed after start-up (KeyError: 'GateService'; UNAUTHENTICATED) and left the data
    # dir marked unclean.
    monkeypatch.setenv("CANDOR_DATA_DIR", str(tmp_path))
    config = tmp_path / "auth.yaml"
    config.write_text(
        "auth:\n  enabled: true\n  keys:\n    - {name: k, sha256: '" + "0" * 64 + "', "
        "tenants: [acme]}\n"
    )
    argv = ["serve", "--demo", "--config", str(config)] if auth else ["serve", "--demo"]
    assert main([*argv, "--service", "retrieval"] if not auth else argv) == 2
    line = _one_line(capsys.readouterr().err)
    assert "--demo runs all three services with auth off" in str(line["msg"])
    assert not (tmp_path / "dense").exists()


def test_a_clean_stop_keeps_the_mark_of_an_earlier_unclean_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # After a kill -9, one restart warned; its clean stop then erased the mark, and the next
    # start said nothing, though verify still found the drift.
    for name, value in stack_env(str(tmp_path)).items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(server, "serve_until_signal", _stop_at_once)
    (tmp_path / ".candor.lock").write_text("4242\n")
    assert main(["serve", "--service", "retrieval"]) == 0
    assert (tmp_path / ".candor.lock").read_text() == "4242\n"
