"""One process at a time on the embedded data directory, and a clear message for the second."""

from __future__ import annotations

import gc
import os
from pathlib import Path

import pytest

from candor.cli.main import main
from candor.cli.stack import start_stack
from candor.runtime import server
from candor.runtime.server import RunningService
from candor.settings import load_settings
from retrieval_svc.stores.data_dir import DataDirInUse, DataDirLock
from tests.helpers import Stack, stack_env


def test_a_second_opener_is_told_who_holds_the_data_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "data"
    stack = Stack(lambda: start_stack(load_settings(env=stack_env(str(data)))))
    try:
        with pytest.raises(DataDirInUse, match=rf"{data} is in use .*pid {os.getpid()}"):
            Stack(lambda: start_stack(load_settings(env=stack_env(str(data)))))
        monkeypatch.setenv("CANDOR_DATA_DIR", str(data))
        assert main(["verify"]) == 2
        assert "in use by another candor process" in capsys.readouterr().err
    finally:
        stack.stop()
    # Released on stop: the stores open again, here for verify.
    assert main(["verify"]) == 0
    assert "0 document(s) drifted" in capsys.readouterr().out


def test_a_start_after_a_run_that_did_not_stop_cleanly_suggests_verify(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    lock = DataDirLock(tmp_path)
    assert lock.unclean_pid == ""
    lock.release()
    assert DataDirLock(tmp_path).unclean_pid == ""  # released cleanly: nothing to say
    # The lock above was never released: as if its process had been killed.
    for name, value in stack_env(str(tmp_path)).items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(server, "serve_until_signal", _stop_at_once)
    gc.collect()  # its file closes, as a dead process's would
    assert main(["serve", "--service", "retrieval"]) == 0
    err = capsys.readouterr().err
    assert f"(pid {os.getpid()}) did not shut down cleanly" in err and "candor verify" in err
    # A clean stop of that restart does not clear the mark: nothing checked the stores yet.
    for name, value in stack_env(str(tmp_path)).items():  # the metrics port stays bound
        monkeypatch.setenv(name, value)
    assert main(["serve", "--service", "retrieval"]) == 0
    assert "did not shut down cleanly" in capsys.readouterr().err
    # A verify that finds the stores in step clears it.
    assert main(["verify"]) == 0
    for name, value in stack_env(str(tmp_path)).items():
        monkeypatch.setenv(name, value)
    assert main(["serve", "--service", "retrieval"]) == 0
    assert "did not shut down cleanly" not in capsys.readouterr().err


async def _stop_at_once(services: list[RunningService]) -> None:
    for svc in services:
        await svc.stop(0)
