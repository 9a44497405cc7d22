"""Auth refusals: every one counted, logged at most once per reason and key per interval."""

from __future__ import annotations

import logging
from typing import Any

import grpc
import pytest
from prometheus_client import CollectorRegistry

from candor.runtime import auth
from candor.runtime.auth import Authenticator, hash_key
from candor.settings import ApiKey, AuthSettings


class Context:
    def __init__(self, key: str | None) -> None:
        self._key = key

    def invocation_metadata(self) -> tuple[tuple[str, str], ...]:
        return () if self._key is None else ((auth.API_KEY_HEADER, self._key),)

    async def abort_with_status(self, status: grpc.Status) -> None:
        raise grpc.aio.AbortError()


async def test_a_client_hammering_without_a_key_writes_one_line_per_interval(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    now = [1000.0]
    monkeypatch.setattr(auth.time, "monotonic", lambda: now[0])
    keys = (ApiKey("billing", hash_key("k"), ("acme",)),)
    registry = CollectorRegistry()
    a = Authenticator(AuthSettings(enabled=True, keys=keys), "test", registry)
    caplog.set_level(logging.WARNING, logger="candor.auth")

    async def refused(key: str | None) -> None:
        ctx: Any = Context(key)
        with pytest.raises(grpc.aio.AbortError):
            await a.authenticate(ctx)

    for _ in range(50):
        await refused(None)
    await refused("wrong")  # another placeholder: its own line
    now[0] += auth.REFUSAL_LOG_INTERVAL_SECONDS
    await refused(None)
    lines = [(r.key, r.not_logged_since_last) for r in caplog.records]  # type: ignore[attr-defined]
    assert lines == [("(none sent)", 0), ("(unknown)", 0), ("(none sent)", 49)]
    counted = registry.get_sample_value("candor_auth_failures_total", {"reason": "API_KEY_INVALID"})
    assert counted == 52  # the counter misses none


async def test_a_key_probing_tenant_after_tenant_names_each_one(
    caplog: pytest.LogCaptureFixture,
) -> None:
    keys = (ApiKey("billing", hash_key("k"), ("acme",)),)
    a = Authenticator(AuthSettings(enabled=True, keys=keys), "test")
    caplog.set_level(logging.WARNING, logger="candor.auth")
    caller = auth.Caller(("acme",), "billing")
    for tenant in ("beta", "gamma", "beta"):
        with pytest.raises(grpc.aio.AbortError):
            await a.authorize(Context("k"), caller, tenant)  # type: ignore[arg-type]
    assert [r.tenant for r in caplog.records] == ["beta", "gamma"]  # type: ignore[attr-defined]
