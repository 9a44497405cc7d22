"""reader_train's base loading (training-only: needs torch, the `train` extra; skipped without)."""

from __future__ import annotations

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
