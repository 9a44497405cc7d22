"""JSON logs, one object per line, carrying the current trace id."""

from __future__ import annotations

import asyncio
import json
import logging
import sys
import time
from typing import Any

from candor.runtime.tracing import current_trace_id

_RESERVED = set(logging.LogRecord("", 0, "", 0, "", (), None).__dict__) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        trace_id = current_trace_id()
        if trace_id:
            out["trace_id"] = trace_id
        for key, value in record.__dict__.items():
            if key not in _RESERVED and not key.startswith("_"):
                out[key] = value
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str)


class ClosedStreamDetachFilter(logging.Filter):
    """Drops OpenTelemetry's "Failed to detach context" when a server stream was closed early.

    The gRPC aio server interceptor holds its span's context across the handler's ``yield``s;
    when a client cancels an ``Ask`` stream, the generator is closed from another context and
    the detach fails (opentelemetry-python-contrib issue 2357, open upstream). The span still
    ends; only the ERROR with its traceback is spurious, and it would page on a routine client
    action. Detach failures with any other cause still log.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        if record.getMessage() != "Failed to detach context" or not record.exc_info:
            return True
        cause = record.exc_info[1].__context__ if record.exc_info[1] else None
        return not isinstance(cause, GeneratorExit | asyncio.CancelledError)


_CLOSED_STREAM_DETACH = ClosedStreamDetachFilter()


def configure_logging(level: str = "INFO") -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    otel = logging.getLogger("opentelemetry.context")
    if _CLOSED_STREAM_DETACH not in otel.filters:
        otel.addFilter(_CLOSED_STREAM_DETACH)
