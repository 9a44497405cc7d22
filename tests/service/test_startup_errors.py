"""`candor serve` stops on what it cannot open with one JSON log line naming it (exit 2)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from candor.cli.main import main


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
