"""One process at a time on the embedded data directory, and a clear message for the second."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from candor.cli.main import main
from candor.cli.stack import start_stack
from candor.settings import load_settings
from retrieval_svc.stores.data_dir import DataDirInUse
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
