"""Pinned registry files: fetched once, kept only when the sha256 matches."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from evals.datasets.pinned import SourceError, url_fetch


def test_url_fetch_downloads_once_and_checks_the_digest(tmp_path: Path) -> None:
    remote = tmp_path / "remote" / "data-1.0.tar.gz"
    remote.parent.mkdir()
    remote.write_bytes(b"payload")
    digest = hashlib.sha256(b"payload").hexdigest()
    cache = tmp_path / "cache"

    got = url_fetch(remote.as_uri(), digest, cache)
    assert got == cache / "data-1.0.tar.gz" and got.read_bytes() == b"payload"
    assert not list(cache.glob("*.part"))
    remote.unlink()  # a cached file is not fetched again
    assert url_fetch(remote.as_uri(), digest, cache) == got

    got.write_bytes(b"tampered")
    with pytest.raises(SourceError, match="does not match the pinned"):
        url_fetch(remote.as_uri(), digest, cache)


def test_url_fetch_failure_leaves_nothing_behind(tmp_path: Path) -> None:
    missing = (tmp_path / "nowhere" / "x.tar.gz").as_uri()
    with pytest.raises(SourceError, match="could not download"):
        url_fetch(missing, "0" * 64, tmp_path / "cache")
    assert not list((tmp_path / "cache").iterdir())
