"""Caller authentication: API keys (stored as sha256) mapped to the tenants each may use."""

from __future__ import annotations

import hashlib
import hmac
import logging
import math
import time
from dataclasses import dataclass

import grpc
from prometheus_client import CollectorRegistry, Counter

from candor.runtime.errors import abort_info
from candor.settings import ApiKey, AuthSettings

API_KEY_HEADER = "x-api-key"
REFUSAL_LOG_INTERVAL_SECONDS = 10.0
"""At most one "call refused" line per reason, key and tenant this often (every refusal is
counted)."""
MAX_REFUSAL_BUCKETS = 4096
"""(reason, key, tenant) triples remembered for that; past it, those quiet for an interval go."""
log = logging.getLogger("candor.auth")


def hash_key(key: str) -> str:
    """The sha256 hex digest stored in config for an API key."""
    return hashlib.sha256(key.encode()).hexdigest()


@dataclass(frozen=True)
class Caller:
    """An authenticated caller: the tenants its key may use (None when auth is off)."""

    tenants: tuple[str, ...] | None
    name: str = ""
    """The key's ``name`` in ``auth.keys``, for logs ("" when auth is off)."""


class Authenticator:
    """Checks the caller's key and that it may use the requested tenant."""

    def __init__(
        self, settings: AuthSettings, service: str, registry: CollectorRegistry | None = None
    ) -> None:
        self._settings = settings
        self._service = service
        self._keys = {k.sha256.lower(): k for k in settings.keys}
        self._logged: dict[tuple[str, str, str], tuple[float, int]] = {}
        # Refusals were counted only as grpc codes and logged nowhere: a key probing other
        # tenants could be neither seen by reason nor named.
        self._failures = Counter(
            "candor_auth_failures_total",
            "Calls refused by authentication or authorisation, by reason.",
            ["reason"],
            registry=registry if registry is not None else CollectorRegistry(),
        )
        if not settings.enabled:
            log.warning(
                "AUTHENTICATION IS DISABLED for %s: any caller may use any tenant. "
                "Set auth.enabled and auth.keys before exposing this service.",
                service,
            )

    def tenants_for(self, api_key: str | None) -> tuple[str, ...] | None:
        """Tenants the key may use, or None for an unknown key."""
        entry = self._entry(api_key)
        return entry.tenants if entry is not None else None

    def _entry(self, api_key: str | None) -> ApiKey | None:
        if api_key is None:
            return None
        digest = hash_key(api_key)
        for stored, entry in self._keys.items():
            if hmac.compare_digest(stored, digest):
                return entry
        return None

    def _refused(self, reason: str, key: str, tenant: str | None = None) -> None:
        self._failures.labels(reason).inc()
        # One line per (reason, key, tenant) per interval, with how many were left out: a
        # client without a key wrote one WARNING per call, as fast as it could call. The
        # tenant stays in the key so a key probing tenant after tenant names each one.
        now = time.monotonic()
        bucket = (reason, key, tenant or "")
        last, left_out = self._logged.get(bucket, (-math.inf, 0))
        if now - last < REFUSAL_LOG_INTERVAL_SECONDS:
            self._logged[bucket] = (last, left_out + 1)
            return
        if len(self._logged) >= MAX_REFUSAL_BUCKETS:
            # Tenants asked for are the caller's to choose: forget the quiet ones.
            self._logged = {
                b: v for b, v in self._logged.items() if now - v[0] < REFUSAL_LOG_INTERVAL_SECONDS
            }
        self._logged[bucket] = (now, 0)
        log.warning(
            "call refused",
            extra={
                "service": self._service,
                "reason": reason,
                "key": key,
                "tenant": tenant,
                "not_logged_since_last": left_out,
            },
        )

    async def authenticate(self, context: grpc.aio.ServicerContext) -> Caller:
        """The caller behind the key, or abort with UNAUTHENTICATED for a missing or unknown
        key. Called before the request is validated, so a caller without a key learns nothing
        about what a valid request (or pass token) looks like."""
        if not self._settings.enabled:
            return Caller(None)
        sent = caller_api_key(context)
        entry = self._entry(sent)
        if entry is None:
            # Never the key itself: whether one was sent is all a reader of the log needs.
            self._refused("API_KEY_INVALID", "(none sent)" if sent is None else "(unknown)")
            await abort_info(
                context,
                grpc.StatusCode.UNAUTHENTICATED,
                "API_KEY_INVALID",
                f"missing or unknown API key (send it in '{API_KEY_HEADER}' metadata)",
            )
        return Caller(entry.tenants, entry.name)

    async def authorize(
        self,
        context: grpc.aio.ServicerContext,
        caller: Caller,
        tenant: str | None,
        *,
        operator: bool = False,
    ) -> None:
        """Abort with PERMISSION_DENIED unless the authenticated ``caller`` may use ``tenant``
        (None: any valid key will do). ``operator`` asks for a key of every tenant ("*")."""
        tenants = caller.tenants
        if tenants is None:
            return
        if operator and "*" not in tenants:
            self._refused("OPERATOR_ONLY", caller.name, tenant)
            await abort_info(
                context,
                grpc.StatusCode.PERMISSION_DENIED,
                "OPERATOR_ONLY",
                "this request needs an operator key (tenants: ['*'])",
            )
        if tenant is not None and "*" not in tenants and tenant not in tenants:
            self._refused("TENANT_NOT_ALLOWED", caller.name, tenant)
            await abort_info(
                context,
                grpc.StatusCode.PERMISSION_DENIED,
                "TENANT_NOT_ALLOWED",
                "this API key may not use the requested tenant",
            )


def caller_api_key(context: grpc.aio.ServicerContext) -> str | None:
    for key, value in context.invocation_metadata() or ():
        if key == API_KEY_HEADER:
            return value if isinstance(value, str) else value.decode()
    return None


def forwarded_metadata(context: grpc.aio.ServicerContext) -> tuple[tuple[str, str], ...]:
    """Metadata to pass downstream so the next hop authorises the same caller."""
    key = caller_api_key(context)
    return ((API_KEY_HEADER, key),) if key else ()
