import datetime

from candor.common.v1 import evidence_pb2 as _evidence_pb2
from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class RetrievalMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    RETRIEVAL_MODE_UNSPECIFIED: _ClassVar[RetrievalMode]
    RETRIEVAL_MODE_HYBRID: _ClassVar[RetrievalMode]
    RETRIEVAL_MODE_DENSE: _ClassVar[RetrievalMode]
    RETRIEVAL_MODE_KEYWORD: _ClassVar[RetrievalMode]

class FusionMethod(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    FUSION_METHOD_UNSPECIFIED: _ClassVar[FusionMethod]
    FUSION_METHOD_RRF: _ClassVar[FusionMethod]
    FUSION_METHOD_WEIGHTED_SCORE: _ClassVar[FusionMethod]

class Arm(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ARM_UNSPECIFIED: _ClassVar[Arm]
    ARM_DENSE: _ClassVar[Arm]
    ARM_KEYWORD: _ClassVar[Arm]

class ArmState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ARM_STATE_UNSPECIFIED: _ClassVar[ArmState]
    ARM_STATE_OK: _ClassVar[ArmState]
    ARM_STATE_TIMEOUT: _ClassVar[ArmState]
    ARM_STATE_ERROR: _ClassVar[ArmState]
    ARM_STATE_SKIPPED: _ClassVar[ArmState]

class QueryRewrite(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    QUERY_REWRITE_UNSPECIFIED: _ClassVar[QueryRewrite]
    QUERY_REWRITE_DISABLED: _ClassVar[QueryRewrite]
    QUERY_REWRITE_REWRITTEN: _ClassVar[QueryRewrite]
    QUERY_REWRITE_FALLBACK_TIMEOUT: _ClassVar[QueryRewrite]
    QUERY_REWRITE_FALLBACK_ERROR: _ClassVar[QueryRewrite]
    QUERY_REWRITE_FALLBACK_REJECTED: _ClassVar[QueryRewrite]

class DocumentOutcome(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    DOCUMENT_OUTCOME_UNSPECIFIED: _ClassVar[DocumentOutcome]
    DOCUMENT_OUTCOME_WRITTEN: _ClassVar[DocumentOutcome]
    DOCUMENT_OUTCOME_UNCHANGED: _ClassVar[DocumentOutcome]
    DOCUMENT_OUTCOME_DELETED: _ClassVar[DocumentOutcome]
    DOCUMENT_OUTCOME_NOT_FOUND: _ClassVar[DocumentOutcome]
    DOCUMENT_OUTCOME_FAILED: _ClassVar[DocumentOutcome]
RETRIEVAL_MODE_UNSPECIFIED: RetrievalMode
RETRIEVAL_MODE_HYBRID: RetrievalMode
RETRIEVAL_MODE_DENSE: RetrievalMode
RETRIEVAL_MODE_KEYWORD: RetrievalMode
FUSION_METHOD_UNSPECIFIED: FusionMethod
FUSION_METHOD_RRF: FusionMethod
FUSION_METHOD_WEIGHTED_SCORE: FusionMethod
ARM_UNSPECIFIED: Arm
ARM_DENSE: Arm
ARM_KEYWORD: Arm
ARM_STATE_UNSPECIFIED: ArmState
ARM_STATE_OK: ArmState
ARM_STATE_TIMEOUT: ArmState
ARM_STATE_ERROR: ArmState
ARM_STATE_SKIPPED: ArmState
QUERY_REWRITE_UNSPECIFIED: QueryRewrite
QUERY_REWRITE_DISABLED: QueryRewrite
QUERY_REWRITE_REWRITTEN: QueryRewrite
QUERY_REWRITE_FALLBACK_TIMEOUT: QueryRewrite
QUERY_REWRITE_FALLBACK_ERROR: QueryRewrite
QUERY_REWRITE_FALLBACK_REJECTED: QueryRewrite
DOCUMENT_OUTCOME_UNSPECIFIED: DocumentOutcome
DOCUMENT_OUTCOME_WRITTEN: DocumentOutcome
DOCUMENT_OUTCOME_UNCHANGED: DocumentOutcome
DOCUMENT_OUTCOME_DELETED: DocumentOutcome
DOCUMENT_OUTCOME_NOT_FOUND: DocumentOutcome
DOCUMENT_OUTCOME_FAILED: DocumentOutcome

class RetrieveRequest(_message.Message):
    __slots__ = ("tenant", "query", "mode", "candidate_pool", "top_k", "fusion", "include_unpublished", "dense_weight", "keyword_weight")
    TENANT_FIELD_NUMBER: _ClassVar[int]
    QUERY_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    CANDIDATE_POOL_FIELD_NUMBER: _ClassVar[int]
    TOP_K_FIELD_NUMBER: _ClassVar[int]
    FUSION_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_UNPUBLISHED_FIELD_NUMBER: _ClassVar[int]
    DENSE_WEIGHT_FIELD_NUMBER: _ClassVar[int]
    KEYWORD_WEIGHT_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    query: str
    mode: RetrievalMode
    candidate_pool: int
    top_k: int
    fusion: FusionMethod
    include_unpublished: bool
    dense_weight: float
    keyword_weight: float
    def __init__(self, tenant: _Optional[str] = ..., query: _Optional[str] = ..., mode: _Optional[_Union[RetrievalMode, str]] = ..., candidate_pool: _Optional[int] = ..., top_k: _Optional[int] = ..., fusion: _Optional[_Union[FusionMethod, str]] = ..., include_unpublished: _Optional[bool] = ..., dense_weight: _Optional[float] = ..., keyword_weight: _Optional[float] = ...) -> None: ...

class ArmHit(_message.Message):
    __slots__ = ("rank", "raw_score")
    RANK_FIELD_NUMBER: _ClassVar[int]
    RAW_SCORE_FIELD_NUMBER: _ClassVar[int]
    rank: int
    raw_score: float
    def __init__(self, rank: _Optional[int] = ..., raw_score: _Optional[float] = ...) -> None: ...

class Candidate(_message.Message):
    __slots__ = ("chunk_id", "parent_id", "document_id", "text", "title", "source_kind", "dense", "keyword", "fused_score", "fused_rank", "in_both", "uri")
    CHUNK_ID_FIELD_NUMBER: _ClassVar[int]
    PARENT_ID_FIELD_NUMBER: _ClassVar[int]
    DOCUMENT_ID_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    TITLE_FIELD_NUMBER: _ClassVar[int]
    SOURCE_KIND_FIELD_NUMBER: _ClassVar[int]
    DENSE_FIELD_NUMBER: _ClassVar[int]
    KEYWORD_FIELD_NUMBER: _ClassVar[int]
    FUSED_SCORE_FIELD_NUMBER: _ClassVar[int]
    FUSED_RANK_FIELD_NUMBER: _ClassVar[int]
    IN_BOTH_FIELD_NUMBER: _ClassVar[int]
    URI_FIELD_NUMBER: _ClassVar[int]
    chunk_id: str
    parent_id: str
    document_id: str
    text: str
    title: str
    source_kind: _evidence_pb2.SourceKind
    dense: ArmHit
    keyword: ArmHit
    fused_score: float
    fused_rank: int
    in_both: bool
    uri: str
    def __init__(self, chunk_id: _Optional[str] = ..., parent_id: _Optional[str] = ..., document_id: _Optional[str] = ..., text: _Optional[str] = ..., title: _Optional[str] = ..., source_kind: _Optional[_Union[_evidence_pb2.SourceKind, str]] = ..., dense: _Optional[_Union[ArmHit, _Mapping]] = ..., keyword: _Optional[_Union[ArmHit, _Mapping]] = ..., fused_score: _Optional[float] = ..., fused_rank: _Optional[int] = ..., in_both: _Optional[bool] = ..., uri: _Optional[str] = ...) -> None: ...

class ArmStatus(_message.Message):
    __slots__ = ("arm", "state", "latency", "hits", "detail")
    ARM_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    LATENCY_FIELD_NUMBER: _ClassVar[int]
    HITS_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    arm: Arm
    state: ArmState
    latency: _duration_pb2.Duration
    hits: int
    detail: str
    def __init__(self, arm: _Optional[_Union[Arm, str]] = ..., state: _Optional[_Union[ArmState, str]] = ..., latency: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., hits: _Optional[int] = ..., detail: _Optional[str] = ...) -> None: ...

class RetrieveResponse(_message.Message):
    __slots__ = ("candidates", "arms", "degraded", "embedder", "fusion", "rewritten_query", "query_rewrite", "candidates_trimmed")
    CANDIDATES_FIELD_NUMBER: _ClassVar[int]
    ARMS_FIELD_NUMBER: _ClassVar[int]
    DEGRADED_FIELD_NUMBER: _ClassVar[int]
    EMBEDDER_FIELD_NUMBER: _ClassVar[int]
    FUSION_FIELD_NUMBER: _ClassVar[int]
    REWRITTEN_QUERY_FIELD_NUMBER: _ClassVar[int]
    QUERY_REWRITE_FIELD_NUMBER: _ClassVar[int]
    CANDIDATES_TRIMMED_FIELD_NUMBER: _ClassVar[int]
    candidates: _containers.RepeatedCompositeFieldContainer[Candidate]
    arms: _containers.RepeatedCompositeFieldContainer[ArmStatus]
    degraded: bool
    embedder: str
    fusion: FusionMethod
    rewritten_query: str
    query_rewrite: QueryRewrite
    candidates_trimmed: int
    def __init__(self, candidates: _Optional[_Iterable[_Union[Candidate, _Mapping]]] = ..., arms: _Optional[_Iterable[_Union[ArmStatus, _Mapping]]] = ..., degraded: _Optional[bool] = ..., embedder: _Optional[str] = ..., fusion: _Optional[_Union[FusionMethod, str]] = ..., rewritten_query: _Optional[str] = ..., query_rewrite: _Optional[_Union[QueryRewrite, str]] = ..., candidates_trimmed: _Optional[int] = ...) -> None: ...

class Document(_message.Message):
    __slots__ = ("document_id", "title", "text", "source_kind", "uri", "question")
    DOCUMENT_ID_FIELD_NUMBER: _ClassVar[int]
    TITLE_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    SOURCE_KIND_FIELD_NUMBER: _ClassVar[int]
    URI_FIELD_NUMBER: _ClassVar[int]
    QUESTION_FIELD_NUMBER: _ClassVar[int]
    document_id: str
    title: str
    text: str
    source_kind: _evidence_pb2.SourceKind
    uri: str
    question: str
    def __init__(self, document_id: _Optional[str] = ..., title: _Optional[str] = ..., text: _Optional[str] = ..., source_kind: _Optional[_Union[_evidence_pb2.SourceKind, str]] = ..., uri: _Optional[str] = ..., question: _Optional[str] = ...) -> None: ...

class UpsertDocumentsRequest(_message.Message):
    __slots__ = ("tenant", "documents", "hypothetical_questions")
    TENANT_FIELD_NUMBER: _ClassVar[int]
    DOCUMENTS_FIELD_NUMBER: _ClassVar[int]
    HYPOTHETICAL_QUESTIONS_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    documents: _containers.RepeatedCompositeFieldContainer[Document]
    hypothetical_questions: bool
    def __init__(self, tenant: _Optional[str] = ..., documents: _Optional[_Iterable[_Union[Document, _Mapping]]] = ..., hypothetical_questions: _Optional[bool] = ...) -> None: ...

class DocumentResult(_message.Message):
    __slots__ = ("document_id", "outcome", "chunks", "error", "question_chunks", "question_error")
    DOCUMENT_ID_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    CHUNKS_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    QUESTION_CHUNKS_FIELD_NUMBER: _ClassVar[int]
    QUESTION_ERROR_FIELD_NUMBER: _ClassVar[int]
    document_id: str
    outcome: DocumentOutcome
    chunks: int
    error: str
    question_chunks: int
    question_error: str
    def __init__(self, document_id: _Optional[str] = ..., outcome: _Optional[_Union[DocumentOutcome, str]] = ..., chunks: _Optional[int] = ..., error: _Optional[str] = ..., question_chunks: _Optional[int] = ..., question_error: _Optional[str] = ...) -> None: ...

class UpsertDocumentsResponse(_message.Message):
    __slots__ = ("results",)
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[DocumentResult]
    def __init__(self, results: _Optional[_Iterable[_Union[DocumentResult, _Mapping]]] = ...) -> None: ...

class DeleteDocumentsRequest(_message.Message):
    __slots__ = ("tenant", "document_ids")
    TENANT_FIELD_NUMBER: _ClassVar[int]
    DOCUMENT_IDS_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    document_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, tenant: _Optional[str] = ..., document_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class DeleteDocumentsResponse(_message.Message):
    __slots__ = ("results",)
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[DocumentResult]
    def __init__(self, results: _Optional[_Iterable[_Union[DocumentResult, _Mapping]]] = ...) -> None: ...
