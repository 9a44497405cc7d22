"""`candor calibrate --read-floor-cost`: the read floor, hand-computed and through the gate."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from evals import calibrate
from evals.harness import rescore
from gate_svc.policy import parse_policy
from tests.evals.test_calibrate_sources import _rows, _write


def test_read_floor_keeps_the_lost_passes_within_the_cost() -> None:
    # Four answerable rows passed (certain 0.6-0.9), one answerable refused, one negative.
    p = np.array([0.6, 0.7, 0.8, 0.9, 0.2, 0.55])
    certain = np.array([0.6, 0.7, 0.8, 0.9, 0.4, 0.65])
    labels = np.array([1, 1, 1, 1, 1, 0])
    floor = calibrate.read_floor
    assert floor(p, certain, labels, 0.5, 0.0) == 0.0
    # Strictly below the floor is refused: at the lowest passed value nothing is lost.
    assert floor(p, certain, labels, 0.5, 0.1) == 0.6
    assert floor(p, certain, labels, 0.5, 0.2) == 0.7  # 1 of 5 answerable may go
    assert floor(p, certain, labels, 0.5, 0.39) == 0.7
    assert floor(p, certain, labels, 0.5, 0.4) == 0.8  # 2 of 5
    assert floor(p, certain, labels, 0.5, 0.8) == 0.0  # every pass lost: no floor
    # By weight: the first row alone carries half the answerable weight.
    w = np.array([5.0, 1.0, 1.0, 1.0, 2.0, 1.0])
    assert floor(p, certain, labels, 0.5, 0.4, w) == 0.6
    assert floor(p, certain, labels, 0.5, 0.5, w) == 0.7
    # A floor at or under the pass bound adds nothing.
    assert floor(p, certain, labels, 0.6, 0.1) == 0.0


def test_calibrate_writes_a_read_floor_the_gate_applies_within_its_cost(tmp_path: Path) -> None:
    rows = _rows(600, 3, 1.0)
    for r in rows:
        odds = calibrate.READER_FEATURE
        r["signals"][odds] = float(np.clip(r["signals"][odds] / 4 + 0.5, 0.0, 1.0))
        r |= {"ranked": {"hybrid": [f"doc-{r['id']}"]}, "policies": {}}
    path = _write(tmp_path / "rows.jsonl", rows)
    plain, floored = tmp_path / "plain.yaml", tmp_path / "floored.yaml"
    base = [str(path), "--target-far", "0.2", "--confident-far", "0.02"]
    assert calibrate.main([*base, "--out", str(plain)]) == 0
    assert calibrate.main([*base, "--out", str(floored), "--read-floor-cost", "0.02"]) == 0
    without, config = parse_policy(plain.read_text()), parse_policy(floored.read_text())
    assert without.calibrated.read_floor == 0.0
    assert config.calibrated.read_floor > config.tiers.uncertain
    assert "read_floor_cost=0.02" in config.calibrated.fitted_on
    assert config.calibrated.coefficients == without.calibrated.coefficients
    rescore(rows, without, "plain")
    rescore(rows, config, "floored")
    answerable = [r for r in rows if r["answerable"]]
    passed = {r["id"] for r in answerable if r["policies"]["plain"]["outcome"] == "pass"}
    kept = {r["id"] for r in answerable if r["policies"]["floored"]["outcome"] == "pass"}
    assert kept < passed  # the floor refuses some, and passes nothing new
    assert len(passed - kept) <= 0.02 * len(answerable)
    lost = [r for r in answerable if r["id"] in passed - kept]
    assert all(r["policies"]["floored"]["reason"] == "low_confidence" for r in lost)


def test_read_floor_cost_must_be_a_share(tmp_path: Path) -> None:
    path = _write(tmp_path / "rows.jsonl", _rows(40, 1, 1.0))
    with pytest.raises(SystemExit):
        calibrate.main([str(path), "--out", str(tmp_path / "x.yaml"), "--read-floor-cost", "1.5"])


def test_calibrate_says_when_no_read_floor_fits(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = _rows(200, 2, 1.0)
    for r in rows:
        r["signals"].pop(calibrate.READER_FEATURE)  # without a reading: the model cannot weigh it
    path = _write(tmp_path / "rows.jsonl", rows)
    out = tmp_path / "x.yaml"
    assert calibrate.main([str(path), "--out", str(out), "--read-floor-cost", "0.01"]) == 0
    assert parse_policy(out.read_text()).calibrated.read_floor == 0.0
    assert "no read floor written" in capsys.readouterr().err


def test_a_config_fitted_on_another_reader_is_not_scored_on_these_rows(tmp_path: Path) -> None:
    # Two readers ship (gate.reader.model): v5's probabilities under v4's coefficients would
    # report numbers no gate produces, so rescore refuses the pairing as the gate does.
    rows = _rows(200, 3, 1.0)
    for r in rows:
        odds = calibrate.READER_FEATURE
        r["signals"][odds] = float(np.clip(r["signals"][odds] / 4 + 0.5, 0.0, 1.0))
        r |= {"ranked": {"hybrid": [f"doc-{r['id']}"]}, "policies": {}, "reader_model": "aaaa"}
    path = _write(tmp_path / "rows.jsonl", rows)
    out = tmp_path / "fit.yaml"
    assert calibrate.main([str(path), "--target-far", "0.2", "--out", str(out)]) == 0
    fitted = parse_policy(out.read_text())
    assert fitted.calibrated.reader_model == "aaaa"
    rescore(rows, fitted, "same")
    assert {r["policies"]["same"]["outcome"] for r in rows} == {"pass", "refuse"}
    other = [dict(r, reader_model="bbbb", policies={}) for r in rows]
    with pytest.raises(
        SystemExit, match="reader_model is aaaa but these rows were scored by evidence reader bbbb"
    ):
        rescore(other, fitted, "other")
    assert all(r["policies"] == {} for r in other)
    # Rows from a deployment do not say which reader scored them: nothing to check against.
    remote = [{k: v for k, v in r.items() if k != "reader_model"} | {"policies": {}} for r in rows]
    rescore(remote, fitted, "remote")
