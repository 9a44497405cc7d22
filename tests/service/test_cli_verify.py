"""`candor verify` on the embedded stores: reports drift, repairs it, then reports none."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from candor.cli.main import main
from retrieval_svc.stores.base import Chunk
from retrieval_svc.stores.edge import EdgeDenseStore
from retrieval_svc.stores.tantivy_store import TantivyKeywordStore


def test_verify_then_repair(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("CANDOR_DATA_DIR", str(tmp_path))
    chunk = Chunk("acme", "doc#p0c0", "doc#p0", "doc", "Doc", "text", 1, "", "g1")
    dense = EdgeDenseStore(tmp_path / "dense", 384)
    keyword = TantivyKeywordStore(tmp_path / "keyword")
    dense.upsert([chunk], np.ones((1, 384), dtype=np.float32))  # staged, never published
    keyword.replace("acme", "doc", [chunk])
    dense.close()
    keyword.close()
    del dense, keyword

    assert main(["verify"]) == 1
    assert "unpublished" in capsys.readouterr().out
    assert main(["verify", "--repair"]) == 0
    assert "repaired 1" in capsys.readouterr().out
    assert main(["verify"]) == 0
    assert "0 document(s) drifted" in capsys.readouterr().out
