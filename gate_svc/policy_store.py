"""The active (and optional shadow) threshold config, hot-reloaded from disk.

Kubernetes mounts a ConfigMap as a symlink that is swapped atomically, so the watcher reads
the file's content on each poll and compares hashes instead of trusting mtimes. A new file
must parse, validate and carry a new ``version``; anything else is rejected, logged and
counted once per distinct bad file, and the running version keeps serving. A version names one
content for the life of the process: a file reusing a version this gate has run with other
content is rejected, while going back to an earlier version's exact file (a rollback) loads.

A changed file is loaded only once two polls in a row read the same bytes. A file edited in
place can be read half-written, and a prefix of a YAML mapping is often valid YAML: read once,
it ran (and claimed its version for good) with the bounds it had not reached yet. A writer
that stalls longer than a poll interval can still be caught: write elsewhere and rename.
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
        # Every version this process has run, with its content's sha256.
        self._versions: dict[str, str] = {}
        self.active = self._load(self._path)
        self.shadow = self._load(self._shadow_path) if self._shadow_path else None
        self._task: asyncio.Task[None] | None = None
        # What each role's file held when it was last rejected: a bad file is logged and
        # counted once, not on every poll until someone fixes it (rejected() tells the gauge).
        self._rejected: dict[str, str] = {}
        # What each role's file held at the last poll, when that was new: loaded if it is
        # still there at the next one.
        self._unsettled: dict[str, str] = {}
        self._events: list[tuple[str, str, str]] = []

    def rejected(self, role: str) -> bool:
        """Whether the file for ``role`` ("active", "shadow") was rejected at its last poll."""
        return role in self._rejected

    def _load(self, path: Path) -> Loaded:
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise PolicyError(f"cannot read {path}: {exc}") from exc
        config = self._parse(data)
        self._versions.setdefault(config.version, config.sha256)
        return Loaded(config, time.time(), str(path))

    def _parse(self, data: bytes) -> PolicyConfig:
        try:
            text = data.decode()
        except UnicodeDecodeError as exc:
            raise PolicyError(f"not UTF-8 (byte {exc.start}): save the file as UTF-8") from exc
        try:
            config = parse_policy(text)
        except PolicyError:
            raise
        except Exception as exc:
            # Whatever a file makes the parser raise, it is a rejected file: escaping the
            # watcher, it ended it for good and no later file was ever loaded.
            raise PolicyError(f"cannot be read as a config: {type(exc).__name__}: {exc}") from exc
        why = self._check(config)
        if why is not None:
            raise PolicyError(why)
        known = self._versions.get(config.version)
        if known is not None and known != config.sha256:
            raise PolicyError(
                f"version {config.version!r} already names other content in this gate "
                f"(sha256 {known[:12]}…): versions are immutable, give the new thresholds a "
                "new version"
            )
        return config

    def _reload_one(self, role: str, path: Path, current: Loaded | None) -> Loaded | None:
        try:
            data = path.read_bytes()
        except OSError as exc:
            self._unsettled.pop(role, None)  # "two polls in a row" means in a row
            self._reject(role, path, current, f"cannot read: {exc}", f"unreadable: {exc}")
            return current
        digest = hashlib.sha256(data).hexdigest()
        if current is not None and digest == current.config.sha256:
            self._rejected.pop(role, None)
            self._unsettled.pop(role, None)
            return current
        if self._rejected.get(role) == digest:
            self._unsettled.pop(role, None)
            return current  # the file rejected last poll: parsing it again costs a core
        if self._unsettled.get(role) != digest:
            self._unsettled[role] = digest  # perhaps still being written: look again next poll
            return current
        del self._unsettled[role]
        try:
            config = self._parse(data)
        except PolicyError as exc:
            self._reject(role, path, current, str(exc), digest)
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
        self._versions.setdefault(config.version, config.sha256)
        self._events.append((role, "success", config.version))
        return Loaded(config, time.time(), str(path))

    def _reject(self, role: str, path: Path, current: Loaded | None, why: str, key: str) -> None:
        if self._rejected.get(role) == key:
            return
        self._rejected[role] = key
        version = current.config.version if current else ""
        log.error(
            "threshold config rejected; keeping the running version",
            extra={"role": role, "path": str(path), "error": why, "policy_version": version},
        )
        self._events.append((role, "failure", version))

    def reload_now(self) -> None:
        """Check both files once (the watcher calls this; tests may too). A changed file is
        taken at the second poll that reads it unchanged."""
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
            try:
                await asyncio.to_thread(self.reload_now)
            except Exception:
                # A watcher that dies keeps the running version forever, silently.
                log.exception("threshold config poll failed; polling on")

    def start(self, interval_seconds: float) -> None:
        if interval_seconds > 0 and self._task is None:
            self._task = asyncio.get_running_loop().create_task(self.watch(interval_seconds))

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            self._task = None
