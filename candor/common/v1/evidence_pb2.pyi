from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Tier(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TIER_UNSPECIFIED: _ClassVar[Tier]
    TIER_CONFIDENT: _ClassVar[Tier]
    TIER_UNCERTAIN: _ClassVar[Tier]
    TIER_NO_MATCH: _ClassVar[Tier]
    TIER_VERIFICATION_FAILED: _ClassVar[Tier]

class SourceKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SOURCE_KIND_UNSPECIFIED: _ClassVar[SourceKind]
    SOURCE_KIND_DOCUMENT: _ClassVar[SourceKind]
    SOURCE_KIND_CURATED_ANSWER: _ClassVar[SourceKind]
    SOURCE_KIND_HYPOTHETICAL_QUESTION: _ClassVar[SourceKind]
TIER_UNSPECIFIED: Tier
TIER_CONFIDENT: Tier
TIER_UNCERTAIN: Tier
TIER_NO_MATCH: Tier
TIER_VERIFICATION_FAILED: Tier
SOURCE_KIND_UNSPECIFIED: SourceKind
SOURCE_KIND_DOCUMENT: SourceKind
SOURCE_KIND_CURATED_ANSWER: SourceKind
SOURCE_KIND_HYPOTHETICAL_QUESTION: SourceKind

class Evidence(_message.Message):
    __slots__ = ("chunk_id", "document_id", "parent_id", "title", "text", "source_kind", "rank", "score")
    CHUNK_ID_FIELD_NUMBER: _ClassVar[int]
    DOCUMENT_ID_FIELD_NUMBER: _ClassVar[int]
    PARENT_ID_FIELD_NUMBER: _ClassVar[int]
    TITLE_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    SOURCE_KIND_FIELD_NUMBER: _ClassVar[int]
    RANK_FIELD_NUMBER: _ClassVar[int]
    SCORE_FIELD_NUMBER: _ClassVar[int]
    chunk_id: str
    document_id: str
    parent_id: str
    title: str
    text: str
    source_kind: SourceKind
    rank: int
    score: float
    def __init__(self, chunk_id: _Optional[str] = ..., document_id: _Optional[str] = ..., parent_id: _Optional[str] = ..., title: _Optional[str] = ..., text: _Optional[str] = ..., source_kind: _Optional[_Union[SourceKind, str]] = ..., rank: _Optional[int] = ..., score: _Optional[float] = ...) -> None: ...

class Citation(_message.Message):
    __slots__ = ("chunk_id", "quote", "verified", "failure")
    CHUNK_ID_FIELD_NUMBER: _ClassVar[int]
    QUOTE_FIELD_NUMBER: _ClassVar[int]
    VERIFIED_FIELD_NUMBER: _ClassVar[int]
    FAILURE_FIELD_NUMBER: _ClassVar[int]
    chunk_id: str
    quote: str
    verified: bool
    failure: str
    def __init__(self, chunk_id: _Optional[str] = ..., quote: _Optional[str] = ..., verified: _Optional[bool] = ..., failure: _Optional[str] = ...) -> None: ...

class Verification(_message.Message):
    __slots__ = ("passed", "failed_citations", "detail")
    PASSED_FIELD_NUMBER: _ClassVar[int]
    FAILED_CITATIONS_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    passed: bool
    failed_citations: _containers.RepeatedCompositeFieldContainer[Citation]
    detail: str
    def __init__(self, passed: _Optional[bool] = ..., failed_citations: _Optional[_Iterable[_Union[Citation, _Mapping]]] = ..., detail: _Optional[str] = ...) -> None: ...
