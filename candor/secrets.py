"""Secrets from mounted files (Kubernetes Secrets), inline settings, or an environment variable."""

from __future__ import annotations

import os
from pathlib import Path


class SecretError(ValueError, RuntimeError):
    """A configured secret cannot be read; start-up should stop with this message."""


def read_secret(value: str, file: str = "", env_var: str = "", what: str = "secret") -> str:
    """The mounted file's content when a file is configured (it wins), else the inline value,
    else ``env_var``; empty when none is set. A configured file that is missing or empty is an
    error, never silently skipped."""
    if file:
        try:
            secret = Path(file).read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise SecretError(f"cannot read the {what} file {file}: {exc}") from exc
        if not secret:
            raise SecretError(f"the {what} file {file} is empty")
        return secret
    if value.strip():
        return value.strip()
    return os.environ.get(env_var, "").strip() if env_var else ""
