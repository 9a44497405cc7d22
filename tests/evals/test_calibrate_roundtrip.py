"""prepare -> eval run -> calibrate -> config -> gate -> report, on a tiny synthetic dataset."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from evals import calibrate, harness, metrics, report
from evals.datasets.format import Question
from evals.datasets.halueval import BuildOptions, prepare
from gate_svc.policy import DEFAULT_POLICY_PATH, decide, parse_policy
from gate_svc.signals import CandidateView
from tests.evals.halueval_fixture import write_fixture


@pytest.fixture(scope="module")
def rows(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict[str, object]]]:
    tmp = tmp_path_factory.mktemp("roundtrip")
    source = write_fixture(tmp / "src").directory
    dataset = prepare(tmp / "dataset", BuildOptions(seed=0), source=source)
    out = harness.run(dataset, tmp / "rows.jsonl", progress=False)
    return tmp, calibrate.read_rows(out)


def test_every_question_gets_signals_and_every_baseline_decides(
    rows: tuple[Path, list[dict[str, object]]],
) -> None:
    _, data = rows
    assert data and {r["split"] for r in data} == {"train", "test"}
    first = data[0]
    shipped = harness.config_label(parse_policy(DEFAULT_POLICY_PATH.read_text()))
    assert set(first["policies"]) >= {  # type: ignore[arg-type]
        shipped,  # every run reports the shipped default, labelled with its version
        "always_answer",
        "seed000",
        "seed001",
        "seed003",
        "seed004",
        "top1_cosine",
    }
    assert "facet_coverage" in first["signals"]  # type: ignore[operator]
    answerable = [r for r in data if r["answerable"]]
    # Recall is measured on the real stores: most gold passages come back in the top 10.
    hits = sum(bool(set(r["gold_ids"]) & set(r["ranked"]["hybrid"][:10])) for r in answerable)  # type: ignore[index,arg-type]
    assert hits / len(answerable) > 0.8


def test_calibrate_writes_a_config_the_gate_loads_and_applies(
    rows: tuple[Path, list[dict[str, object]]],
) -> None:
    tmp, data = rows
    train = [r for r in data if r["split"] == "train"]
    fitted = calibrate.fit(train, target_far=0.1, confident_far=0.05)
    path = tmp / "calibrated.yaml"
    version = calibrate.write_config(fitted, path, "fixture", 0.1, 0.05)
    config = parse_policy(path.read_text())
    assert config.version == version and config.policy == "calibrated"
    assert "split=train" in config.calibrated.fitted_on
    assert set(config.calibrated.coefficients) == set(calibrate.FEATURES)
    # The gate's arithmetic (policy code, from saved signals) equals the fitted model's.
    from sklearn.linear_model import LogisticRegression

    x = calibrate.matrix(train)
    y = np.array([1 if r["answerable"] else 0 for r in train])
    means, scales = x.mean(axis=0), x.std(axis=0)
    scales[scales < 1e-9] = 1.0
    model = LogisticRegression(C=1.0, max_iter=2000, class_weight="balanced")
    model.fit((x - means) / scales, y)
    expected = model.predict_proba((x - means) / scales)[:, 1]
    # A question even a certain reading could not pass is decided unread (as the gate skips
    # the read): the confidence of the model refit without the reader, capped at a certain
    # reading's.
    reader = calibrate.FEATURES.index(calibrate.READER_FEATURE)
    assert model.coef_[0][reader] > 0
    certain = x.copy()
    certain[:, reader] = 1.0
    best = model.predict_proba((certain - means) / scales)[:, 1]
    skipped = best < config.tiers.uncertain
    assert skipped.any() and not skipped.all()
    blind = LogisticRegression(C=1.0, max_iter=2000, class_weight="balanced")
    z = np.delete((x - means) / scales, reader, axis=1)
    blind.fit(z, y)
    no_reading = np.minimum(blind.predict_proba(z)[:, 1], best)
    expected = np.where(skipped, no_reading, expected)
    rescored = [dict(r, policies=dict(r["policies"])) for r in train]  # type: ignore[call-overload]
    harness.rescore(rescored, config, "calibrated")
    got = [r["policies"]["calibrated"]["confidence"] for r in rescored]
    assert np.allclose(got, expected, atol=1e-4)
    # The train rates recorded with the config are the written config's own (a bound rounded
    # up past its row's score refused that row, and the record said otherwise).
    passed = np.array([r["policies"]["calibrated"]["outcome"] == "pass" for r in rescored])
    assert fitted["train"]["far_at_uncertain"] == pytest.approx(passed[y == 0].mean())
    assert fitted["train"]["frr_at_uncertain"] == pytest.approx(1 - passed[y == 1].mean())
    # Evaluate the new config through the harness and report on the test split.
    out = harness.run(tmp / "dataset", tmp / "rows2.jsonl", [path], progress=False)
    summary_path = tmp / "summary.json"
    args = [str(out), "--json", str(summary_path), "--bootstrap", "50"]
    # The shipped default under its own label, beside the new config: never one column.
    shipped = harness.config_label(parse_policy(DEFAULT_POLICY_PATH.read_text()))
    assert report.main([*args, "--policy", str(DEFAULT_POLICY_PATH)]) == 0
    summary = json.loads(summary_path.read_text())
    label = harness.config_label(config)
    assert label == f"calibrated@{version}" and shipped.startswith("calibrated@2026-")
    cal = summary["policies"][label]
    assert 0.0 <= cal["auroc"] <= 1.0 and cal["far"] is not None
    # Every policy has the documented keys; a bare score's decision keys are null.
    bare = summary["policies"]["top1_cosine"]
    assert set(bare) == set(cal) - {"ci95"}
    assert bare["far"] is None and bare["pass_rate_by_kind"] is None
    assert set(cal["auroc_by_kind"]) == set(summary["counts"]) - {"answerable"}
    # Configs given to `eval run` get intervals too, as the README's workflow promises.
    assert summary["bootstrap_resamples"] == 50
    assert "ci95" in cal and "ci95" in summary["policies"][shipped]
    assert "ci95" not in summary["policies"]["seed001"]
    test_rows = [r for r in calibrate.read_rows(out) if r["split"] == "test"]
    assert (
        summary["policies"][shipped]
        == report.summarize(test_rows, "x", [shipped], 50)["policies"][shipped]
    )


def test_calibrated_policy_refuses_weak_and_passes_strong_evidence() -> None:
    text = (
        'version: "t"\npolicy: calibrated\ntiers: {confident: 0.8, uncertain: 0.5}\n'
        "calibrated: {bias: 0, coefficients: {top_cosine: 3}, means: {top_cosine: 0.5},"
        " scales: {top_cosine: 0.1}}\n"
    )
    config = parse_policy(text)

    def cand(cos: float) -> CandidateView:
        return CandidateView("c", "p", "d", "", "t", 1, cos, None, 0.03, 1, False)

    assert decide([cand(0.7)], config).outcome == "pass"
    assert decide([cand(0.3)], config).outcome == "refuse"


def test_threshold_for_far_keeps_far_at_or_under_target() -> None:
    scores = np.array([0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2])
    labels = np.array([1, 0, 1, 0, 1, 0, 0, 0])
    t = calibrate.threshold_for_far(scores, labels, 0.2)  # 1 of 5 negatives may pass
    assert t == pytest.approx(0.7)
    assert ((scores >= t) & (labels == 0)).sum() <= 1


def test_seed001_refit_learns_positive_weights_and_joins_the_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import json
    import random

    from evals import report
    from evals.calibrate import fit_seed001

    rng = random.Random(3)
    rows = []
    for i in range(200):
        answerable = i % 2 == 0
        both = 1.0 if (answerable and rng.random() < 0.8) or rng.random() < 0.2 else 0.0
        rrf = (0.03 if answerable else 0.02) + rng.uniform(-0.006, 0.006)
        rows.append(
            {
                "id": f"q{i}",
                "question": "q",
                "answerable": answerable,
                "kind": "answerable" if answerable else ("topic_absent", "near_miss")[i // 2 % 2],
                "split": "train" if i < 100 else "test",
                "gold_ids": ["d"] if answerable else [],
                "signals": {"top_rrf": rrf, "top_in_both": both},
                "missing_facets": [],
                "ranked": {"hybrid": ["d"], "dense": ["d"], "keyword": ["d"]},
                "policies": {
                    "seed001": {
                        "outcome": "pass",
                        "confidence": 0.9,
                        "reason": "passed",
                        "tier": "confident",
                        "evidence": ["d"],
                    }
                },
            }
        )
    coef = fit_seed001([r for r in rows if r["split"] == "train"])
    assert coef["a"] > 100 and coef["b"] > 0  # RRF differences are tiny, so a is large
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "reports" / "summary.json"  # a directory that does not exist yet
    assert report.main([str(path), "--split", "test", "--json", str(out)]) == 0
    summary = json.loads(out.read_text())
    assert summary["policies"]["seed001_refit"]["auroc"] > 0.8
    # Baselines get no intervals; a config given with --policy does.
    assert "ci95" not in summary["policies"]["seed001_refit"]
    config = tmp_path / "seed001.yaml"
    config.write_text(
        f'version: "s1"\npolicy: seed001\nseed001: {{a: {coef["a"]}, b: 1.5, c: -3}}\n'
    )
    md = tmp_path / "reports" / "with-ci.md"
    args = [str(path), "--split", "test", "--policy", str(config), "--bootstrap", "200"]
    assert report.main([*args, "--json", str(out), "--out", str(md)]) == 0
    summary = json.loads(out.read_text())
    # The config has its own column: the hand seed001 beside it is not overwritten.
    assert summary["policies"]["seed001"]["auroc"] == 0.5
    ci = summary["policies"]["seed001@s1"]["ci95"]
    assert summary["bootstrap_resamples"] == 200
    assert set(ci) == set(report.INTERVAL_KEYS)
    lo, hi = ci["auroc"]
    assert 0.0 <= lo <= summary["policies"]["seed001@s1"]["auroc"] <= hi <= 1.0
    assert "95% bootstrap intervals (200 resamples" in md.read_text()
    # Each kind of negative alone, with its own threshold, as the metric computes it.
    test = [r for r in rows if r["split"] == "test"]
    harness.rescore(test, parse_policy(config.read_text()), "seed001")
    refit = [float(r["policies"]["seed001"]["confidence"]) for r in test]
    kinds = [str(r["kind"]) for r in test]
    alone = summary["policies"]["seed001@s1"]["frr_at_far_by_kind"]
    assert alone == {
        "5": metrics.frr_at_far_by_kind(refit, kinds, 0.05),
        "1": metrics.frr_at_far_by_kind(refit, kinds, 0.01),
    }
    assert set(alone["5"]) == {"topic_absent", "near_miss"}
    assert "| topic-absent FRR @ FAR≤5% | topic-absent FRR @ FAR≤1% | near-miss" in md.read_text()
    with pytest.raises(SystemExit):
        report.main([str(path), "--bootstrap", "-1"])
    # Too few train questions to refit on: left out, and said so (it vanished without a word).
    few = [
        dict(r, split="test") if r["split"] == "train" and i >= 6 else r for i, r in enumerate(rows)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in few))
    capsys.readouterr()
    assert report.main([str(path), "--split", "test", "--json", str(out)]) == 0
    assert "seed001_refit" not in json.loads(out.read_text())["policies"]
    assert (
        "seed001_refit left out: the train split has 3 answerable and 3 unanswerable questions"
        in capsys.readouterr().err
    )


def test_calibrate_says_when_train_rows_were_not_read(
    rows: tuple[Path, list[dict[str, object]]], capsys: pytest.CaptureFixture[str]
) -> None:
    tmp, data = rows
    remote = [dict(r, signals=dict(r["signals"])) for r in data]  # type: ignore[call-overload]
    skipped = [r for r in remote if r["split"] == "train"][:3]
    for r in skipped:
        r["signals"].pop("reader", None)
        r["signals"]["reader_skipped"] = 1.0
    path = tmp / "remote-rows.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in remote))
    assert calibrate.main([str(path), "--out", str(tmp / "remote.yaml")]) == 0
    assert "3 train row(s) have no reading" in capsys.readouterr().err


def test_calibrate_binds_the_config_to_the_reader_that_scored_the_rows(
    rows: tuple[Path, list[dict[str, object]]],
) -> None:
    from gate_svc.policy import reader_mismatch
    from gate_svc.reader import model_digest

    tmp, data = rows
    digest = model_digest()
    assert all(r.get("reader_model") == digest for r in data if "reader" in r["signals"])  # type: ignore[operator]
    path = tmp / "rows.jsonl"
    out = tmp / "policies" / "bound.yaml"  # a directory that does not exist yet
    assert calibrate.main([str(path), "--out", str(out)]) == 0
    config = parse_policy(out.read_text())
    assert config.calibrated.reader_model == digest
    assert reader_mismatch(config, digest) is None
    assert reader_mismatch(config, "0" * 16) is not None


def test_calibrate_refuses_rows_scored_by_two_readers(
    rows: tuple[Path, list[dict[str, object]]],
) -> None:
    tmp, data = rows
    mixed = [dict(r) for r in data]
    for r in mixed[::2]:
        r["reader_model"] = "f" * 16
    path = tmp / "mixed-rows.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in mixed))
    with pytest.raises(SystemExit, match="several evidence readers"):
        calibrate.main([str(path), "--out", str(tmp / "mixed.yaml")])
    # Rows that do not say which reader scored them (a deployment's) leave the config unbound.
    for r in mixed:
        r.pop("reader_model", None)
    path.write_text("".join(json.dumps(r) + "\n" for r in mixed))
    assert calibrate.main([str(path), "--out", str(tmp / "unbound.yaml")]) == 0
    assert parse_policy((tmp / "unbound.yaml").read_text()).calibrated.reader_model == ""


def _synthetic_rows(split: str | None) -> list[dict[str, object]]:
    rows = []
    for i in range(40):
        answerable = i % 2 == 0
        confidence = (0.6 if answerable else 0.4) + (i % 5) / 50
        rows.append(
            harness.row_head(
                Question(
                    id=f"q{i}",
                    question="q",
                    answerable=answerable,
                    gold_ids=("d",) if answerable else (),
                    kind="answerable" if answerable else "topic_absent",
                    split=split,  # type: ignore[arg-type]
                )
            )
            | {
                "signals": {"top_rrf": confidence / 20, "top_in_both": 1.0},
                "missing_facets": [],
                "ranked": {"hybrid": ["d"]},
                "policies": {"seed001": {"confidence": confidence}},
            }
        )
    return rows


def test_an_unsplit_dataset_is_reported_as_all_questions(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = _synthetic_rows(None)
    assert {r["split"] for r in rows} == {harness.UNSPLIT}
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert report.main([str(path), "--bootstrap", "0"]) == 0
    assert "all questions (unsplit dataset), n = 40" in capsys.readouterr().out


def test_two_configs_with_one_version_are_refused_not_merged(tmp_path: Path) -> None:
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in _synthetic_rows("test")))
    one, other = tmp_path / "one.yaml", tmp_path / "other.yaml"
    one.write_text('version: "v1"\npolicy: seed001\n')
    other.write_text('version: "v1"\npolicy: seed001\nseed001: {a: 50}\n')
    with pytest.raises(SystemExit, match="names another config"):
        report.main([str(path), "--policy", str(one), "--policy", str(other)])


def test_a_config_in_the_rows_is_kept_only_if_the_file_given_decides_them_alike(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = _synthetic_rows("test")
    run_with = tmp_path / "run.yaml"
    run_with.write_text('version: "v1"\npolicy: seed001\n')
    harness.rescore(rows, parse_policy(run_with.read_text()), "seed001@v1")
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert report.main([str(path), "--policy", str(run_with), "--bootstrap", "0"]) == 0
    assert "seed001@v1 is in the rows already; kept" in capsys.readouterr().err
    edited = tmp_path / "edited.yaml"
    edited.write_text('version: "v1"\npolicy: seed001\nseed001: {a: 50}\n')
    with pytest.raises(SystemExit, match="decides 40 rows otherwise"):
        report.main([str(path), "--policy", str(edited), "--bootstrap", "0"])


def test_eval_run_refuses_a_file_reusing_the_shipped_default_s_version(tmp_path: Path) -> None:
    data = tmp_path / "ds"
    data.mkdir()
    (data / "corpus.jsonl").write_text(json.dumps({"id": "d", "title": "D", "text": "x y"}) + "\n")
    question = {"id": "q", "question": "x?", "answerable": True, "gold_ids": ["d"]}
    (data / "questions.jsonl").write_text(json.dumps(question) + "\n")
    edited = tmp_path / "edited-default.yaml"
    text = DEFAULT_POLICY_PATH.read_text()
    bound = re.search(r"^  uncertain: [0-9.]+$", text, re.M)
    assert bound is not None
    edited.write_text(text.replace(bound.group(0), "  uncertain: 0.555"))
    # Refused before anything is indexed: the shipped default's column is not replaced.
    with pytest.raises(SystemExit, match="names another config"):
        harness.run(data, tmp_path / "rows.jsonl", [edited], progress=False)
