"""The reader-training base model is pinned: a jar with another digest is refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from evals import reader_base


def test_a_jar_with_another_digest_is_refused(tmp_path: Path) -> None:
    (tmp_path / reader_base.JAR_NAME).write_bytes(b"not the langchain4j jar")
    with pytest.raises(RuntimeError, match="does not match the pinned"):
        reader_base.fetch(tmp_path)
    assert not (tmp_path / reader_base.MEMBER).exists()


def test_an_extracted_model_is_reused_without_fetching(tmp_path: Path) -> None:
    model = tmp_path / reader_base.MEMBER
    model.write_bytes(b"onnx")
    assert reader_base.fetch(tmp_path) == model
