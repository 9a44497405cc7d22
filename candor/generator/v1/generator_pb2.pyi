import datetime

from candor.common.v1 import evidence_pb2 as _evidence_pb2
from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class GenerateRequest(_message.Message):
    __slots__ = ("pass_token", "query", "evidence", "language", "clarify_only")
    PASS_TOKEN_FIELD_NUMBER: _ClassVar[int]
    QUERY_FIELD_NUMBER: _ClassVar[int]
    EVIDENCE_FIELD_NUMBER: _ClassVar[int]
    LANGUAGE_FIELD_NUMBER: _ClassVar[int]
    CLARIFY_ONLY_FIELD_NUMBER: _ClassVar[int]
    pass_token: str
    query: str
    evidence: _containers.RepeatedCompositeFieldContainer[_evidence_pb2.Evidence]
    language: str
    clarify_only: bool
    def __init__(self, pass_token: _Optional[str] = ..., query: _Optional[str] = ..., evidence: _Optional[_Iterable[_Union[_evidence_pb2.Evidence, _Mapping]]] = ..., language: _Optional[str] = ..., clarify_only: _Optional[bool] = ...) -> None: ...

class AnswerDelta(_message.Message):
    __slots__ = ("text",)
    TEXT_FIELD_NUMBER: _ClassVar[int]
    text: str
    def __init__(self, text: _Optional[str] = ...) -> None: ...

class Usage(_message.Message):
    __slots__ = ("input_tokens", "output_tokens")
    INPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    input_tokens: int
    output_tokens: int
    def __init__(self, input_tokens: _Optional[int] = ..., output_tokens: _Optional[int] = ...) -> None: ...

class AnswerFinal(_message.Message):
    __slots__ = ("answer", "citations", "verification", "tier", "usage", "latency", "backend", "trimmed_chunk_ids", "is_clarification", "truncated_chunk_id")
    ANSWER_FIELD_NUMBER: _ClassVar[int]
    CITATIONS_FIELD_NUMBER: _ClassVar[int]
    VERIFICATION_FIELD_NUMBER: _ClassVar[int]
    TIER_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    LATENCY_FIELD_NUMBER: _ClassVar[int]
    BACKEND_FIELD_NUMBER: _ClassVar[int]
    TRIMMED_CHUNK_IDS_FIELD_NUMBER: _ClassVar[int]
    IS_CLARIFICATION_FIELD_NUMBER: _ClassVar[int]
    TRUNCATED_CHUNK_ID_FIELD_NUMBER: _ClassVar[int]
    answer: str
    citations: _containers.RepeatedCompositeFieldContainer[_evidence_pb2.Citation]
    verification: _evidence_pb2.Verification
    tier: _evidence_pb2.Tier
    usage: Usage
    latency: _duration_pb2.Duration
    backend: str
    trimmed_chunk_ids: _containers.RepeatedScalarFieldContainer[str]
    is_clarification: bool
    truncated_chunk_id: str
    def __init__(self, answer: _Optional[str] = ..., citations: _Optional[_Iterable[_Union[_evidence_pb2.Citation, _Mapping]]] = ..., verification: _Optional[_Union[_evidence_pb2.Verification, _Mapping]] = ..., tier: _Optional[_Union[_evidence_pb2.Tier, str]] = ..., usage: _Optional[_Union[Usage, _Mapping]] = ..., latency: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., backend: _Optional[str] = ..., trimmed_chunk_ids: _Optional[_Iterable[str]] = ..., is_clarification: _Optional[bool] = ..., truncated_chunk_id: _Optional[str] = ...) -> None: ...

class GenerateResponse(_message.Message):
    __slots__ = ("delta", "final")
    DELTA_FIELD_NUMBER: _ClassVar[int]
    FINAL_FIELD_NUMBER: _ClassVar[int]
    delta: AnswerDelta
    final: AnswerFinal
    def __init__(self, delta: _Optional[_Union[AnswerDelta, _Mapping]] = ..., final: _Optional[_Union[AnswerFinal, _Mapping]] = ...) -> None: ...
