"""The active (and optional shadow) threshold config, hot-reloaded from disk.

Kubernetes mounts a ConfigMap as a symlink that is swapped atomically, so the watcher reads
the file's content on each poll and compares hashes instead of trusting mtimes. A new file
must parse, validate and carry a new ``version``; anything else is rejected, logged and
counted, and the running version keeps serving.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from gate_svc.policy import DEFAULT_POLICY_PATH, PolicyConfig, PolicyError, parse_policy

log = logging.getLogger("candor.gate.policy")


@dataclass(frozen=True)
class Loaded:
    config: PolicyConfig
    loaded_at: float
    path: str


class PolicyStore:
    def __init__(
        self,
        path: str | Path | None,
        shadow_path: str | Path | None = None,
        on_reload: Callable[[str, str, str], None] | None = None,
        check: Callable[[PolicyConfig], str | None] | None = None,
    ) -> None:
        """Load both files now; an invalid file at start-up is fatal (PolicyError).

        ``check`` returns why a parsed config cannot run in this process (e.g. it was fitted
        on another evidence reader), or ``None``; such a config is invalid like any other.
        """
        self._check = check or (lambda config: None)
        self._path = Path(path) if path else DEFAULT_POLICY_PATH
        self._shadow_path = Path(shadow_path) if shadow_path else None
        self._on_reload = on_reload or (lambda role, result, version: None)
        self.active = self._load(self._path)
        self.shadow = self._load(self._shadow_path) if self._shadow_path else None
        self._task: asyncio.Task[None] | None = None
        # A bad file is reported once, not on every poll until someone fixes it.
        self._rejected: dict[str, str] = {}
        self._events: list[tuple[str, str, str]] = []

    def _load(self, path: Path) -> Loaded:
        try:
            text = path.read_text()
        except OSError as exc:
            raise PolicyError(f"cannot read {path}: {exc}") from exc
        return Loaded(self._parse(text), time.time(), str(path))

    def _parse(self, text: str) -> PolicyConfig:
        config = parse_policy(text)
        why = self._check(config)
        if why is not None:
            raise PolicyError(why)
        return config

    def _reload_one(self, role: str, path: Path, current: Loaded | None) -> Loaded | None:
        try:
            text = path.read_text()
        except OSError as exc:
            self._reject(role, path, current, f"cannot read: {exc}")
            return current
        if (
            current is not None
            and hashlib.sha256(text.encode()).hexdigest() == current.config.sha256
        ):
            return current
        try:
            config = self._parse(text)
        except PolicyError as exc:
            self._reject(role, path, current, str(exc))
            return current
        if current is not None and config.version == current.config.version:
            self._reject(
                role,
                path,
                current,
                f"content changed but version {config.version!r} did not: versions are "
                "immutable, give the new thresholds a new version",
            )
            return current
        log.info(
            "threshold config loaded",
            extra={
                "role": role,
                "policy_version": config.version,
                "policy": config.policy,
                "previous_version": current.config.version if current else "",
            },
        )
        self._rejected.pop(role, None)
        self._events.append((role, "success", config.version))
        return Loaded(config, time.time(), str(path))

    def _reject(self, role: str, path: Path, current: Loaded | None, why: str) -> None:
        version = current.config.version if current else ""
        log.error(
            "threshold config rejected; keeping the running version",
            extra={"role": role, "path": str(path), "error": why, "policy_version": version},
        )
        self._events.append((role, "failure", version))

    def reload_now(self) -> None:
        """Check both files once (the watcher calls this; tests may too)."""
        self.active = self._reload_one("active", self._path, self.active) or self.active
        if self._shadow_path is not None:
            self.shadow = self._reload_one("shadow", self._shadow_path, self.shadow)
        # Report after swapping, so listeners see the new state.
        events, self._events = self._events, []
        for event in events:
            self._on_reload(*event)

    async def watch(self, interval_seconds: float) -> None:
        while True:
            await asyncio.sleep(interval_seconds)
            await asyncio.to_thread(self.reload_now)

    def start(self, interval_seconds: float) -> None:
        if interval_seconds > 0 and self._task is None:
            self._task = asyncio.get_running_loop().create_task(self.watch(interval_seconds))

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            self._task = None
