"""reader_train's base loading (training-only: needs torch, the `train` extra; skipped without)."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from evals.reader_train import from_base  # noqa: E402


def test_keep_layers_keeps_the_bottom_layers_of_the_base() -> None:
    full = from_base()
    cut = from_base(keep_layers=2)
    assert len(full.layers) == 6 and len(cut.layers) == 2
    whole, part = full.state_dict(), cut.state_dict()
    assert not any(k.startswith("layers.2.") for k in part)
    for name, tensor in part.items():
        if not name.startswith(("head.", "span.")):
            assert torch.equal(tensor, whole[name]), name


@pytest.mark.parametrize("keep", [0, 7])
def test_keep_layers_outside_the_base_is_refused(keep: int) -> None:
    with pytest.raises(ValueError, match="keep_layers"):
        from_base(keep_layers=keep)


def _pairs() -> list:
    from evals.reader_data import Pair

    refund = "how long is the refund window for orders?"
    return [
        Pair(1, refund, "Orders can be refunded within 30 days.", "answers"),
        Pair(1, refund, "Gift cards cannot be refunded.", "near_miss"),
        Pair(2, "who founded the company?", "The office is in Lisbon.", "off_topic"),
    ]


def test_teacher_logits_are_the_teachers_mean_logit_and_are_cached(tmp_path, monkeypatch) -> None:
    import math

    from evals import reader_train
    from gate_svc.reader import MODEL_PATH, EvidenceReader

    pairs = _pairs()
    cache = tmp_path / "teacher.jsonl"
    got = reader_train.teacher_logits(pairs, [MODEL_PATH, MODEL_PATH], cache)
    reader = EvidenceReader(MODEL_PATH)
    for p in pairs:
        prob = reader.score(p.question, [p.evidence])[0]
        assert got[(p.question, p.evidence)] == pytest.approx(math.log(prob / (1 - prob)), abs=1e-6)
    assert len(got) == 3

    def no_reading(*_: object, **__: object) -> None:
        raise AssertionError("a cached pair was read again")

    monkeypatch.setattr("gate_svc.reader.EvidenceReader", no_reading)
    assert reader_train.teacher_logits(pairs, [MODEL_PATH, MODEL_PATH], cache) == got
    # Another set of teachers does not reuse these logits.
    with pytest.raises(AssertionError, match="read again"):
        reader_train.teacher_logits(pairs, [MODEL_PATH], cache)


def test_targets_mix_the_label_with_the_teacher() -> None:
    from evals.reader_train import _targets

    pairs = _pairs()
    soft = {(p.question, p.evidence): z for p, z in zip(pairs, (0.0, 2.0, -50.0), strict=True)}
    assert _targets(pairs, None, 0.5).tolist() == [1.0, 0.0, 0.0]
    assert _targets(pairs, soft, 0.0).tolist() == [1.0, 0.0, 0.0]
    mixed = _targets(pairs, soft, 0.5).tolist()
    sig2 = 1 / (1 + math.exp(-2.0))
    assert mixed == pytest.approx([0.75, 0.5 * sig2, 0.0], abs=1e-6)


def test_several_teachers_average_their_logits_not_their_probabilities(monkeypatch) -> None:
    from pathlib import Path

    from evals import reader_train

    said = {"a.onnx": 0.5, "b.onnx": 0.9}

    class Teacher:
        def __init__(self, path: Path, threads: int = 1) -> None:
            self.p = said[path.name]

        def score(self, question: str, texts: list[str]) -> list[float]:
            return [self.p for _ in texts]

    monkeypatch.setattr("gate_svc.reader.EvidenceReader", Teacher)
    got = reader_train.teacher_logits(_pairs()[:1], [Path("a.onnx"), Path("b.onnx")])
    # (logit 0.5 + logit 0.9) / 2 = ln(9) / 2; the mean probability 0.7 would give ln(7/3).
    assert list(got.values()) == pytest.approx([math.log(9) / 2])


def test_a_shipped_reader_loaded_to_train_further_reads_as_onnx_runtime_does() -> None:
    """--init maps the int8 export back onto the network; a misplaced matrix would scramble
    the order of its scores, int8 rounding only nudges them."""
    import numpy as np

    from evals.reader_data import Pair
    from evals.reader_train import _batch, from_reader
    from gate_svc.reader import MODEL_PATH, EvidenceReader

    model = from_reader(MODEL_PATH).eval()
    runtime = EvidenceReader(MODEL_PATH)
    hamlet = "who wrote Hamlet?"
    pairs = [
        *_pairs(),
        Pair(3, hamlet, "Hamlet is a tragedy by Shakespeare.", "answers"),
        Pair(3, hamlet, "Paris is the capital of France.", "off_topic"),
    ]
    with torch.no_grad():
        ours = [model(**_batch([p])).item() for p in pairs]
    theirs = [runtime.score(p.question, [p.evidence])[0] for p in pairs]
    logits = [math.log(q / (1 - q)) for q in theirs]
    assert np.argsort(ours).tolist() == np.argsort(logits).tolist()
    assert max(abs(a - b) for a, b in zip(ours, logits, strict=True)) < 1.0
