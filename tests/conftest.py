"""Fixtures shared across test folders: the real OpenSearch node (started once per session)."""

pytest_plugins = ["tests.opensearch_node_fixture"]
