"""Field checks every service applies to the same kinds of input."""

from __future__ import annotations

import re

from candor.runtime.errors import FieldViolations

_TENANT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}$")


def check_tenant(tenant: str, v: FieldViolations, field: str = "tenant") -> None:
    if not tenant:
        v.add(field, "required")
    elif not _TENANT.match(tenant):
        v.add(field, "must be 1-64 characters of letters, digits, '_', '.', '-'")


def check_query(query: str, max_chars: int, v: FieldViolations, field: str = "query") -> None:
    if not query.strip():
        v.add(field, "required and must not be blank")
    elif len(query) > max_chars:
        v.add(field, f"must be at most {max_chars} characters (got {len(query)})")
