"""candor.settings: defaults < YAML file < CANDOR_* env, validated and frozen."""

from __future__ import annotations

import dataclasses
import hashlib
from pathlib import Path

import pytest

from candor.settings import ApiKey, SettingsError, load_settings

SHA = hashlib.sha256(b"secret-key").hexdigest()


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "candor.yaml"
    path.write_text(text)
    return path


def test_defaults() -> None:
    s = load_settings(env={})
    assert s.data_dir == "data"
    assert s.log_level == "INFO"
    assert s.auth.enabled is False
    assert s.auth.keys == ()
    assert s.retrieval.candidate_pool == 30
    assert s.retrieval.rrf_k == 60
    assert (s.retrieval.dense_weight, s.retrieval.keyword_weight) == (0.7, 0.3)
    assert (s.retrieval.chunk_tokens, s.retrieval.chunk_overlap_tokens) == (80, 20)
    assert (s.retrieval.server.port, s.retrieval.server.metrics_port) == (50051, 9101)
    assert (s.gate.server.port, s.gate.server.metrics_port) == (50052, 9102)
    assert (s.generator.server.port, s.generator.server.metrics_port) == (50053, 9103)
    assert s.gate.server.host == "127.0.0.1"
    assert s.gate.token_ttl_seconds == 60
    assert s.generator.backend == "extractive"
    assert s.path("keys", "a.pem") == Path("data/keys/a.pem")


def test_settings_are_frozen() -> None:
    s = load_settings(env={})
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.data_dir = "elsewhere"  # type: ignore[misc]


def test_yaml_file_overrides_defaults_and_keeps_siblings(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "log_level: DEBUG\n"
        "retrieval:\n"
        "  candidate_pool: 40\n"
        "  server: {port: 6000}\n"
        "gate:\n"
        "  key_id: candor-2\n",
    )
    s = load_settings(path, env={})
    assert s.log_level == "DEBUG"
    assert s.retrieval.candidate_pool == 40
    assert s.retrieval.top_k == 10  # untouched sibling keeps its default
    assert s.retrieval.server.port == 6000
    assert s.retrieval.server.metrics_port == 9101
    assert s.gate.key_id == "candor-2"
    assert s.gate.server.port == 50052


def test_config_path_from_env(tmp_path: Path) -> None:
    path = write(tmp_path, "retrieval: {top_k: 7}\n")
    assert load_settings(env={"CANDOR_CONFIG": str(path)}).retrieval.top_k == 7


def test_env_overrides_defaults_with_coercion() -> None:
    s = load_settings(
        env={
            "CANDOR_RETRIEVAL__CANDIDATE_POOL": "50",
            "CANDOR_RETRIEVAL__DENSE_WEIGHT": "0.5",
            "CANDOR_LOG_LEVEL": "WARNING",
            "UNRELATED": "x",
        }
    )
    assert s.retrieval.candidate_pool == 50
    assert isinstance(s.retrieval.candidate_pool, int)
    assert s.retrieval.dense_weight == 0.5
    assert s.log_level == "WARNING"


def test_nested_env_override() -> None:
    s = load_settings(env={"CANDOR_GATE__SERVER__PORT": "7001"})
    assert s.gate.server.port == 7001
    assert s.gate.server.metrics_port == 9102
    assert s.retrieval.server.port == 50051


def test_kubernetes_service_link_variables_are_not_settings() -> None:
    links = {
        "CANDOR_GATE_SERVICE_HOST": "10.0.0.5",
        "CANDOR_GATE_SERVICE_PORT": "50052",
        "CANDOR_GATE_SERVICE_PORT_GRPC": "50052",
        "CANDOR_GATE_PORT": "tcp://10.0.0.5:50052",
        "CANDOR_GATE_PORT_50052_TCP": "tcp://10.0.0.5:50052",
        "CANDOR_GATE_PORT_50052_TCP_PROTO": "tcp",
        "CANDOR_GATE_PORT_50052_TCP_PORT": "50052",
        "CANDOR_GATE_PORT_50052_TCP_ADDR": "10.0.0.5",
        "CANDOR_OPENSEARCH_SERVICE_PORT_HTTP": "9200",
    }
    s = load_settings(env={**links, "CANDOR_GATE__SERVER__PORT": "6000"})
    assert s.gate.server.port == 6000
    # A misspelt setting still stops start-up: only the kubelet's names are passed over.
    with pytest.raises(SettingsError, match="datadir"):
        load_settings(env={**links, "CANDOR_DATADIR": "x"})
    with pytest.raises(SettingsError, match="gate_port"):
        load_settings(env={**links, "CANDOR_GATE_PORT": "6000"})


def test_env_beats_yaml(tmp_path: Path) -> None:
    path = write(tmp_path, "retrieval: {candidate_pool: 40, top_k: 8}\n")
    s = load_settings(path, env={"CANDOR_RETRIEVAL__CANDIDATE_POOL": "50"})
    assert s.retrieval.candidate_pool == 50
    assert s.retrieval.top_k == 8


def test_top_level_data_dir_flows_to_retrieval_unless_set() -> None:
    assert load_settings(env={"CANDOR_DATA_DIR": "/srv/c"}).retrieval.data_dir == "/srv/c"
    s = load_settings(env={"CANDOR_DATA_DIR": "/srv/c", "CANDOR_RETRIEVAL__DATA_DIR": "/x"})
    assert s.retrieval.data_dir == "/x"


@pytest.mark.parametrize(
    ("value", "expected"), [("true", True), ("ON", True), ("0", False), ("no", False)]
)
def test_boolean_env_values(value: str, expected: bool) -> None:
    env = {"CANDOR_AUTH__ENABLED": value}
    if expected:
        env["CANDOR_AUTH__KEYS"] = ""  # still no keys: must be rejected
        with pytest.raises(SettingsError, match=r"auth\.enabled needs"):
            load_settings(env=env)
    else:
        assert load_settings(env=env).auth.enabled is False


@pytest.mark.parametrize(
    ("env", "match"),
    [
        ({"CANDOR_RETRIEVAL__CANDIDATE_POOLS": "5"}, "unknown settings"),
        ({"CANDOR_NOPE": "1"}, "unknown settings"),
        ({"CANDOR_GATE__SERVER__PROT": "1"}, "unknown settings"),
        ({"CANDOR_RETRIEVAL__CANDIDATE_POOL": "lots"}, "expected int"),
        ({"CANDOR_RETRIEVAL__DENSE_WEIGHT": "heavy"}, "expected float"),
        ({"CANDOR_AUTH__ENABLED": "maybe"}, "not a boolean"),
        ({"CANDOR_RETRIEVAL__CANDIDATE_POOL": "0"}, "candidate_pool"),
        ({"CANDOR_RETRIEVAL__CHUNK_OVERLAP_TOKENS": "80"}, "chunk_overlap_tokens"),
        ({"CANDOR_RETRIEVAL__CHUNK_OVERLAP_TOKENS": "-1"}, "chunk_overlap_tokens"),
        ({"CANDOR_GATE__TOKEN_TTL_SECONDS": "0"}, "token_ttl_seconds"),
        ({"CANDOR_AUTH__ENABLED": "true"}, "auth.enabled needs"),
        (
            {"CANDOR_RETRIEVAL__SERVER__MAX_CONNECTION_AGE_GRACE_SECONDS": "-1"},
            r"retrieval\.server\.max_connection_age_grace_seconds must be >= 0",
        ),
        ({"CANDOR_GATE__SERVER__MAX_CONNECTION_AGE_SECONDS": "0"}, "max_connection_age_seconds"),
        ({"CANDOR_GENERATOR__SERVER__GRACE_SECONDS": "-5"}, r"generator\.server\.grace"),
        ({"CANDOR_GATE__SERVER__MAX_MESSAGE_BYTES": "10"}, "max_message_bytes must be between"),
        # grpc's channel arguments are C ints: 2**31 failed the server's creation instead.
        ({"CANDOR_GATE__SERVER__MAX_MESSAGE_BYTES": str(2**31)}, "max_message_bytes must be"),
        ({"CANDOR_GATE__SERVER__MAX_IN_FLIGHT": "-1"}, r"gate\.server\.max_in_flight"),
        ({"CANDOR_GATE__MAX_IN_FLIGHT_PER_TENANT": "-1"}, r"gate\.max_in_flight_per_tenant"),
        (
            {"CANDOR_GENERATOR__MAX_IN_FLIGHT_PER_TENANT": "-2"},
            r"generator\.max_in_flight_per_tenant must be >= 0",
        ),
        (
            {"CANDOR_GATE__MAX_QUERY_CHARS": "5000"},
            r"gate\.max_query_chars \(5000\) must not exceed retrieval\.max_query_chars \(2000\)",
        ),
        (
            {
                "CANDOR_GATE__MAX_QUERY_CHARS": "3000",
                "CANDOR_RETRIEVAL__MAX_QUERY_CHARS": "3000",
            },
            r"must not exceed generator\.max_query_chars \(2000\)",
        ),
    ],
)
def test_invalid_env_is_rejected(env: dict[str, str], match: str) -> None:
    with pytest.raises(SettingsError, match=match):
        load_settings(env=env)


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("retrieval: {colour: blue}\n", "unknown settings"),
        ("retrieval: {chunk_tokens: 10, chunk_overlap_tokens: 10}\n", "chunk_overlap_tokens"),
        ("auth: {enabled: true}\n", "auth.enabled needs"),
        ("gate: 5\n", "expected a mapping"),
        ("- a\n- b\n", "top level must be a mapping"),
        ("retrieval: [\n", "cannot read settings file"),
        ("auth: {keys: [{name: a, sha256: abc, tenants: [t]}]}\n", "64 hex"),
        # Read as text, a null host list was a list of one host named "null".
        ("retrieval: {opensearch: {hosts: null}}\n", r"no value \(null or empty\)"),
        ("retrieval: {opensearch: {hosts: [a, ~]}}\n", r"hosts\[1\]: no value"),
        ("retrieval: {top_k:}\n", r"no value \(null or empty\)"),
        # A null key beside an unknown one was a TypeError (None sorted among names).
        ("null: 1\nfoo: 2\n", r"unknown settings \['None', 'foo'\]"),
        ("data_dir: x\nretrieval:\n", "settings.retrieval: expected a mapping"),
        ("retrieval: {top_k: 7.5}\n", "expected int"),
    ],
)
def test_invalid_yaml_is_rejected(tmp_path: Path, text: str, match: str) -> None:
    with pytest.raises(SettingsError, match=match):
        load_settings(write(tmp_path, text), env={})


def test_missing_file_is_a_settings_error(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match="cannot read settings file"):
        load_settings(tmp_path / "absent.yaml", env={})


def test_auth_keys_parsed_from_yaml(tmp_path: Path) -> None:
    other = "b" * 64
    path = write(
        tmp_path,
        "auth:\n"
        "  enabled: true\n"
        "  keys:\n"
        f"    - {{name: billing, sha256: {SHA}, tenants: [acme, globex]}}\n"
        f"    - {{name: ops, sha256: {other}, tenants: '*'}}\n",
    )
    s = load_settings(path, env={})
    assert s.auth.enabled is True
    assert s.auth.keys == (
        ApiKey(name="billing", sha256=SHA, tenants=("acme", "globex")),
        ApiKey(name="ops", sha256=other, tenants=("*",)),
    )


def test_empty_yaml_file_means_defaults(tmp_path: Path) -> None:
    assert load_settings(write(tmp_path, ""), env={}) == load_settings(env={})


def test_missing_required_key_field_is_a_settings_error(tmp_path: Path) -> None:
    path = write(tmp_path, f"auth: {{enabled: true, keys: [{{name: a, sha256: {SHA}}}]}}\n")
    with pytest.raises(SettingsError, match="tenants"):
        load_settings(path, env={})


def test_llm_features_are_off_by_default() -> None:
    s = load_settings(env={})
    rewrite, questions, translation = (
        s.retrieval.rewrite,
        s.retrieval.hypothetical,
        s.gate.translation,
    )
    assert (rewrite.backend, questions.backend, translation.backend) == ("none",) * 3
    assert (rewrite.timeout_seconds, rewrite.max_output_tokens) == (0.3, 64)
    assert (questions.timeout_seconds, questions.questions_per_passage) == (20.0, 3)
    assert questions.max_output_tokens == 256
    assert (translation.timeout_seconds, translation.cache_size) == (0.5, 256)


def test_llm_features_from_env() -> None:
    s = load_settings(
        env={
            "CANDOR_RETRIEVAL__REWRITE__BACKEND": "openai_compat",
            "CANDOR_RETRIEVAL__REWRITE__BASE_URL": "http://vllm:8000/v1",
            "CANDOR_RETRIEVAL__REWRITE__MODEL": "small",
            "CANDOR_RETRIEVAL__REWRITE__TIMEOUT_SECONDS": "0.2",
            "CANDOR_RETRIEVAL__HYPOTHETICAL__BACKEND": "openai_compat",
            "CANDOR_RETRIEVAL__HYPOTHETICAL__BASE_URL": "http://vllm:8000/v1",
            "CANDOR_RETRIEVAL__HYPOTHETICAL__MODEL": "big",
            "CANDOR_RETRIEVAL__HYPOTHETICAL__QUESTIONS_PER_PASSAGE": "5",
            "CANDOR_GATE__TRANSLATION__BACKEND": "openai_compat",
            "CANDOR_GATE__TRANSLATION__BASE_URL": "http://vllm:8000/v1",
            "CANDOR_GATE__TRANSLATION__MODEL": "small",
            "CANDOR_GATE__TRANSLATION__API_KEY_FILE": "/var/run/secrets/llm/api-key",
        }
    )
    assert (s.retrieval.rewrite.model, s.retrieval.rewrite.timeout_seconds) == ("small", 0.2)
    assert s.retrieval.rewrite.max_words == 32  # untouched sibling keeps its default
    assert s.retrieval.hypothetical.questions_per_passage == 5
    assert s.gate.translation.api_key_file == "/var/run/secrets/llm/api-key"


@pytest.mark.parametrize(
    ("env", "match"),
    [
        ({"CANDOR_RETRIEVAL__REWRITE__BACKEND": "gpt"}, "rewrite.backend must be none or"),
        ({"CANDOR_RETRIEVAL__REWRITE__BACKEND": "openai_compat"}, r"rewrite\.base_url is required"),
        (
            {
                "CANDOR_GATE__TRANSLATION__BACKEND": "openai_compat",
                "CANDOR_GATE__TRANSLATION__BASE_URL": "http://x/v1",
            },
            r"translation\.model is required",
        ),
        ({"CANDOR_RETRIEVAL__REWRITE__TIMEOUT_SECONDS": "0"}, "rewrite.timeout_seconds"),
        ({"CANDOR_RETRIEVAL__HYPOTHETICAL__QUESTIONS_PER_PASSAGE": "0"}, "questions_per_passage"),
        ({"CANDOR_GATE__TRANSLATION__TIMEOUT_SECONDS": "-1"}, "translation.timeout_seconds"),
    ],
)
def test_invalid_llm_feature_settings_are_rejected(env: dict[str, str], match: str) -> None:
    with pytest.raises(SettingsError, match=match):
        load_settings(env=env)


def test_the_model_cache_variable_is_a_setting_shared_with_retrieval() -> None:
    # The image sets CANDOR_MODEL_CACHE; as an unknown top-level key it used to stop start-up.
    s = load_settings(env={"CANDOR_MODEL_CACHE": "/opt/candor/models"})
    assert s.model_cache == s.retrieval.model_cache == "/opt/candor/models"
    assert load_settings(env={}).retrieval.model_cache == ""


def test_the_opensearch_timeout_default_fits_inside_the_arm_timeout() -> None:
    # A longer request timeout than the arm's would only hold a connection the arm gave up on.
    r = load_settings(env={}).retrieval
    assert r.opensearch.timeout_seconds <= r.arm_timeout_seconds


def _keys(tmp_path: Path, entries: str) -> Path:
    return write(tmp_path, f"auth:\n  enabled: true\n  keys:\n{entries}")


def test_tenant_ids_are_read_as_written_not_as_yaml_numbers(tmp_path: Path) -> None:
    # YAML 1.1 read 0123 as the octal 83 and no as False: the key was refused its own tenant
    # and allowed tenant 83's documents.
    path = _keys(
        tmp_path,
        f"    - {{name: a, sha256: {SHA}, tenants: [0123, no, 1.10, 007, 1_000]}}\n"
        f"    - {{name: b, sha256: {'b' * 64}, tenants: 'acme, beta'}}\n",
    )
    s = load_settings(path, env={})
    assert s.auth.keys[0].tenants == ("0123", "no", "1.10", "007", "1_000")
    assert s.auth.keys[1].tenants == ("acme", "beta")  # " beta" could never be used


def test_typed_settings_still_convert_their_text(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "auth: {enabled: no}\nretrieval: {top_k: 7, arm_timeout_seconds: 1.5}\n"
        "gate: {reader: {enabled: off}}\n",
    )
    s = load_settings(path, env={})
    assert (s.auth.enabled, s.retrieval.top_k, s.retrieval.arm_timeout_seconds) == (False, 7, 1.5)
    assert s.gate.reader.enabled is False


@pytest.mark.parametrize(
    ("entries", "match"),
    [
        (
            f"    - {{name: a, sha256: {SHA}, tenants: [acme]}}\n"
            f"    - {{name: b, sha256: {SHA.upper()}, tenants: [beta]}}\n",
            r"the same key as a; give it one entry",
        ),
        (f"    - {{name: a, sha256: {'z' * 64}, tenants: [acme]}}\n", "64 hex chars"),
        (
            f"    - {{name: a, sha256: {hashlib.sha256(b'').hexdigest()}, tenants: [acme]}}\n",
            "hash of an empty key",
        ),
        (f"    - {{name: a, sha256: {SHA}, tenants: []}}\n", "tenants is empty"),
        (f"    - {{name: a, sha256: {SHA}, tenants: ['Acme Corp']}}\n", "'Acme Corp' is not a"),
        (f"    - {{name: a, sha256: {SHA}, tenants: ['']}}\n", "'' is not a tenant id"),
        (f"    - {{name: '', sha256: {SHA}, tenants: [acme]}}\n", r"name is required"),
    ],
)
def test_a_mistyped_key_entry_fails_start_up_naming_it(
    tmp_path: Path, entries: str, match: str
) -> None:
    with pytest.raises(SettingsError, match=match):
        load_settings(_keys(tmp_path, entries), env={})


def test_a_rotation_lists_the_new_key_beside_the_old_under_one_name(tmp_path: Path) -> None:
    # operations.md: add the new key's sha256 next to the old one, then remove the old one.
    path = _keys(
        tmp_path,
        f"    - {{name: billing, sha256: {SHA}, tenants: [acme]}}\n"
        f"    - {{name: billing, sha256: {'b' * 64}, tenants: [acme]}}\n",
    )
    assert [k.name for k in load_settings(path, env={}).auth.keys] == ["billing", "billing"]


def test_an_empty_text_setting_is_the_empty_text(tmp_path: Path) -> None:
    # A template's unset value: `api_key_file:` with nothing after it.
    s = load_settings(write(tmp_path, "retrieval: {opensearch: {index: ~, password:}}\n"), env={})
    assert (s.retrieval.opensearch.index, s.retrieval.opensearch.password) == ("", "")


def test_two_keys_of_one_name_must_list_the_same_tenants(tmp_path: Path) -> None:
    path = _keys(
        tmp_path,
        f"    - {{name: billing, sha256: {SHA}, tenants: [acme]}}\n"
        f"    - {{name: billing, sha256: {'b' * 64}, tenants: [beta]}}\n",
    )
    with pytest.raises(SettingsError, match="another key of this name lists other tenants"):
        load_settings(path, env={})


def test_an_integer_written_as_a_float_still_loads(tmp_path: Path) -> None:
    s = load_settings(write(tmp_path, "retrieval: {top_k: 7.0, candidate_pool: 1e2}\n"), env={})
    assert (s.retrieval.top_k, s.retrieval.candidate_pool) == (7, 100)
