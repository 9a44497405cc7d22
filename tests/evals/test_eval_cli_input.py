"""The evaluation tools on a customer's own, imperfect inputs: a clear message naming the file,
line or flag, never a traceback and never a config fitted on nonsense."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from candor.cli.main import main
from evals import calibrate, report
from tests.evals.test_calibrate_sources import _rows, _write


@pytest.mark.parametrize("rate", ["-0.1", "1.5", "nan", "inf"])
@pytest.mark.parametrize("flag", ["--target-far", "--confident-far"])
def test_a_rate_outside_0_1_is_refused(
    tmp_path: Path, flag: str, rate: str, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = _write(tmp_path / "rows.jsonl", _rows(40, 1, 1.0))
    out = tmp_path / "c.yaml"
    with pytest.raises(SystemExit):
        calibrate.main([str(rows), "--out", str(out), f"{flag}={rate}"])
    err = capsys.readouterr().err
    assert f"{flag} must be a rate in [0, 1)" in err
    assert "below the confident tier's default rate" not in err  # a hint for rates, not -0.1
    assert not out.exists()


def test_too_few_of_a_class_is_refused_and_few_is_said(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "c.yaml"
    tiny = _write(tmp_path / "tiny.jsonl", _rows(4, 1, 1.0))  # 2 answerable, 2 not
    with pytest.raises(SystemExit, match="at least 3 answerable and 3 unanswerable"):
        calibrate.main([str(tiny), "--out", str(out)])
    assert not out.exists()
    small = _write(tmp_path / "small.jsonl", _rows(20, 1, 1.0))
    assert calibrate.main([str(small), "--out", str(out)]) == 0
    assert "only 10 unanswerable train questions" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("content", "why"),
    [
        ('{"id": "q1", "answerable": true, "sig', r"rows.jsonl:1: invalid JSON"),
        ('{"id": "q1", "question": "Why?", "answerable": true}', r"rows.jsonl:1: not a row of"),
        ("", r"rows.jsonl: no rows"),
    ],
)
def test_a_file_that_is_not_rows_is_named_with_its_line(
    tmp_path: Path, content: str, why: str
) -> None:
    path = tmp_path / "rows.jsonl"
    path.write_text(content + "\n")
    for run in (
        lambda: calibrate.main([str(path), "--out", str(tmp_path / "c.yaml")]),
        lambda: report.main([str(path)]),
    ):
        with pytest.raises(SystemExit, match=why):
            run()
    with pytest.raises(SystemExit, match=r"missing\.jsonl: cannot read"):
        calibrate.main([str(tmp_path / "missing.jsonl"), "--out", str(tmp_path / "c.yaml")])


def test_a_report_on_one_class_writes_its_tables_and_plots(tmp_path: Path) -> None:
    ds = tmp_path / "ds"
    ds.mkdir()
    texts = ["Tyres run at 80 psi.", "Chains need oil monthly.", "Brakes wear in a year."]
    (ds / "corpus.jsonl").write_text(
        "".join(
            json.dumps({"id": f"p{i}", "title": "Bikes", "text": t}) + "\n"
            for i, t in enumerate(texts)
        )
    )
    questions = ["What pressure do tyres run at?", "How often do chains need oil?"]
    (ds / "questions.jsonl").write_text(
        "".join(
            json.dumps(
                {
                    "id": f"q{i}",
                    "question": q,
                    "answerable": True,
                    "gold_ids": [f"p{i}"],
                    "split": "test",
                }
            )
            + "\n"
            for i, q in enumerate(questions)
        )
    )
    rows = tmp_path / "rows.jsonl"
    assert main(["eval", "run", str(ds), "--out", str(rows), "--no-answers"]) == 0
    out = tmp_path / "report.md"
    assert report.main([str(rows), "--split", "test", "--out", str(out)]) == 0
    assert out.exists() and list(tmp_path.glob("*.png"))


def test_dataset_problems_are_listed_without_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ds = tmp_path / "ds"
    ds.mkdir()
    (ds / "corpus.jsonl").write_text(json.dumps({"id": "p1", "title": "T", "text": "x"}) + "\n")
    (ds / "questions.jsonl").write_text("")
    (ds / "manifest.json").write_bytes(b'{"name": "caf\xe9"}')
    code = main(["eval", "run", str(ds), "--out", str(tmp_path / "rows.jsonl")])
    err = capsys.readouterr().err
    assert code == 2
    assert "questions.jsonl: no questions" in err and "manifest.json: not UTF-8" in err
    assert "Traceback" not in err


def test_a_negative_limit_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["eval", "run", str(tmp_path), "--out", str(tmp_path / "r.jsonl"), "--limit", "-3"])
    assert "--limit must be >= 0" in capsys.readouterr().err


def _acme_tyres(tmp_path: Path) -> Path:
    """A one-passage dataset whose passage and answerable question belong to tenant acme."""
    ds = tmp_path / "ds"
    ds.mkdir()
    passage = {"id": "p1", "title": "Tyres", "text": "Tyres run at 80 psi.", "tenant": "acme"}
    question = {
        "id": "q1",
        "question": "What pressure do tyres run at?",
        "answerable": True,
        "gold_ids": ["p1"],
        "tenant": "acme",
    }
    (ds / "corpus.jsonl").write_text(json.dumps(passage) + "\n")
    (ds / "questions.jsonl").write_text(json.dumps(question) + "\n")
    return ds


def test_questions_are_asked_in_their_tenant(tmp_path: Path) -> None:
    # Every question used to be asked as the tenant "eval": a corpus with tenants found nothing,
    # and every policy, always_answer included, "refused" every answerable question.
    ds = _acme_tyres(tmp_path)
    rows = tmp_path / "rows.jsonl"
    assert main(["eval", "run", str(ds), "--out", str(rows), "--no-answers"]) == 0
    [row] = [json.loads(line) for line in rows.read_text().splitlines()]
    assert row["ranked"]["hybrid"][0] == "p1"


def test_a_policy_file_that_cannot_be_used_is_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("version: x\npolicy: calibrated\ntiers: [1, 2]\n")
    from evals.harness import config_columns

    for path in (tmp_path / "missing.yaml", bad):
        with pytest.raises(SystemExit, match=f"{path.name}: not a usable threshold config"):
            config_columns([path])


def test_a_raw_score_gets_no_calibration_error() -> None:
    # top-1 cosine goes below 0 on off-topic questions: ECE raised and took the report down.
    kinds = ["topic_absent", "topic_absent", "answerable", "answerable"]
    stats = report.threshold_free([-0.05, 0.2, 0.9, 0.7], [False, False, True, True], kinds)
    assert stats["ece"] is None and stats["auroc"] == 1.0


def test_a_pass_bound_never_rounds_down_onto_the_negative_it_excludes() -> None:
    import numpy as np

    negative = 0.9736512  # the highest negative; the bound just above it
    bound = calibrate._between(np.array([0.5, negative]), negative + 1e-9)
    assert bound > negative and round(bound, 6) == bound


def test_a_tenants_override_decides_its_questions_as_the_gate_would(tmp_path: Path) -> None:
    ds = _acme_tyres(tmp_path)
    # The file's own floor passes anything; acme's refuses everything.
    policy = tmp_path / "p.yaml"
    policy.write_text(
        'version: "t-1"\npolicy: seed000\nseed000: {chunk_floor: 0, answer_gate: 0}\n'
        "tenants: {acme: {seed000: {chunk_floor: 0, answer_gate: 100}}}\n"
    )
    rows = tmp_path / "rows.jsonl"
    assert (
        main(["eval", "run", str(ds), "--out", str(rows), "--no-answers", "--policy", str(policy)])
        == 0
    )
    [row] = [json.loads(line) for line in rows.read_text().splitlines()]
    assert row["policies"]["seed000@t-1"]["outcome"] == "refuse"


def test_the_bound_clears_the_negative_despite_float_error() -> None:
    import numpy as np

    negative = 0.125014  # 0.125014 * 1e6 is 125013.99999999999
    bound = calibrate._between(np.array([negative, 0.1250144]), 0.1250144)
    assert bound > negative


def _one_question(tmp_path: Path, corpus: list[dict[str, str]], answerable: bool) -> Path:
    """A dataset directory holding ``corpus`` and one question, answered by p1 or by nothing."""
    ds = tmp_path / "ds"
    ds.mkdir()
    (ds / "corpus.jsonl").write_text("".join(json.dumps(p) + "\n" for p in corpus))
    gold = ["p1"] if answerable else []
    q = {"id": "q1", "question": "What is x?", "answerable": answerable, "gold_ids": gold}
    (ds / "questions.jsonl").write_text(json.dumps(q) + "\n")
    return ds


def test_a_corpus_row_in_error_is_named_once_not_again_as_a_missing_gold_id(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ds = _one_question(tmp_path, [{"id": "p1", "title": "T", "txt": "x"}], True)
    assert main(["eval", "run", str(ds), "--out", str(tmp_path / "rows.jsonl")]) == 2
    err = capsys.readouterr().err
    assert "corpus.jsonl:1:" in err and "txt" in err
    assert "not in corpus.jsonl" not in err


def test_an_empty_corpus_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Every question was refused by every policy, "always answer" included, and it exited 0.
    ds = _one_question(tmp_path, [], False)
    assert main(["eval", "run", str(ds), "--out", str(tmp_path / "rows.jsonl")]) == 2
    assert "corpus.jsonl: no passages" in capsys.readouterr().err


def test_report_names_its_mistaken_inputs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = _write(tmp_path / "rows.jsonl", _rows(40, 1, 1.0))
    with pytest.raises(SystemExit) as exc:
        report.main([str(rows), "--split", "validation"])
    assert exc.value.code == 2
    assert "choose from 'train', 'test', 'all'" in capsys.readouterr().err
    with pytest.raises(SystemExit, match=r"a directory; give the rows file"):
        report.main([str(tmp_path)])


def test_rows_counted_twice_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rows = _rows(40, 1, 1.0)
    twice = _write(tmp_path / "twice.jsonl", [*rows, rows[3]])
    out = tmp_path / "c.yaml"
    with pytest.raises(
        SystemExit, match=r"twice\.jsonl:41: question id 's1-3' again \(first at line 4\)"
    ):
        calibrate.main([str(twice), "--out", str(out)])
    once = _write(tmp_path / "once.jsonl", rows)
    with pytest.raises(SystemExit) as exc:
        calibrate.main([str(once), str(tmp_path / "." / "once.jsonl"), "--out", str(out)])
    assert exc.value.code == 2 and "given twice" in capsys.readouterr().err
    assert not out.exists()
