"""Load shedding: a server runs at most ``server.max_in_flight`` of its own calls at once.

Past what its CPUs do, a gate queued every call: each waited its turn for the evidence reader,
ran out of read time and was decided without a reading, so answerable questions were refused
(``degraded``) and the refusal-rate alerts fired for what was a capacity problem. A call over
the limit is refused at once instead, as UNAVAILABLE (retry with backoff, on another replica if
there is one), before it costs any work; health checks and reflection are never refused.
"""

from __future__ import annotations

import grpc
from google.protobuf import duration_pb2
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from candor.runtime.errors import DOMAIN, status_with

RETRY_DELAY_SECONDS = 0.1
"""The retry hint a refused call carries (google.rpc.RetryInfo): a call here takes 5-50 ms."""
REASON = "OVERLOADED"


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


def overloaded_status(service: str, limit: int) -> grpc.Status:
    """UNAVAILABLE with ErrorInfo (reason OVERLOADED, the limit) and a RetryInfo hint.

    Not RESOURCE_EXHAUSTED (what grpc's own ``maximum_concurrent_rpcs`` sends): our ingest
    client, like many, reads that as a message over the size limit and splits its batch, and
    round-robin callers retry UNAVAILABLE on another pod."""
    info = error_details_pb2.ErrorInfo(
        reason=REASON, domain=DOMAIN, metadata={"service": service, "max_in_flight": str(limit)}
    )
    delay = duration_pb2.Duration()
    delay.FromMilliseconds(int(RETRY_DELAY_SECONDS * 1000))
    retry = error_details_pb2.RetryInfo(retry_delay=delay)
    message = (
        f"{service} is overloaded: {limit} calls already in flight on this server; "
        "retry with backoff"
    )
    return status_with(grpc.StatusCode.UNAVAILABLE, message, [info, retry])


def retry_delay_of(error: grpc.RpcError) -> float | None:
    """Client side: seconds to wait before retrying a call a server shed, or None when the
    error is not a shed (ErrorInfo reason OVERLOADED)."""
    status = rpc_status.from_call(error)  # type: ignore[arg-type]
    if status is None:
        return None
    shed, delay = False, RETRY_DELAY_SECONDS
    for detail in status.details:
        if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            info = error_details_pb2.ErrorInfo()
            detail.Unpack(info)
            shed = info.reason == REASON and info.domain == DOMAIN
        elif detail.Is(error_details_pb2.RetryInfo.DESCRIPTOR):
            retry = error_details_pb2.RetryInfo()
            detail.Unpack(retry)
            delay = retry.retry_delay.ToTimedelta().total_seconds()
    return delay if shed else None


def passed_on(error: grpc.RpcError) -> grpc.Status:
    """A downstream's shed, as this server's caller should see it: its code, message and
    details (ErrorInfo naming the service that shed, RetryInfo), unchanged."""
    status = rpc_status.from_call(error)  # type: ignore[arg-type]
    if status is None:
        raise ValueError("the error carries no rich status")
    return rpc_status.to_status(status)
