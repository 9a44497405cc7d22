"""Rich gRPC errors: google.rpc.Status with BadRequest field violations or ErrorInfo."""

from __future__ import annotations

from collections.abc import Iterable
from typing import NoReturn

import grpc
from google.protobuf import any_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_status import rpc_status

DOMAIN = "candor.dev"


class FieldViolations:
    """Collects bad-input findings so one response lists them all."""

    def __init__(self) -> None:
        self.items: list[tuple[str, str]] = []

    def add(self, field: str, description: str) -> None:
        self.items.append((field, description))

    def __bool__(self) -> bool:
        return bool(self.items)


def status_with(code: grpc.StatusCode, message: str, details: Iterable[object]) -> grpc.Status:
    """A rich status: ``code`` and ``message`` with ``details`` (google.rpc messages) packed."""
    packed = []
    for detail in details:
        any_msg = any_pb2.Any()
        any_msg.Pack(detail)  # type: ignore[arg-type]
        packed.append(any_msg)
    proto = status_pb2.Status(code=getattr(code_pb2, code.name), message=message, details=packed)
    return rpc_status.to_status(proto)


MAX_VIOLATIONS = 20
"""Violations listed in one error. Status, message and details travel in the trailers, which
gRPC caps at 8-16 KiB: 30 bad documents (of 500 allowed) overflowed them, and the caller got
RESOURCE_EXHAUSTED with no violations at all."""
MAX_TEXT = 200
"""Characters kept of a field path or description (they may quote the caller's input)."""
MAX_SUMMARY = 1000


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def bad_request_status(
    violations: FieldViolations, message: str = "invalid request"
) -> grpc.Status:
    items = [(_cut(f, MAX_TEXT), _cut(d, MAX_TEXT)) for f, d in violations.items[:MAX_VIOLATIONS]]
    if len(violations.items) > MAX_VIOLATIONS:
        more = len(violations.items) - MAX_VIOLATIONS
        items.append(("", f"{more} more violation(s) not listed; fix these and retry"))
    detail = error_details_pb2.BadRequest(
        field_violations=[
            error_details_pb2.BadRequest.FieldViolation(field=f, description=d) for f, d in items
        ]
    )
    summary = _cut("; ".join(f"{f}: {d}" if f else d for f, d in items), MAX_SUMMARY)
    return status_with(grpc.StatusCode.INVALID_ARGUMENT, f"{message}: {summary}", [detail])


def error_info_status(
    code: grpc.StatusCode, reason: str, message: str, metadata: dict[str, str] | None = None
) -> grpc.Status:
    detail = error_details_pb2.ErrorInfo(reason=reason, domain=DOMAIN, metadata=metadata or {})
    return status_with(code, message, [detail])


async def abort_with(context: grpc.aio.ServicerContext, status: grpc.Status) -> NoReturn:
    """Abort the call with a rich status (details travel in grpc-status-details-bin)."""
    await context.abort_with_status(status)
    raise AssertionError("unreachable: abort_with_status raises")


async def abort_invalid(context: grpc.aio.ServicerContext, violations: FieldViolations) -> NoReturn:
    await abort_with(context, bad_request_status(violations))


async def abort_info(
    context: grpc.aio.ServicerContext,
    code: grpc.StatusCode,
    reason: str,
    message: str,
    metadata: dict[str, str] | None = None,
) -> NoReturn:
    await abort_with(context, error_info_status(code, reason, message, metadata))


def field_violations_of(error: grpc.RpcError) -> list[tuple[str, str]]:
    """Client side: the field violations carried by an INVALID_ARGUMENT error."""
    status = rpc_status.from_call(error)  # type: ignore[arg-type]
    out: list[tuple[str, str]] = []
    if status is None:
        return out
    for detail in status.details:
        if detail.Is(error_details_pb2.BadRequest.DESCRIPTOR):
            br = error_details_pb2.BadRequest()
            detail.Unpack(br)
            out.extend((v.field, v.description) for v in br.field_violations)
    return out


def error_info_of(error: grpc.RpcError) -> error_details_pb2.ErrorInfo | None:
    """Client side: the ErrorInfo detail of an error (reason and metadata), if it has one."""
    status = rpc_status.from_call(error)  # type: ignore[arg-type]
    if status is None:
        return None
    for detail in status.details:
        if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            info = error_details_pb2.ErrorInfo()
            detail.Unpack(info)
            return info
    return None


def error_reason_of(error: grpc.RpcError) -> str:
    """Client side: the ErrorInfo reason of an error, or empty."""
    info = error_info_of(error)
    return str(info.reason) if info is not None else ""


def downstream_status(error: grpc.RpcError) -> grpc.Status | None:
    """A downstream call's rich status (code, message, details) as it sent it, or None when
    it carries none (the transport's own failures) or details that disagree with its code."""
    try:
        status = rpc_status.from_call(error)  # type: ignore[arg-type]
    except ValueError:
        return None
    return rpc_status.to_status(status) if status is not None else None


async def relay(context: grpc.aio.ServicerContext, error: grpc.RpcError) -> NoReturn:
    """End the call as a downstream call ended: its code, message and rich details unchanged
    (the transport's own failures have no details)."""
    if (status := downstream_status(error)) is not None:
        await abort_with(context, status)
    await context.abort(error.code(), error.details())  # type: ignore[attr-defined]
    raise AssertionError("unreachable: abort raises")
