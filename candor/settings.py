"""Typed, frozen settings for every component, loaded once at start-up from YAML + env.

Precedence: defaults here < the YAML file (``CANDOR_CONFIG``) < ``CANDOR_<SECTION>__<FIELD>`` env.
Nothing below reads the environment after start-up.
"""

from __future__ import annotations

import dataclasses
import os
import re
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml


class SettingsError(ValueError):
    """Raised when settings cannot be parsed or fail validation."""


@dataclass(frozen=True)
class ApiKey:
    """One caller credential; the key itself is never stored, only its sha256."""

    name: str
    sha256: str
    """Hex sha256 of the key the caller sends in the ``x-api-key`` metadata."""
    tenants: tuple[str, ...]
    """Tenants this key may use; ``"*"`` means any."""


@dataclass(frozen=True)
class AuthSettings:
    enabled: bool = True
    """Off only for the embedded default; start-up logs a loud warning."""
    keys: tuple[ApiKey, ...] = ()


@dataclass(frozen=True)
class ServerSettings:
    """Where one service listens."""

    host: str = "127.0.0.1"
    port: int = 0
    metrics_port: int = 0
    """0 disables the Prometheus endpoint."""
    grace_seconds: float = 10.0
    """How long in-flight calls may run after SIGTERM before they are cancelled."""
    drain_delay_seconds: float = 0.5
    """Time between NOT_SERVING and closing the listener, so load balancers notice first."""
    max_message_bytes: int = 4 * 1024 * 1024
    max_connection_age_seconds: float = 300.0
    """Clients reconnect this often, so round-robin callers notice pods an autoscaler adds."""
    max_connection_age_grace_seconds: float = 300.0
    """How long calls already running on a connection past its age may finish before it is
    closed under them (UNAVAILABLE): at least the longest call clients make (``candor ingest``
    gives a batch 300 s). New calls go to a new connection meanwhile."""
    max_in_flight: int = 0
    """Calls to this service running at once; one more is refused UNAVAILABLE (reason
    OVERLOADED, a retry hint) before any work. 0: no limit. Health checks never count."""


@dataclass(frozen=True)
class QdrantSettings:
    """Production dense arm."""

    url: str = "http://127.0.0.1:6333"
    prefer_grpc: bool = True
    grpc_port: int = 6334
    api_key: str = ""
    """Prefer api_key_file (a mounted Secret); read once at start-up."""
    api_key_file: str = ""
    https: bool = False
    collection: str = "candor_chunks"
    timeout_seconds: float = 5.0
    """Each request's, writes included; a search is given retrieval.arm_timeout_seconds
    instead (rounded up to whole seconds), when the arm gives up on it anyway (over gRPC, the
    default; over REST the client still waits this long, Qdrant itself stops sooner)."""


@dataclass(frozen=True)
class OpenSearchSettings:
    """Production keyword arm."""

    hosts: tuple[str, ...] = ("http://127.0.0.1:9200",)
    username: str = ""
    password: str = ""
    password_file: str = ""
    verify_certs: bool = True
    ca_certs: str = ""
    index: str = "candor-chunks"
    index_per_tenant: bool = False
    """One index per tenant (``<index>-tenant-<name>-<hash>``), so that a tenant's BM25
    statistics, and so its keyword scores, are its own; off: one index holds every tenant."""
    timeout_seconds: float = 2.0
    """At most retrieval.arm_timeout_seconds: a slower request is abandoned by the arm anyway."""


@dataclass(frozen=True)
class CohereEmbedSettings:
    """Cohere embed (when retrieval.embedder is cohere)."""

    model: str = "embed-multilingual-v3.0"
    dimension: int = 0
    """0 means the model's default."""
    api_key: str = ""
    api_key_file: str = ""
    base_url: str = ""
    timeout_seconds: float = 15.0
    max_retries: int = 4


@dataclass(frozen=True)
class ChatEndpointSettings:
    """An optional OpenAI-compatible ``/chat/completions`` endpoint (see ``candor.chat``)."""

    backend: str = "none"
    """none (off) or openai_compat."""
    base_url: str = ""
    """Ends before ``/chat/completions``, e.g. ``http://vllm:8000/v1``."""
    model: str = ""
    api_key: str = ""
    api_key_file: str = ""
    """Wins over api_key (a mounted Secret); read once at start-up."""


@dataclass(frozen=True)
class RewriteSettings(ChatEndpointSettings):
    """Seed 001's query rewrite: the question becomes a standalone search query."""

    timeout_seconds: float = 0.3
    """Budget per Retrieve, capped by the caller's deadline; on expiry the raw query is used."""
    max_output_tokens: int = 64
    max_words: int = 32
    """A rewrite longer than this is rejected."""
    max_growth: float = 4.0
    """A rewrite with more than this many times the query's words is rejected."""
    min_similarity: float = 0.4
    """A rewrite whose query embedding is less similar (cosine) to the question's is rejected:
    the gate judges the caller's question, so its evidence must be for that question.
    Measured with MiniLM: spelling and acronym fixes 0.62-0.80, an unrelated query ~0."""


@dataclass(frozen=True)
class HypotheticalSettings(ChatEndpointSettings):
    """LLM-written questions indexed with each passage (``hypothetical_questions`` on upsert)."""

    timeout_seconds: float = 20.0
    """Per passage, capped by the caller's deadline; on failure the passage has no questions."""
    questions_per_passage: int = 3
    max_output_tokens: int = 256
    max_passage_chars: int = 6000
    """Longer passages are cut before they are sent."""
    concurrency: int = 4
    """Passages in flight at once per UpsertDocuments call."""
    min_similarity: float = 0.2
    """A question whose embedding is less similar (cosine) to its passage's is dropped: the
    question's retrieval scores stand in for the passage's at the gate, so a question the model
    wrote about something else (told to by text in the passage, say) must not be indexed.
    Measured with MiniLM on the help centre: hand-written questions 0.18-0.76 (median 0.55)
    against their article; unrelated questions -0.02-0.10."""


@dataclass(frozen=True)
class RetrievalSettings:
    server: ServerSettings = ServerSettings(port=50051, metrics_port=9101)
    data_dir: str = "data"
    """Where the embedded stores (Qdrant Edge, tantivy) keep their files."""
    dense_backend: str = "edge"
    """edge (embedded Qdrant Edge) or qdrant."""
    keyword_backend: str = "tantivy"
    """tantivy (embedded) or opensearch."""
    embedder: str = "minilm"
    """minilm (bundled English), multilingual (bundled), or cohere."""
    qdrant: QdrantSettings = QdrantSettings()
    opensearch: OpenSearchSettings = OpenSearchSettings()
    cohere: CohereEmbedSettings = CohereEmbedSettings()
    candidate_pool: int = 30
    top_k: int = 10
    rrf_k: int = 60
    dense_weight: float = 0.7
    keyword_weight: float = 0.3
    arm_timeout_seconds: float = 2.0
    max_query_chars: int = 2000
    max_documents_per_call: int = 500
    max_document_chars: int = 1_000_000
    chunk_tokens: int = 80
    """Child chunk budget in WordPiece tokens of body text (heading and title come on top)."""
    chunk_overlap_tokens: int = 20
    edge_index_threshold: int = 10_000
    """Embedded dense arm: build HNSW at start-up once this many vectors are unindexed."""
    min_free_disk_mb: int = 256
    """Embedded stores: refuse writes (and start-up) unless their filesystem keeps this much
    free beyond the write; Qdrant Edge preallocates ~150 MiB of sparse files and dies by SIGBUS
    when it fills one on a full disk. 0 turns the check off."""
    embed_threads: int = 1
    embed_batch_size: int = 32
    rewrite: RewriteSettings = RewriteSettings()
    writer_target: str = ""
    """The one retrieval pod that writes (e.g. ``dns:///candor-retrieval-writer:50051``): this
    pod sends UpsertDocuments and DeleteDocuments there and relays the reply, because writes to
    one document from two pods on shared stores lost it. Empty: this pod writes. Only with
    Qdrant and OpenSearch: a pod on embedded stores reads only what it wrote itself."""
    hypothetical: HypotheticalSettings = HypotheticalSettings()
    embed_precision: str = "q8"
    """minilm only: q8 (dynamic int8, derived once from the wheel and cached) or fp32."""
    model_cache: str = ""
    """Where the derived q8 graph is cached; empty: ``$XDG_CACHE_HOME/candor/models``."""


@dataclass(frozen=True)
class RerankerSettings:
    """Optional reranker (gate_svc.rerank); the gate works without one."""

    backend: str = "none"
    """none, cohere, or llm (seed 002's evidence-required rerank on an OpenAI-compatible API)."""
    timeout_seconds: float = 1.5
    """Whole budget per decision, retry included; capped by the caller's deadline."""
    max_candidates: int = 10
    model: str = ""
    base_url: str = ""
    api_key: str = ""
    api_key_file: str = ""
    max_retries: int = 1
    backoff_seconds: float = 0.2
    answers_at: float = 0.8
    partial_at: float = 0.5
    supplement_at: float = 0.15
    max_tokens_per_doc: int = 0
    max_output_tokens: int = 1024
    max_chars_per_candidate: int = 2000


@dataclass(frozen=True)
class ReaderSettings:
    """The bundled evidence reader (gate_svc.reader): does a top chunk answer the question."""

    enabled: bool = True
    """Off: the ``reader`` signal is never computed; a policy that weighs it then refuses."""
    top_k: int = 1
    """Top candidates (by fused rank) the reader reads per decision. One: in 5-fold CV on the
    HaluEval train split, reading the top chunk separated best (reader v4: AUROC 0.892, 0.887 at
    2, and 0.731 against 0.732 on the Disfl-QA holdout; v3: 0.891, 0.887; v2: 0.881, 0.875;
    v1: 0.865, 0.862, 0.857 at 3) and costs one read."""
    threads: int = 1
    """ONNX Runtime threads for the reader; reads are serialised, one at a time."""
    model: str = "v4"
    """Which bundled reader (``gate_svc/models/reader-<model>.onnx``): ``v4``, or ``v5``, the
    12-layer reader that reads near misses and other domains better at about twice the cost
    per read. A policy names the reader it was fitted on (``calibrated.reader_model``), so
    ``v5`` goes with ``gate_svc/policies/reader-v5-pooled.yaml`` (docs/operations.md)."""
    model_path: str = ""
    """Another reader file of the same shape, overriding ``model``; empty means bundled."""
    timeout_seconds: float = 0.5
    """Per decision, capped by the caller's deadline; on timeout ``reader_fallback`` is set."""


@dataclass(frozen=True)
class TranslationSettings(ChatEndpointSettings):
    """Refusal messages for languages the table lacks, translated from English (optional)."""

    timeout_seconds: float = 0.5
    """Per refusal, capped by the caller's deadline; on failure the English message is used."""
    max_output_tokens: int = 128
    cache_size: int = 256
    """Translations kept in memory, per (language, message)."""


@dataclass(frozen=True)
class GateSettings:
    server: ServerSettings = ServerSettings(port=50052, metrics_port=9102, max_in_flight=32)
    """max_in_flight 32: about what two cores run before queued calls' evidence reads time out
    (0.5 s at 75-95 Evaluate calls a second; docs/benchmarks.md "Load shedding")."""
    policy_path: str = ""
    """YAML threshold config; empty means the packaged default."""
    shadow_policy_path: str = ""
    """Optional second config evaluated beside the active one and only counted."""
    policy_poll_seconds: float = 2.0
    """How often the config files are checked for a new version (0 disables hot reload)."""
    retrieval_target: str = "127.0.0.1:50051"
    generator_target: str = "127.0.0.1:50053"
    load_balancing: str = "round_robin"
    """gRPC client policy for the retrieval and generator channels (use dns:/// targets on a
    headless Service); pick_first keeps one connection."""
    signing_key_path: str = ""
    """Ed25519 private key (PEM). Empty: created under data_dir/keys on first start."""
    key_id: str = "candor-1"
    issuer: str = "candor-gate"
    audience: str = "candor-generator"
    token_ttl_seconds: int = 60
    retrieval_timeout_seconds: float = 3.0
    generation_timeout_seconds: float = 30.0
    max_query_chars: int = 2000
    max_in_flight_per_tenant: int = 0
    """Decisions one tenant may have in flight on a gate pod; one more is refused
    RESOURCE_EXHAUSTED (reason TENANT_LIMIT, a retry hint), so one tenant's burst cannot take
    every one of server.max_in_flight's slots from the others. 0: no per-tenant limit."""
    reranker: RerankerSettings = RerankerSettings()
    reader: ReaderSettings = ReaderSettings()
    translation: TranslationSettings = TranslationSettings()


@dataclass(frozen=True)
class LLMSettings:
    """Shared by the HTTP LLM backends."""

    timeout_seconds: float = 30.0
    """Per HTTP phase and per gap between streamed chunks."""
    connect_timeout_seconds: float = 5.0
    max_retries: int = 2
    """Retries happen only before the stream starts."""
    backoff_seconds: float = 0.5
    backoff_max_seconds: float = 8.0
    max_output_tokens: int = 512
    temperature: float = 0.0


@dataclass(frozen=True)
class CohereChatSettings:
    model: str = "command-a-03-2025"
    api_key: str = ""
    api_key_file: str = ""
    """Wins over api_key; neither set means CO_API_KEY."""
    base_url: str = ""


@dataclass(frozen=True)
class OpenAICompatSettings:
    base_url: str = "http://127.0.0.1:8000/v1"
    model: str = ""
    api_key: str = ""
    api_key_file: str = ""
    include_usage: bool = True


@dataclass(frozen=True)
class GeneratorSettings:
    server: ServerSettings = ServerSettings(port=50053, metrics_port=9103)
    public_keys_dir: str = ""
    """Directory of ``<kid>.pub.pem`` files. Empty: data_dir/keys."""
    issuer: str = "candor-gate"
    audience: str = "candor-generator"
    clock_skew_seconds: int = 5
    backend: str = "extractive"
    """extractive (offline, default), cohere or openai_compat."""
    max_sentences: int = 3
    prompts_path: str = ""
    """Versioned prompt templates; empty means generator_svc/prompts_default.yaml."""
    context_budget_tokens: int = 3000
    groundedness: bool = False
    groundedness_min_confidence: float = 0.0
    groundedness_max_confidence: float = 1.0
    llm: LLMSettings = LLMSettings()
    cohere: CohereChatSettings = CohereChatSettings()
    openai_compat: OpenAICompatSettings = OpenAICompatSettings()
    max_query_chars: int = 2000
    max_in_flight_per_tenant: int = 0
    """Answers one tenant may have being written on a generator pod; one more is refused
    RESOURCE_EXHAUSTED (reason TENANT_LIMIT, a retry hint) before its pass token is spent, so
    one tenant's burst cannot take a whole LLM rate limit. 0: no per-tenant limit."""


@dataclass(frozen=True)
class Settings:
    data_dir: str = "data"
    model_cache: str = ""
    """Derived model graphs (``CANDOR_MODEL_CACHE``, as the image sets it); see retrieval."""
    log_level: str = "INFO"
    auth: AuthSettings = AuthSettings(enabled=False)
    retrieval: RetrievalSettings = field(default_factory=RetrievalSettings)
    gate: GateSettings = field(default_factory=GateSettings)
    generator: GeneratorSettings = field(default_factory=GeneratorSettings)

    def path(self, *parts: str) -> Path:
        """A path under the data directory."""
        return Path(self.data_dir).joinpath(*parts)


def _coerce(tp: Any, value: Any, where: str) -> Any:
    origin = typing.get_origin(tp)
    if value is None and tp is str:
        return ""  # `api_key_file:` left empty (a template's unset value) is the empty text
    if value is None and origin not in (types.UnionType, typing.Union):
        # Read as the text "None" (or "null"), a host list of one host named null loaded.
        raise SettingsError(f"{where}: no value (null or empty)")
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        if not isinstance(value, Mapping):
            raise SettingsError(f"{where}: expected a mapping")
        return _build(tp, value, where)
    if origin is tuple:
        (item_tp, _ellipsis) = typing.get_args(tp)
        if isinstance(value, str):
            value = [v.strip() for v in value.split(",") if v.strip()]
        if not isinstance(value, list | tuple):
            raise SettingsError(f"{where}: expected a list")
        for i, v in enumerate(value):
            if v is None:  # an empty text is a setting's unset value, never a list's item
                raise SettingsError(f"{where}[{i}]: no value (null or empty)")
        return tuple(_coerce(item_tp, v, f"{where}[{i}]") for i, v in enumerate(value))
    if origin in (types.UnionType, typing.Union):
        return value
    if tp is bool:
        if isinstance(value, str):
            if value.lower() in ("1", "true", "yes", "on"):
                return True
            if value.lower() in ("0", "false", "no", "off"):
                return False
            raise SettingsError(f"{where}: not a boolean: {value!r}")
        return bool(value)
    if tp in (int, float, str):
        try:
            return _integer(value) if tp is int else tp(value)
        except (TypeError, ValueError) as exc:
            raise SettingsError(f"{where}: expected {tp.__name__}, got {value!r}") from exc
    return value


def _integer(value: Any) -> int:
    """An int from its text, "60.0" included (YAML read that as a float, and int() took it)."""
    try:
        return int(value)
    except ValueError:
        number = float(value)
        if not number.is_integer():
            raise
        return int(number)


def _build(cls: type[Any], data: Mapping[str, Any], where: str) -> Any:
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = set(data) - names
    if unknown:
        raise SettingsError(f"{where}: unknown settings {sorted(map(str, unknown))}")
    defaults = (
        cls()
        if all(
            f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
            for f in dataclasses.fields(cls)
        )
        else None
    )
    kwargs: dict[str, Any] = {}
    for name, value in data.items():
        tp = hints[name]
        if dataclasses.is_dataclass(tp) and defaults is not None and isinstance(value, Mapping):
            base = dataclasses.asdict(getattr(defaults, name))
            value = _deep_merge(base, value)
        kwargs[name] = _coerce(tp, value, f"{where}.{name}")
    try:
        return cls(**kwargs)
    except TypeError as exc:
        missing = sorted(
            f.name
            for f in dataclasses.fields(cls)
            if f.name not in kwargs
            and f.default is dataclasses.MISSING
            and f.default_factory is dataclasses.MISSING
        )
        raise SettingsError(f"{where}: missing required settings {missing}") from exc


def _deep_merge(base: dict[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in over.items():
        if isinstance(v, Mapping) and isinstance(out.get(k), dict):
            out[k] = _deep_merge(out[k], v)
        else:
            out[k] = v
    return out


#: What the kubelet injects for every Service in a pod's namespace (``enableServiceLinks``):
#: ``candor-gate`` gives ``CANDOR_GATE_SERVICE_HOST``, ``CANDOR_GATE_PORT_50052_TCP_ADDR``, ...
_SERVICE_LINK = re.compile(
    r"CANDOR_[A-Z0-9_]+_(?:SERVICE_HOST|SERVICE_PORT(?:_[A-Z0-9_]+)?"
    r"|PORT_\d+_(?:TCP|UDP|SCTP)(?:_PROTO|_PORT|_ADDR)?)"
)
#: ``CANDOR_GATE_PORT`` too, but only as the kubelet writes it (a URL): ``CANDOR_GATE_PORT=6000``
#: is a misspelt ``CANDOR_GATE__SERVER__PORT`` and must still stop start-up.
_SERVICE_LINK_PORT = re.compile(r"CANDOR_[A-Z0-9_]+_PORT")
_SERVICE_URL = re.compile(r"(?:tcp|udp|sctp)://\S+")


def _service_link(key: str, value: str) -> bool:
    if "__" in key:
        return False
    if _SERVICE_LINK.fullmatch(key):
        return True
    return bool(_SERVICE_LINK_PORT.fullmatch(key) and _SERVICE_URL.fullmatch(value))


def _env_overrides(env: Mapping[str, str]) -> dict[str, Any]:
    tree: dict[str, Any] = {}
    for key, value in env.items():
        if not key.startswith("CANDOR_") or key == "CANDOR_CONFIG":
            continue
        # No setting has these names, and a Service named candor-* gives every pod in its
        # namespace such variables: read as unknown settings, they would stop every start-up.
        if _service_link(key, value):
            continue
        path = key[len("CANDOR_") :].lower().split("__")
        node = tree
        for part in path[:-1]:
            node = node.setdefault(part, {})
        node[path[-1]] = value
    return tree


class _TextLoader(yaml.SafeLoader):
    """YAML whose plain scalars stay the text written; each setting's type converts it.

    YAML 1.1 guessed first: a key's ``tenants: [0123]`` became "83" (octal) and ``no``
    became "False", so the key was refused its own tenant and allowed another one's."""


_KEPT_RESOLVERS = ("tag:yaml.org,2002:merge", "tag:yaml.org,2002:null")
_TextLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag in _KEPT_RESOLVERS]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def load_settings(path: str | Path | None = None, env: Mapping[str, str] | None = None) -> Settings:
    """Build and validate the settings; raises SettingsError with the offending key."""
    env = os.environ if env is None else env
    path = path or env.get("CANDOR_CONFIG") or None
    data: dict[str, Any] = {}
    if path:
        try:
            loaded = yaml.load(Path(path).read_text(), Loader=_TextLoader) or {}
        except (OSError, yaml.YAMLError) as exc:
            raise SettingsError(f"cannot read settings file {path}: {exc}") from exc
        if not isinstance(loaded, dict):
            raise SettingsError(f"{path}: top level must be a mapping")
        data = loaded
    data = _deep_merge(data, _env_overrides(env))
    # Keep the per-service data dirs under the one top-level data_dir unless set explicitly.
    for shared in ("data_dir", "model_cache"):
        if shared in data:
            retrieval = data.setdefault("retrieval", {})
            if not isinstance(retrieval, dict):
                raise SettingsError("settings.retrieval: expected a mapping")
            retrieval.setdefault(shared, data[shared])
    settings: Settings = _build(Settings, data, "settings")
    _validate(settings)
    return settings


def _validate(s: Settings) -> None:
    r = s.retrieval
    checks = [
        (r.candidate_pool >= 1, "retrieval.candidate_pool must be >= 1"),
        (r.dense_backend in ("edge", "qdrant"), "retrieval.dense_backend must be edge or qdrant"),
        (
            r.embedder in ("minilm", "multilingual", "cohere"),
            "retrieval.embedder must be minilm, multilingual or cohere",
        ),
        (
            r.embed_precision in ("q8", "fp32"),
            "retrieval.embed_precision must be q8 or fp32",
        ),
        (
            r.keyword_backend in ("tantivy", "opensearch"),
            "retrieval.keyword_backend must be tantivy or opensearch",
        ),
        (r.top_k >= 1, "retrieval.top_k must be >= 1"),
        (
            not r.writer_target or (r.dense_backend, r.keyword_backend) == ("qdrant", "opensearch"),
            "retrieval.writer_target needs dense_backend qdrant and keyword_backend opensearch "
            "(the writer and this pod must share the stores)",
        ),
        (r.rrf_k >= 1, "retrieval.rrf_k must be >= 1"),
        (r.arm_timeout_seconds > 0, "retrieval.arm_timeout_seconds must be > 0"),
        (r.min_free_disk_mb >= 0, "retrieval.min_free_disk_mb must be >= 0"),
        (
            0 <= r.chunk_overlap_tokens < r.chunk_tokens,
            "retrieval.chunk_overlap_tokens must be < chunk_tokens",
        ),
        (s.gate.token_ttl_seconds > 0, "gate.token_ttl_seconds must be > 0"),
        (
            s.gate.load_balancing in ("round_robin", "pick_first"),
            "gate.load_balancing must be round_robin or pick_first",
        ),
        (
            s.gate.reranker.backend in ("none", "cohere", "llm"),
            "gate.reranker.backend must be none, cohere or llm",
        ),
        (s.gate.reranker.timeout_seconds > 0, "gate.reranker.timeout_seconds must be > 0"),
        (s.gate.reranker.max_candidates >= 1, "gate.reranker.max_candidates must be >= 1"),
        (s.gate.reranker.max_retries >= 0, "gate.reranker.max_retries must be >= 0"),
        (1 <= s.gate.reader.top_k <= 10, "gate.reader.top_k must be within [1, 10]"),
        (s.gate.reader.threads >= 1, "gate.reader.threads must be >= 1"),
        (s.gate.reader.timeout_seconds > 0, "gate.reader.timeout_seconds must be > 0"),
        (
            not s.auth.enabled or bool(s.auth.keys),
            "auth.enabled needs at least one auth.keys entry",
        ),
    ]
    for where, chat in (
        ("retrieval.rewrite", r.rewrite),
        ("retrieval.hypothetical", r.hypothetical),
        ("gate.translation", s.gate.translation),
    ):
        checks.extend(_chat_endpoint_checks(where, chat))
    checks += [
        (r.rewrite.timeout_seconds > 0, "retrieval.rewrite.timeout_seconds must be > 0"),
        (r.rewrite.max_words >= 1, "retrieval.rewrite.max_words must be >= 1"),
        (r.rewrite.max_growth > 0, "retrieval.rewrite.max_growth must be > 0"),
        (
            -1 <= r.rewrite.min_similarity <= 1,
            "retrieval.rewrite.min_similarity must be a cosine in [-1, 1]",
        ),
        (
            r.hypothetical.timeout_seconds > 0,
            "retrieval.hypothetical.timeout_seconds must be > 0",
        ),
        (
            1 <= r.hypothetical.questions_per_passage <= 20,
            "retrieval.hypothetical.questions_per_passage must be 1..20",
        ),
        (r.hypothetical.concurrency >= 1, "retrieval.hypothetical.concurrency must be >= 1"),
        (
            -1 <= r.hypothetical.min_similarity <= 1,
            "retrieval.hypothetical.min_similarity must be a cosine in [-1, 1]",
        ),
        (
            r.hypothetical.max_passage_chars >= 1,
            "retrieval.hypothetical.max_passage_chars must be >= 1",
        ),
        (s.gate.translation.timeout_seconds > 0, "gate.translation.timeout_seconds must be > 0"),
        (
            s.gate.max_in_flight_per_tenant >= 0,
            "gate.max_in_flight_per_tenant must be >= 0 (0: no limit)",
        ),
        (
            s.generator.max_in_flight_per_tenant >= 0,
            "generator.max_in_flight_per_tenant must be >= 0 (0: no limit)",
        ),
        (s.gate.translation.cache_size >= 0, "gate.translation.cache_size must be >= 0"),
        (
            s.generator.clock_skew_seconds >= 0,
            "generator.clock_skew_seconds must be >= 0 (a negative skew refuses every token)",
        ),
    ]
    for name in ("retrieval", "generator"):
        # The gate checks a query first: a longer limit than a downstream's let that service
        # refuse it without a field violation, or fail an Ask after a PASS was streamed.
        limit = getattr(s, name).max_query_chars
        checks.append(
            (
                s.gate.max_query_chars <= limit,
                f"gate.max_query_chars ({s.gate.max_query_chars}) must not exceed "
                f"{name}.max_query_chars ({limit})",
            )
        )
    for name in ("retrieval", "gate", "generator"):
        srv: ServerSettings = getattr(s, name).server
        checks += [
            (srv.grace_seconds >= 0, f"{name}.server.grace_seconds must be >= 0"),
            (srv.drain_delay_seconds >= 0, f"{name}.server.drain_delay_seconds must be >= 0"),
            (
                srv.max_connection_age_seconds > 0,
                f"{name}.server.max_connection_age_seconds must be > 0",
            ),
            (
                srv.max_connection_age_grace_seconds >= 0,
                f"{name}.server.max_connection_age_grace_seconds must be >= 0",
            ),
            (
                1024 <= srv.max_message_bytes <= 2**31 - 1,
                f"{name}.server.max_message_bytes must be between 1024 and 2147483647",
            ),
            (srv.max_in_flight >= 0, f"{name}.server.max_in_flight must be >= 0 (0: no limit)"),
        ]
    checks += _key_checks(s.auth.keys)
    for ok, message in checks:
        if not ok:
            raise SettingsError(message)


#: sha256 of the empty string: a key entry made from an unset variable, which a caller
#: sending an empty ``x-api-key`` would match.
_EMPTY_KEY_SHA256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"


def _key_checks(keys: tuple[ApiKey, ...]) -> list[tuple[bool, str]]:
    """A mistyped key entry fails start-up: each of these loaded and silently did otherwise
    than meant (the later of two entries for one key won; "acme, beta" allowed " beta")."""
    from candor.runtime.validation import TENANT

    checks: list[tuple[bool, str]] = []
    tenants_of: dict[str, tuple[str, ...]] = {}
    seen_hashes: dict[str, str] = {}
    for i, key in enumerate(keys):
        where = f"auth.keys[{i}] ({key.name or 'no name'})"
        digest = key.sha256.lower()
        checks += [
            (bool(key.name), f"auth.keys[{i}].name is required (it names the key in logs)"),
            (
                re.fullmatch(r"[0-9a-f]{64}", digest) is not None,
                f"{where}.sha256 must be 64 hex chars (sha256 of the key)",
            ),
            (digest != _EMPTY_KEY_SHA256, f"{where}.sha256 is the hash of an empty key"),
            (
                digest not in seen_hashes,
                f"{where}: the same key as {seen_hashes.get(digest, '')}; give it one entry "
                "listing all its tenants",
            ),
            (bool(key.tenants), f"{where}.tenants is empty: list its tenants, or '*' for any"),
        ]
        for tenant in key.tenants:
            checks.append(
                (
                    tenant == "*" or TENANT.fullmatch(tenant) is not None,
                    f"{where}.tenants: {tenant!r} is not a tenant id (1-64 letters, digits, "
                    "'_', '.', '-'), nor '*'",
                )
            )
        # A name may repeat for one key's rotation (old and new hash side by side), not for
        # two keys with other tenants, which its refusal log lines could not tell apart.
        named = tenants_of.setdefault(key.name, key.tenants)
        checks.append(
            (
                set(named) == set(key.tenants),
                f"{where}: another key of this name lists other tenants; give it its own name",
            )
        )
        seen_hashes.setdefault(digest, key.name)
    return checks


def _chat_endpoint_checks(where: str, c: ChatEndpointSettings) -> list[tuple[bool, str]]:
    on = c.backend == "openai_compat"
    return [
        (c.backend in ("none", "openai_compat"), f"{where}.backend must be none or openai_compat"),
        (not on or bool(c.base_url), f"{where}.base_url is required for backend openai_compat"),
        (not on or bool(c.model), f"{where}.model is required for backend openai_compat"),
    ]
