import datetime

from candor.common.v1 import evidence_pb2 as _evidence_pb2
from candor.generator.v1 import generator_pb2 as _generator_pb2
from candor.retrieval.v1 import retrieval_pb2 as _retrieval_pb2
from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Outcome(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    OUTCOME_UNSPECIFIED: _ClassVar[Outcome]
    OUTCOME_PASS: _ClassVar[Outcome]
    OUTCOME_REFUSE: _ClassVar[Outcome]
    OUTCOME_CLARIFY: _ClassVar[Outcome]

class Reason(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    REASON_UNSPECIFIED: _ClassVar[Reason]
    REASON_PASSED: _ClassVar[Reason]
    REASON_CURATED_ANSWER: _ClassVar[Reason]
    REASON_NO_HITS: _ClassVar[Reason]
    REASON_BELOW_FLOOR: _ClassVar[Reason]
    REASON_LOW_CONFIDENCE: _ClassVar[Reason]
    REASON_NO_CLEAR_WINNER: _ClassVar[Reason]
    REASON_MISSING_FACETS: _ClassVar[Reason]
    REASON_RERANK_NOT_RELEVANT: _ClassVar[Reason]
    REASON_ARMS_UNAVAILABLE: _ClassVar[Reason]
OUTCOME_UNSPECIFIED: Outcome
OUTCOME_PASS: Outcome
OUTCOME_REFUSE: Outcome
OUTCOME_CLARIFY: Outcome
REASON_UNSPECIFIED: Reason
REASON_PASSED: Reason
REASON_CURATED_ANSWER: Reason
REASON_NO_HITS: Reason
REASON_BELOW_FLOOR: Reason
REASON_LOW_CONFIDENCE: Reason
REASON_NO_CLEAR_WINNER: Reason
REASON_MISSING_FACETS: Reason
REASON_RERANK_NOT_RELEVANT: Reason
REASON_ARMS_UNAVAILABLE: Reason

class Signal(_message.Message):
    __slots__ = ("name", "value")
    NAME_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    name: str
    value: float
    def __init__(self, name: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...

class Threshold(_message.Message):
    __slots__ = ("name", "value")
    NAME_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    name: str
    value: float
    def __init__(self, name: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...

class ShadowDecision(_message.Message):
    __slots__ = ("policy_version", "outcome", "reason", "confidence", "agrees")
    POLICY_VERSION_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    CONFIDENCE_FIELD_NUMBER: _ClassVar[int]
    AGREES_FIELD_NUMBER: _ClassVar[int]
    policy_version: str
    outcome: Outcome
    reason: Reason
    confidence: float
    agrees: bool
    def __init__(self, policy_version: _Optional[str] = ..., outcome: _Optional[_Union[Outcome, str]] = ..., reason: _Optional[_Union[Reason, str]] = ..., confidence: _Optional[float] = ..., agrees: _Optional[bool] = ...) -> None: ...

class Decision(_message.Message):
    __slots__ = ("decision_id", "outcome", "tier", "confidence", "display_confidence", "reason", "reason_detail", "refusal_message", "refusal_language", "policy_version", "policy_name", "signals", "thresholds", "evidence", "pass_token", "pass_token_expires_at", "missing_facets", "arms", "degraded", "shadow", "elapsed", "rewritten_query", "evidence_trimmed")
    DECISION_ID_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    TIER_FIELD_NUMBER: _ClassVar[int]
    CONFIDENCE_FIELD_NUMBER: _ClassVar[int]
    DISPLAY_CONFIDENCE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    REASON_DETAIL_FIELD_NUMBER: _ClassVar[int]
    REFUSAL_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    REFUSAL_LANGUAGE_FIELD_NUMBER: _ClassVar[int]
    POLICY_VERSION_FIELD_NUMBER: _ClassVar[int]
    POLICY_NAME_FIELD_NUMBER: _ClassVar[int]
    SIGNALS_FIELD_NUMBER: _ClassVar[int]
    THRESHOLDS_FIELD_NUMBER: _ClassVar[int]
    EVIDENCE_FIELD_NUMBER: _ClassVar[int]
    PASS_TOKEN_FIELD_NUMBER: _ClassVar[int]
    PASS_TOKEN_EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    MISSING_FACETS_FIELD_NUMBER: _ClassVar[int]
    ARMS_FIELD_NUMBER: _ClassVar[int]
    DEGRADED_FIELD_NUMBER: _ClassVar[int]
    SHADOW_FIELD_NUMBER: _ClassVar[int]
    ELAPSED_FIELD_NUMBER: _ClassVar[int]
    REWRITTEN_QUERY_FIELD_NUMBER: _ClassVar[int]
    EVIDENCE_TRIMMED_FIELD_NUMBER: _ClassVar[int]
    decision_id: str
    outcome: Outcome
    tier: _evidence_pb2.Tier
    confidence: float
    display_confidence: int
    reason: Reason
    reason_detail: str
    refusal_message: str
    refusal_language: str
    policy_version: str
    policy_name: str
    signals: _containers.RepeatedCompositeFieldContainer[Signal]
    thresholds: _containers.RepeatedCompositeFieldContainer[Threshold]
    evidence: _containers.RepeatedCompositeFieldContainer[_evidence_pb2.Evidence]
    pass_token: str
    pass_token_expires_at: _timestamp_pb2.Timestamp
    missing_facets: _containers.RepeatedScalarFieldContainer[str]
    arms: _containers.RepeatedCompositeFieldContainer[_retrieval_pb2.ArmStatus]
    degraded: bool
    shadow: ShadowDecision
    elapsed: _duration_pb2.Duration
    rewritten_query: str
    evidence_trimmed: int
    def __init__(self, decision_id: _Optional[str] = ..., outcome: _Optional[_Union[Outcome, str]] = ..., tier: _Optional[_Union[_evidence_pb2.Tier, str]] = ..., confidence: _Optional[float] = ..., display_confidence: _Optional[int] = ..., reason: _Optional[_Union[Reason, str]] = ..., reason_detail: _Optional[str] = ..., refusal_message: _Optional[str] = ..., refusal_language: _Optional[str] = ..., policy_version: _Optional[str] = ..., policy_name: _Optional[str] = ..., signals: _Optional[_Iterable[_Union[Signal, _Mapping]]] = ..., thresholds: _Optional[_Iterable[_Union[Threshold, _Mapping]]] = ..., evidence: _Optional[_Iterable[_Union[_evidence_pb2.Evidence, _Mapping]]] = ..., pass_token: _Optional[str] = ..., pass_token_expires_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., missing_facets: _Optional[_Iterable[str]] = ..., arms: _Optional[_Iterable[_Union[_retrieval_pb2.ArmStatus, _Mapping]]] = ..., degraded: _Optional[bool] = ..., shadow: _Optional[_Union[ShadowDecision, _Mapping]] = ..., elapsed: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., rewritten_query: _Optional[str] = ..., evidence_trimmed: _Optional[int] = ...) -> None: ...

class EvaluateRequest(_message.Message):
    __slots__ = ("tenant", "query", "language", "mode")
    TENANT_FIELD_NUMBER: _ClassVar[int]
    QUERY_FIELD_NUMBER: _ClassVar[int]
    LANGUAGE_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    query: str
    language: str
    mode: _retrieval_pb2.RetrievalMode
    def __init__(self, tenant: _Optional[str] = ..., query: _Optional[str] = ..., language: _Optional[str] = ..., mode: _Optional[_Union[_retrieval_pb2.RetrievalMode, str]] = ...) -> None: ...

class EvaluateResponse(_message.Message):
    __slots__ = ("decision",)
    DECISION_FIELD_NUMBER: _ClassVar[int]
    decision: Decision
    def __init__(self, decision: _Optional[_Union[Decision, _Mapping]] = ...) -> None: ...

class AskRequest(_message.Message):
    __slots__ = ("tenant", "query", "language", "mode")
    TENANT_FIELD_NUMBER: _ClassVar[int]
    QUERY_FIELD_NUMBER: _ClassVar[int]
    LANGUAGE_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    query: str
    language: str
    mode: _retrieval_pb2.RetrievalMode
    def __init__(self, tenant: _Optional[str] = ..., query: _Optional[str] = ..., language: _Optional[str] = ..., mode: _Optional[_Union[_retrieval_pb2.RetrievalMode, str]] = ...) -> None: ...

class AskResponse(_message.Message):
    __slots__ = ("decision", "delta", "final")
    DECISION_FIELD_NUMBER: _ClassVar[int]
    DELTA_FIELD_NUMBER: _ClassVar[int]
    FINAL_FIELD_NUMBER: _ClassVar[int]
    decision: Decision
    delta: _generator_pb2.AnswerDelta
    final: _generator_pb2.AnswerFinal
    def __init__(self, decision: _Optional[_Union[Decision, _Mapping]] = ..., delta: _Optional[_Union[_generator_pb2.AnswerDelta, _Mapping]] = ..., final: _Optional[_Union[_generator_pb2.AnswerFinal, _Mapping]] = ...) -> None: ...

class GetPolicyRequest(_message.Message):
    __slots__ = ("tenant",)
    TENANT_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    def __init__(self, tenant: _Optional[str] = ...) -> None: ...

class PolicyInfo(_message.Message):
    __slots__ = ("version", "policy_name", "loaded_at", "sha256", "thresholds", "reader_model")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    POLICY_NAME_FIELD_NUMBER: _ClassVar[int]
    LOADED_AT_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    THRESHOLDS_FIELD_NUMBER: _ClassVar[int]
    READER_MODEL_FIELD_NUMBER: _ClassVar[int]
    version: str
    policy_name: str
    loaded_at: _timestamp_pb2.Timestamp
    sha256: str
    thresholds: _containers.RepeatedCompositeFieldContainer[Threshold]
    reader_model: str
    def __init__(self, version: _Optional[str] = ..., policy_name: _Optional[str] = ..., loaded_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., sha256: _Optional[str] = ..., thresholds: _Optional[_Iterable[_Union[Threshold, _Mapping]]] = ..., reader_model: _Optional[str] = ...) -> None: ...

class GetPolicyResponse(_message.Message):
    __slots__ = ("active", "shadow", "evidence_reader")
    ACTIVE_FIELD_NUMBER: _ClassVar[int]
    SHADOW_FIELD_NUMBER: _ClassVar[int]
    EVIDENCE_READER_FIELD_NUMBER: _ClassVar[int]
    active: PolicyInfo
    shadow: PolicyInfo
    evidence_reader: str
    def __init__(self, active: _Optional[_Union[PolicyInfo, _Mapping]] = ..., shadow: _Optional[_Union[PolicyInfo, _Mapping]] = ..., evidence_reader: _Optional[str] = ...) -> None: ...
