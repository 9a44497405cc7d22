"""Fixtures shared by the suites that run against the real OpenSearch node."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opensearchpy import OpenSearch


@pytest.fixture
def client(opensearch_url: str) -> Iterator[OpenSearch]:
    """A plain client of the test node, for what the store under test does not do itself."""
    c = OpenSearch(hosts=[opensearch_url], timeout=30)
    yield c
    c.close()
