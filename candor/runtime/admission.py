"""Load shedding: a server runs at most ``server.max_in_flight`` of its own calls at once.

Past what its CPUs do, a gate queued every call: each waited its turn for the evidence reader,
ran out of read time and was decided without a reading, so answerable questions were refused
(``degraded``) and the refusal-rate alerts fired for what was a capacity problem. A call over
the limit is refused at once instead, as UNAVAILABLE (retry with backoff, on another replica if
there is one), before it costs any work; health checks and reflection are never refused.

Also here: a service's per-tenant share (``TenantShare``; the gate's decisions, the generator's
answers), and the client side of both (which errors to retry, and after how long).
"""

from __future__ import annotations

import collections
import logging
import random
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from contextvars import ContextVar

import grpc
from google.protobuf import any_pb2, duration_pb2
from google.rpc import error_details_pb2
from grpc_status import rpc_status
from prometheus_client import Counter

from candor.runtime.errors import DOMAIN, abort_with, downstream_status, status_with
from candor.throttle import Throttle

log = logging.getLogger("candor.admission")

RETRY_DELAY_SECONDS = 0.1
"""The retry hint a refused call carries (google.rpc.RetryInfo): a call here takes 5-50 ms."""
MIN_RETRY_DELAY_SECONDS = 0.01
REASON = "OVERLOADED"
TENANT_REASON = "TENANT_LIMIT"
"""A tenant's own share of a server was full (``<service>.max_in_flight_per_tenant``)."""
_SHED = frozenset({REASON, TENANT_REASON})


class InFlightLimit:
    """Counts the calls running on one server; ``limit`` 0 counts without refusing.

    Not locked: a grpc.aio server runs its handlers on one event loop."""

    def __init__(self, limit: int) -> None:
        if limit < 0:
            raise ValueError("limit must be >= 0")
        self.limit = limit
        self.running = 0

    def try_enter(self) -> bool:
        """Take a slot; False (and nothing taken) when every slot is taken."""
        if self.limit and self.running >= self.limit:
            return False
        self.running += 1
        return True

    def leave(self) -> None:
        """Give back a slot ``try_enter`` took."""
        if self.running <= 0:
            raise RuntimeError("leave() without a matching try_enter()")
        self.running -= 1


class Slot:
    """A call's place under the limit, given back once however the call ends (or earlier,
    by ``release_slot``)."""

    def __init__(self) -> None:
        self._limit: InFlightLimit | None = None
        self.shed = False
        """The call was refused for want of a slot."""

    def hold(self, limit: InFlightLimit) -> None:
        self._limit = limit
        _CURRENT.set(self)

    def release(self) -> None:
        limit, self._limit = self._limit, None
        if limit is not None:
            limit.leave()


_CURRENT: ContextVar[Slot | None] = ContextVar("candor_call_slot", default=None)


class TenantLimit:
    """At most ``limit`` calls per tenant at once (0: no limit); tenants with none running
    take no memory. Not locked: one event loop."""

    def __init__(self, limit: int) -> None:
        if limit < 0:
            raise ValueError("limit must be >= 0")
        self.limit = limit
        self.running: dict[str, int] = {}

    def try_enter(self, tenant: str) -> bool:
        """Take one of ``tenant``'s slots; False (and nothing taken) when all are taken."""
        n = self.running.get(tenant, 0)
        if self.limit and n >= self.limit:
            return False
        self.running[tenant] = n + 1
        return True

    def leave(self, tenant: str) -> None:
        """Give back a slot ``try_enter`` took."""
        n = self.running.get(tenant, 0)
        if n <= 0:
            raise RuntimeError("leave() without a matching try_enter()")
        if n == 1:
            del self.running[tenant]
        else:
            self.running[tenant] = n - 1


class TenantShare:
    """A service's per-tenant share of its calls (``<section>.max_in_flight_per_tenant``):
    the limit, the refusal, its count and its log line."""

    def __init__(self, limit: int, section: str, refused: Counter) -> None:
        self._limit, self._section, self._refused = TenantLimit(limit), section, refused
        self._logged = Throttle(TENANT_LOG_SECONDS)

    @property
    def limit(self) -> int:
        return self._limit.limit

    @asynccontextmanager
    async def slot(self, tenant: str, context: grpc.aio.ServicerContext) -> AsyncIterator[None]:
        """One of ``tenant``'s slots for the block, or the call refused RESOURCE_EXHAUSTED
        (TENANT_LIMIT) before the block runs."""
        if not self._limit.try_enter(tenant):
            mark_shed()
            self._refused.inc()
            # Which tenant is in the log, not a metric label (tenants are unbounded); once per
            # tenant every TENANT_LOG_SECONDS, so a tenant's burst is not a burst of log lines.
            if self._logged.due(tenant):
                log.warning(
                    "tenant over its in-flight limit",
                    extra={
                        "tenant": tenant,
                        "setting": f"{self._section}.max_in_flight_per_tenant",
                        "max_in_flight_per_tenant": self.limit,
                    },
                )
            await abort_with(context, tenant_limited_status(tenant, self.limit, self._section))
        try:
            yield
        finally:
            self._limit.leave(tenant)


TENANT_LOG_SECONDS = 10.0


def tenant_limited_status(tenant: str, limit: int, section: str) -> grpc.Status:
    """RESOURCE_EXHAUSTED (the caller's own quota, not the server's state) with ErrorInfo
    (reason TENANT_LIMIT, the tenant, its limit and the service's settings section: the caller
    is authenticated by now) and the same retry hint as a shed."""
    info = error_details_pb2.ErrorInfo(
        reason=TENANT_REASON,
        domain=DOMAIN,
        metadata={"tenant": tenant, "max_in_flight_per_tenant": str(limit), "service": section},
    )
    message = (
        f"tenant {tenant!r} already has {limit} calls in flight on this server "
        f"({section}.max_in_flight_per_tenant); retry with backoff"
    )
    return _pushed_back(
        status_with(grpc.StatusCode.RESOURCE_EXHAUSTED, message, [info, _retry_info()])
    )


class _Status(
    collections.namedtuple("_Status", ("code", "details", "trailing_metadata")), grpc.Status
):
    pass


PUSHBACK_HEADER = "grpc-retry-pushback-ms"


def _pushed_back(status: grpc.Status) -> grpc.Status:
    """``status`` with grpc's own retry hint too: a caller whose channel has a gRPC retry
    policy for the code waits this long before its retry, without reading RetryInfo."""
    pushback = (PUSHBACK_HEADER, str(int(RETRY_DELAY_SECONDS * 1000)))
    return _Status(status.code, status.details, (*status.trailing_metadata, pushback))  # type: ignore[attr-defined]


def _retry_info() -> error_details_pb2.RetryInfo:
    delay = duration_pb2.Duration()
    delay.FromMilliseconds(int(RETRY_DELAY_SECONDS * 1000))
    return error_details_pb2.RetryInfo(retry_delay=delay)


def mark_shed() -> None:
    """Say the current call was refused without doing its work (a tenant over its share, a
    downstream's shed passed on): like a shed, it is not timed, so a burst of fast refusals
    does not count as fast good calls in the latency SLO."""
    slot = _CURRENT.get()
    if slot is not None:
        slot.shed = True


def retry_pause(error: grpc.RpcError, attempt: int) -> float | None:
    """Seconds to wait before trying a call again after ``error`` (``attempt`` from 0), or
    None when it should not be: only an UNAVAILABLE that did no work is worth repeating, a
    shed (after its hint, doubled each attempt) or one with no ErrorInfo at all (the
    transport's: a pod restarting or draining). A service's own UNAVAILABLE with a reason
    (retrieval's ARMS_UNAVAILABLE) did the work and failed; doing it again doubles the load
    on what is already failing."""
    if error.code() != grpc.StatusCode.UNAVAILABLE:  # type: ignore[attr-defined]
        return None
    details = _details(error)
    if details is None:
        return None
    # No details at all: the transport's failure. Details: only a shed is worth repeating.
    hint = _shed_delay(details) if details else TRANSPORT_RETRY_SECONDS
    return None if hint is None else backoff_seconds(hint, attempt)


def backoff_seconds(hint: float, attempt: int) -> float:
    """The wait before retry ``attempt`` (from 0): the hint doubled each attempt, with jitter
    over its upper half, so callers shed together do not come back together."""
    ceiling = hint * 2**attempt
    return random.uniform(ceiling / 2, ceiling)


TRANSPORT_RETRY_SECONDS = 0.05
"""First pause before repeating a call the transport failed (no pod answered it)."""


def release_slot() -> None:
    """Give back the current call's slot before the call ends: what is left of it waits on
    another service (the gate relaying an LLM's answer for up to 30 s), not on this server's
    CPU, and holding the slot meanwhile shed calls while the CPU sat idle. No-op outside a
    call that holds one."""
    slot = _CURRENT.get()
    if slot is not None:
        slot.release()


def overloaded_status(service: str) -> grpc.Status:
    """UNAVAILABLE with ErrorInfo (reason OVERLOADED, the service) and a RetryInfo hint.

    Not RESOURCE_EXHAUSTED (what grpc's own ``maximum_concurrent_rpcs`` sends): our ingest
    client, like many, reads that as a message over the size limit and splits its batch, and
    round-robin callers retry UNAVAILABLE on another pod."""
    # Not the limit itself: the call is refused before authentication, and the limit is the
    # operator's to see (candor_server_max_in_flight), not any caller's.
    info = error_details_pb2.ErrorInfo(reason=REASON, domain=DOMAIN, metadata={"service": service})
    message = (
        f"{service} is overloaded: too many calls in flight on this server; retry with backoff"
    )
    return _pushed_back(status_with(grpc.StatusCode.UNAVAILABLE, message, [info, _retry_info()]))


def retry_delay_of(error: grpc.RpcError) -> float | None:
    """Client side: seconds to wait before retrying a call a server shed, or None when the
    error is not a shed (ErrorInfo reason OVERLOADED, or TENANT_LIMIT from a gate)."""
    details = _details(error)
    return _shed_delay(details) if details else None


def _details(error: grpc.RpcError) -> Sequence[any_pb2.Any] | None:
    """The google.rpc details an error carries (empty: none), or None when they cannot be read
    (details that disagree with the call's code or message)."""
    try:
        status = rpc_status.from_call(error)  # type: ignore[arg-type]
    except ValueError:
        return None
    return status.details if status is not None else ()


def _shed_delay(details: Sequence[any_pb2.Any]) -> float | None:
    shed, delay = False, RETRY_DELAY_SECONDS
    for detail in details:
        if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            info = error_details_pb2.ErrorInfo()
            detail.Unpack(info)
            shed = shed or (info.reason in _SHED and info.domain == DOMAIN)
        elif detail.Is(error_details_pb2.RetryInfo.DESCRIPTOR):
            retry = error_details_pb2.RetryInfo()
            detail.Unpack(retry)
            delay = retry.retry_delay.ToTimedelta().total_seconds()
    # A zero or negative hint would make a caller's backoff a busy loop.
    return max(delay, MIN_RETRY_DELAY_SECONDS) if shed else None


def passed_on(error: grpc.RpcError) -> grpc.Status:
    """A downstream's shed, as this server's caller should see it: its code, message and
    details (ErrorInfo naming the service that shed, RetryInfo), unchanged."""
    status = downstream_status(error)
    if status is None:
        raise ValueError("the error carries no rich status")
    return _pushed_back(status)
