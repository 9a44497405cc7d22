"""Replies that must fit the server's send limit (``server.max_message_bytes``)."""

from __future__ import annotations

from google.protobuf.message import Message

TRAILER_BYTES = 64
"""Left free under the limit for the small fields a caller sets after trimming (a count)."""


def _varint_len(n: int) -> int:
    return max(1, (n.bit_length() + 6) // 7)


def trim_to_fit(message: Message, field: str, limit: int) -> int:
    """Drop the last items of the repeated message ``field`` until ``message`` serializes to at
    most ``limit - TRAILER_BYTES`` bytes; returns how many were dropped.

    Items are best first, so the lowest-ranked go: a reply over the limit would otherwise fail
    as RESOURCE_EXHAUSTED at the transport, after all the work was done.
    """
    budget = limit - TRAILER_BYTES
    size = message.ByteSize()
    if size <= budget:
        return 0
    items = getattr(message, field)
    tag = _varint_len(message.DESCRIPTOR.fields_by_name[field].number << 3)
    keep = len(items)
    while keep and size > budget:
        keep -= 1
        item = items[keep].ByteSize()
        size -= tag + _varint_len(item) + item
    dropped = len(items) - keep
    del items[keep:]
    return dropped
