"""`candor eval run` reads with the reader settings name, and refuses a config fitted on another."""

from __future__ import annotations

import pytest

from candor.settings import Settings, load_settings
from evals.harness import _reader
from gate_svc.policy import DEFAULT_POLICY_PATH, parse_policy
from gate_svc.reader import model_digest, reader_file


def _settings(**env: str) -> Settings:
    return load_settings(env=env)


def test_the_run_reads_with_the_named_bundled_reader() -> None:
    default = parse_policy(DEFAULT_POLICY_PATH.read_text())
    model, top_k = _reader(_settings(), {"default": default}) or (None, 0)
    assert model is not None and model.digest == default.calibrated.reader_model
    assert top_k == 1
    v5 = _reader(_settings(CANDOR_GATE__READER__MODEL="v5"), {})
    assert v5 is not None and v5[0].digest == model_digest(reader_file("v5"))
    assert _reader(_settings(CANDOR_GATE__READER__ENABLED="false"), {"d": default}) is None


def test_a_config_fitted_on_another_reader_stops_the_run_before_indexing() -> None:
    default = parse_policy(DEFAULT_POLICY_PATH.read_text())
    with pytest.raises(SystemExit, match="this run reads with evidence reader"):
        _reader(_settings(CANDOR_GATE__READER__MODEL="v5"), {"default": default})
    with pytest.raises(SystemExit, match="bundled readers v4, v5, got 'v3'"):
        _reader(_settings(CANDOR_GATE__READER__MODEL="v3"), {})
