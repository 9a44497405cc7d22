"""`candor serve` stops on what it cannot open with one JSON log line naming it (exit 2)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from candor.cli.main import main
from candor.runtime import server
from candor.runtime.server import RunningService
from retrieval_svc.stores import data_dir
from retrieval_svc.stores.data_dir import MIB


async def _stop_at_once(services: list[RunningService]) -> None:
    """A serve that started anyway stops at once (and fails the test) instead of serving."""
    for svc in services:
        await svc.stop(0)


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
    monkeypatch.setenv("CANDOR_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("CANDOR_RETRIEVAL__SERVER__PORT", "0")
    monkeypatch.setattr(server, "serve_until_signal", _stop_at_once)
    assert main(["serve", "--service", "retrieval"]) == 2
    line = _one_line(capsys.readouterr().err)
    assert (line["level"], line["msg"]) == ("ERROR", "cannot start")
    assert line["error"] == (
        f"not enough free disk for the embedded stores in {tmp_path / 'dense'}: "
        f"{8 * MIB} bytes free, {256 * MIB} needed (retrieval.min_free_disk_mb 256 MiB); "
        "free space on that filesystem (or move retrieval.data_dir) and retry"
    )
    assert not (tmp_path / "dense").exists()
