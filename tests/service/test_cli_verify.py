"""`candor verify` on the embedded stores: reports drift, repairs it, then reports none."""

from __future__ import annotations

import json
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


def test_verify_opens_a_collection_built_by_another_embedder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Built by a 512-d embedder (the multilingual one): verify must open it at 512, not 384.
    monkeypatch.setenv("CANDOR_DATA_DIR", str(tmp_path))
    (tmp_path / "collection.json").write_text(json.dumps({"embedder": "usem3/512", "dim": 512}))
    chunk = Chunk("acme", "doc#p0c0", "doc#p0", "doc", "Doc", "text", 1, "", "g1")
    dense = EdgeDenseStore(tmp_path / "dense", 512)
    keyword = TantivyKeywordStore(tmp_path / "keyword")
    dense.upsert([chunk], np.ones((1, 512), dtype=np.float32))
    dense.publish("acme", "doc", "g1")
    keyword.replace("acme", "doc", [chunk])
    dense.close()
    keyword.close()
    del dense, keyword
    assert main(["verify"]) == 0
    assert "0 document(s) drifted" in capsys.readouterr().out
