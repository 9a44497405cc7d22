"""`candor calibrate` over several row files: per-source weights in the fit and in the bounds."""

from __future__ import annotations

import hashlib
import json
import random
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from evals import calibrate
from gate_svc.policy import parse_policy


def _rows(n: int, seed: int, shift: float, split: str = "train") -> list[dict[str, Any]]:
    """Synthetic eval rows: answerable questions score higher on every signal, by ``shift``."""
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        answerable = i % 2 == 0
        base = shift if answerable else 0.0
        signals = {f: rng.gauss(base, 1.0) for f in calibrate.FEATURES}
        for f in calibrate.LOG_FEATURES:
            signals[f] = abs(signals[f])
        rows.append(
            {
                "id": f"s{seed}-{i}",
                "answerable": answerable,
                "kind": "answerable" if answerable else "topic_absent",
                "split": split,
                "signals": signals,
            }
        )
    return rows


def _write(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_source_weights_give_each_source_its_share_and_average_one() -> None:
    w = calibrate.source_weights([10, 990], [0.75, 0.25])
    assert w.mean() == pytest.approx(1.0)
    assert w[:10].sum() / w.sum() == pytest.approx(0.75)
    assert w[10:].sum() / w.sum() == pytest.approx(0.25)
    assert calibrate.source_weights([3, 4], None).tolist() == [1.0] * 7
    with pytest.raises(ValueError, match="one positive weight per source"):
        calibrate.source_weights([3, 4], [1.0])
    with pytest.raises(ValueError, match="one positive weight per source"):
        calibrate.source_weights([3, 4], [1.0, 0.0])


def test_weighted_bound_counts_negatives_by_weight() -> None:
    scores = np.array([0.9, 0.8, 0.7, 0.6, 0.5, 0.95])
    labels = np.array([0, 0, 0, 0, 0, 1])
    ones = np.ones(6)
    for target in (0.0, 0.2, 0.4, 0.99):
        assert calibrate.threshold_for_far(
            scores, labels, target, ones
        ) == calibrate.threshold_for_far(scores, labels, target)
    # The top negative carries 60% of the negatives' weight: a 50% budget cannot admit it.
    heavy = np.array([6.0, 1.0, 1.0, 1.0, 1.0, 1.0])
    assert calibrate.threshold_for_far(scores, labels, 0.5, heavy) > 0.9
    # Unweighted, two of five negatives (40%) fit in the same budget.
    assert calibrate.threshold_for_far(scores, labels, 0.5) == pytest.approx(0.8)


def test_calibrate_pools_files_with_weights_and_records_them(tmp_path: Path) -> None:
    a = _write(tmp_path / "a.jsonl", _rows(200, 1, 1.5) + _rows(40, 9, 1.5, split="test"))
    b = _write(tmp_path / "b.jsonl", _rows(600, 2, 0.5))
    out = tmp_path / "pooled.yaml"
    args = [str(a), str(b), "--out", str(out), "--target-far", "0.2", "--confident-far", "0.05"]
    assert calibrate.main([*args, "--weight", "0.75", "--weight", "0.25"]) == 0
    cfg = parse_policy(out.read_text())
    digest = {p: hashlib.sha256(p.read_bytes()).hexdigest()[:12] for p in (a, b)}
    assert (
        f"{a.name} (sha256 {digest[a]}, weight 0.75) + {b.name} (sha256 {digest[b]}, weight 0.25)"
        in cfg.calibrated.fitted_on
    )
    assert "n=800" in cfg.calibrated.fitted_on  # train rows only
    # The fit and its bound follow the weights: the same files unweighted give another model.
    plain = tmp_path / "plain.yaml"
    assert calibrate.main([*args[:2], "--out", str(plain), *args[4:]]) == 0
    unweighted = parse_policy(plain.read_text())
    assert unweighted.calibrated.coefficients != cfg.calibrated.coefficients
    # With one file, no weights: exactly the single-source fit.
    single = tmp_path / "single.yaml"
    assert calibrate.main([str(a), "--out", str(single), *args[4:]]) == 0
    train = [r for r in calibrate.read_rows(a) if r["split"] == "train"]
    fitted = calibrate.fit(train, 0.2, 0.05)
    got = parse_policy(single.read_text())
    assert got.calibrated.coefficients == fitted["calibrated"]["coefficients"]
    assert got.tiers.uncertain == fitted["tiers"]["uncertain"]


def test_calibrate_rejects_mismatched_weights_and_a_file_without_train_rows(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a = _write(tmp_path / "a.jsonl", _rows(50, 1, 1.0))
    test_only = _write(tmp_path / "t.jsonl", _rows(50, 2, 1.0, split="test"))
    out = tmp_path / "x.yaml"
    with pytest.raises(SystemExit) as exc:
        calibrate.main([str(a), str(a), "--out", str(out), "--weight", "1"])
    assert exc.value.code == 2 and "--weight given 1 time(s) for 2" in capsys.readouterr().err
    for weight in ("-1", "nan", "inf"):
        with pytest.raises(SystemExit) as exc:
            calibrate.main([str(a), "--out", str(out), "--weight", weight])
        assert exc.value.code == 2
        assert "must be a positive finite number" in capsys.readouterr().err
    with pytest.raises(SystemExit, match=r"t\.jsonl: no train-split rows"):
        calibrate.main([str(a), str(test_only), "--out", str(out)])
    assert not out.exists()


@pytest.mark.parametrize(
    ("flags", "why"),
    [
        # At 1 every negative may pass: the bound fell to 0 and the config answered anything.
        (["--target-far", "1"], "--target-far must be a rate in [0, 1)"),
        (["--target-far", "0.05", "--confident-far", "0.9"], "must not exceed --target-far"),
    ],
)
def test_calibrate_refuses_rates_that_make_a_gate_pass_everything(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flags: list[str], why: str
) -> None:
    a = _write(tmp_path / "a.jsonl", _rows(50, 1, 1.0))
    out = tmp_path / "x.yaml"
    with pytest.raises(SystemExit) as exc:
        calibrate.main([str(a), "--out", str(out), *flags])
    assert exc.value.code == 2 and why in capsys.readouterr().err
    assert not out.exists()


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ({"answerable": "false"}, "answerable must be true or false, not 'false'"),
        ({"answerable": None}, "answerable must be true or false, not None"),
        ({"signals": {"top_cosine": float("nan")}}, "signal top_cosine is nan"),
        ({"signals": {"top_cosine": "0.8"}}, "signal top_cosine must be a number"),
    ],
)
def test_calibrate_names_the_row_whose_label_or_signal_cannot_be_fitted(
    tmp_path: Path, change: dict[str, Any], why: str
) -> None:
    # "false" counted as answerable and null as unanswerable, silently; a NaN signal ended
    # in a traceback naming no row.
    rows = _rows(50, 1, 1.0)
    rows[6] |= change
    a = _write(tmp_path / "a.jsonl", rows)
    with pytest.raises(SystemExit, match=re.escape(f"a.jsonl:7: {why}")):
        calibrate.main([str(a), "--out", str(tmp_path / "x.yaml")])


def test_a_named_source_keeps_the_rows_digest_in_the_provenance(tmp_path: Path) -> None:
    a = _write(tmp_path / "a.jsonl", _rows(50, 1, 1.0))
    out = tmp_path / "x.yaml"
    calibrate.main([str(a), "--out", str(out), "--source", "our help centre"])
    digest = hashlib.sha256(a.read_bytes()).hexdigest()[:12]
    fitted_on = parse_policy(out.read_text()).calibrated.fitted_on
    assert fitted_on.startswith("our help centre: ") and digest in fitted_on
    assert str(tmp_path) not in fitted_on  # served by GetPolicy: file names, not local paths


def test_a_low_target_far_alone_lowers_the_confident_one_with_it(tmp_path: Path) -> None:
    # The default confident rate (0.01) above a --target-far of 0 was refused, blaming a flag
    # the user never typed.
    a = _write(tmp_path / "a.jsonl", _rows(50, 1, 1.0))
    out = tmp_path / "x.yaml"
    calibrate.main([str(a), "--out", str(out), "--target-far", "0"])
    assert "confident_far=0.0" in parse_policy(out.read_text()).calibrated.fitted_on
