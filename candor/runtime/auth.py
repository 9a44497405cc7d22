"""Caller authentication: API keys (stored as sha256) mapped to the tenants each may use."""

from __future__ import annotations

import hashlib
import hmac
import logging
from dataclasses import dataclass

import grpc

from candor.runtime.errors import abort_info
from candor.settings import AuthSettings

API_KEY_HEADER = "x-api-key"
log = logging.getLogger("candor.auth")


def hash_key(key: str) -> str:
    """The sha256 hex digest stored in config for an API key."""
    return hashlib.sha256(key.encode()).hexdigest()


@dataclass(frozen=True)
class Caller:
    """An authenticated caller: the tenants its key may use (None when auth is off)."""

    tenants: tuple[str, ...] | None


class Authenticator:
    """Checks the caller's key and that it may use the requested tenant."""

    def __init__(self, settings: AuthSettings, service: str) -> None:
        self._settings = settings
        self._keys = {k.sha256.lower(): k for k in settings.keys}
        if not settings.enabled:
            log.warning(
                "AUTHENTICATION IS DISABLED for %s: any caller may use any tenant. "
                "Set auth.enabled and auth.keys before exposing this service.",
                service,
            )

    def tenants_for(self, api_key: str | None) -> tuple[str, ...] | None:
        """Tenants the key may use, or None for an unknown key."""
        if api_key is None:
            return None
        digest = hash_key(api_key)
        for stored, entry in self._keys.items():
            if hmac.compare_digest(stored, digest):
                return entry.tenants
        return None

    async def authenticate(self, context: grpc.aio.ServicerContext) -> Caller:
        """The caller behind the key, or abort with UNAUTHENTICATED for a missing or unknown
        key. Called before the request is validated, so a caller without a key learns nothing
        about what a valid request (or pass token) looks like."""
        if not self._settings.enabled:
            return Caller(None)
        tenants = self.tenants_for(caller_api_key(context))
        if tenants is None:
            await abort_info(
                context,
                grpc.StatusCode.UNAUTHENTICATED,
                "API_KEY_INVALID",
                f"missing or unknown API key (send it in '{API_KEY_HEADER}' metadata)",
            )
        return Caller(tenants)

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
            await abort_info(
                context,
                grpc.StatusCode.PERMISSION_DENIED,
                "OPERATOR_ONLY",
                "this request needs an operator key (tenants: ['*'])",
            )
        if tenant is not None and "*" not in tenants and tenant not in tenants:
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
