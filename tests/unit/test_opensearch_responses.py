"""How the OpenSearch store reads a delete-by-query's answer (200 does not mean all deleted)."""

from __future__ import annotations

import pytest

from retrieval_svc.stores.opensearch_store import OpenSearchWriteError, check_deleted_all


def test_a_delete_that_removed_everything_it_matched_passes() -> None:
    check_deleted_all({"deleted": 3, "failures": [], "version_conflicts": 0}, "doc")
    check_deleted_all({"deleted": 0}, "doc")


@pytest.mark.parametrize(
    ("response", "said"),
    [
        (
            {"deleted": 1, "failures": [{"shard": 0, "reason": {"type": "es_rejected"}}]},
            "1 failure(s), 0 version conflict(s); first failure: {'shard': 0",
        ),
        ({"deleted": 2, "failures": [], "version_conflicts": 1}, "0 failure(s), 1 version"),
    ],
)
def test_chunks_left_behind_fail_the_write(response: dict[str, object], said: str) -> None:
    with pytest.raises(OpenSearchWriteError, match="left some of document 'doc' in place") as e:
        check_deleted_all(response, "document 'doc'")
    assert said in str(e.value)
