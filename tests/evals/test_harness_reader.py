"""`candor eval run` reads with the reader settings name, and refuses a config fitted on another."""

from __future__ import annotations

from pathlib import Path

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


def test_eval_run_scores_with_the_reader_it_is_given(tmp_path: Path) -> None:
    from evals import calibrate, harness
    from evals.datasets.halueval import BuildOptions, prepare
    from tests.evals.halueval_fixture import write_fixture

    dataset = prepare(
        tmp_path / "dataset", BuildOptions(seed=0), source=write_fixture(tmp_path).directory
    )
    default = DEFAULT_POLICY_PATH
    # v4's default config beside v5's reading: refused before anything is indexed or written.
    with pytest.raises(SystemExit, match="this run reads with evidence reader"):
        harness.run(dataset, tmp_path / "bad.jsonl", [default], progress=False, reader="v5")
    assert not (tmp_path / "bad.jsonl").exists()
    out = harness.run(dataset, tmp_path / "v5.jsonl", progress=False, answers=False, reader="v5")
    rows = calibrate.read_rows(out)
    assert {r["reader_model"] for r in rows if "reader" in r["signals"]} == {
        model_digest(reader_file("v5"))
    }
    with pytest.raises(SystemExit, match="2"):
        harness.main(
            [
                str(dataset),
                "--out",
                str(tmp_path / "x.jsonl"),
                "--reader",
                "v5",
                "--target",
                "127.0.0.1:1",
            ]
        )
