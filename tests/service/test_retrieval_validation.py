"""Bad writes and searches get INVALID_ARGUMENT naming the field, and change nothing.

Each case is one a caller can send and the service once took: a tenant with a trailing newline
became an invisible tenant of its own, an id too long for the keyword store's terms could never
be replaced or deleted there, an unbounded title was copied into every chunk, NaN weights
ordered nothing, and unknown enum numbers were stored and echoed back.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import grpc
import pytest

from candor.cli.stack import start_stack
from candor.common.v1 import evidence_pb2
from candor.retrieval.v1 import retrieval_pb2 as pb
from candor.retrieval.v1 import retrieval_pb2_grpc as pb_grpc
from candor.runtime.errors import field_violations_of
from candor.runtime.validation import (
    MAX_CURATED_CHARS,
    MAX_ID_BYTES,
    MAX_TITLE_CHARS,
    MAX_URI_CHARS,
)
from candor.settings import load_settings
from tests.helpers import Stack, stack_env

TENANT = "t"
TEXT = "Road bicycle tyres run at 80 to 100 psi."

Call = Callable[[pb_grpc.RetrievalServiceStub], object]


@pytest.fixture(scope="module")
def stub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[pb_grpc.RetrievalServiceStub]:
    data = tmp_path_factory.mktemp("data")
    stack = Stack(lambda: start_stack(load_settings(env=stack_env(str(data)))))
    try:
        with grpc.insecure_channel(stack.address("RetrievalService")) as ch:
            s = pb_grpc.RetrievalServiceStub(ch)
            s.UpsertDocuments(
                pb.UpsertDocumentsRequest(
                    tenant=TENANT, documents=[pb.Document(document_id="bikes", text=TEXT)]
                )
            )
            yield s
    finally:
        stack.stop()


def _upsert(tenant: str = TENANT, **fields: object) -> Call:
    doc = pb.Document(
        **{"document_id": "new", "text": "Tubeless tyres seal small punctures.", **fields}
    )  # type: ignore[arg-type]
    return lambda s: s.UpsertDocuments(pb.UpsertDocumentsRequest(tenant=tenant, documents=[doc]))


def _retrieve(**fields: object) -> Call:
    request = pb.RetrieveRequest(**{"tenant": TENANT, "query": "tyre pressure", **fields})  # type: ignore[arg-type]
    return lambda s: s.Retrieve(request)


def _delete(ids: list[str]) -> Call:
    return lambda s: s.DeleteDocuments(pb.DeleteDocumentsRequest(tenant=TENANT, document_ids=ids))


CASES: dict[str, tuple[Call, str]] = {
    "tenant with a trailing newline": (_upsert(tenant=TENANT + "\n"), "tenant"),
    "id over the byte limit": (
        _upsert(document_id="é" * (MAX_ID_BYTES // 2 + 1)),
        "documents[0].document_id",
    ),
    "title over the limit": (_upsert(title="t" * (MAX_TITLE_CHARS + 1)), "documents[0].title"),
    "uri over the limit": (_upsert(uri="u" * (MAX_URI_CHARS + 1)), "documents[0].uri"),
    "title with an escape sequence": (_upsert(title="Evil\x1b[31mRED"), "documents[0].title"),
    "title of two lines": (_upsert(title="Title\nFAKE LINE"), "documents[0].title"),
    # A line separator breaks a line too; a bidi override reorders what a reader sees.
    "title with a line separator": (_upsert(title="Title\u2028FAKE"), "documents[0].title"),
    "title with a bidi override": (_upsert(title="Refunds \u202egnp.exe"), "documents[0].title"),
    "uri with an escape sequence": (_upsert(uri="https://x/\x1b[2J"), "documents[0].uri"),
    "uri of two lines": (_upsert(uri="https://x/\nFAKE"), "documents[0].uri"),
    # The gate reads a curated answer's question back as its chunk's first line.
    "curated question of two lines": (
        _upsert(
            source_kind=evidence_pb2.SOURCE_KIND_CURATED_ANSWER,
            question="How long\ndo tyres last?",
        ),
        "documents[0].question",
    ),
    # Under a heading, a NUL or zero-width space is not text to index.
    "headings over invisible text": (_upsert(text="# Head\n\x00\u200b"), "documents[0].text"),
    "unknown source kind": (_upsert(source_kind=99), "documents[0].source_kind"),
    "text of zero-width characters": (_upsert(text="\u200b\ufeff \u2060"), "documents[0].text"),
    "curated question over the query limit": (
        _upsert(source_kind=evidence_pb2.SOURCE_KIND_CURATED_ANSWER, question="q" * 2001),
        "documents[0].question",
    ),
    "curated answer longer than one chunk may be": (
        _upsert(
            source_kind=evidence_pb2.SOURCE_KIND_CURATED_ANSWER,
            question="How long do tyres last?",
            text="t " * (MAX_CURATED_CHARS // 2 + 1),
        ),
        "documents[0].text",
    ),
    "question on a document that is not a curated answer": (
        _upsert(question="q" * 3_000_000),
        "documents[0].question",
    ),
    "document of headings alone": (_upsert(text="# Tyres\n\n## Pressure\n"), "documents[0].text"),
    "NaN dense weight": (_retrieve(dense_weight=float("nan")), "dense_weight"),
    "infinite keyword weight": (_retrieve(keyword_weight=float("inf")), "keyword_weight"),
    "unknown mode": (_retrieve(mode=99), "mode"),
    "unknown fusion": (_retrieve(fusion=99), "fusion"),
    "query of zero-width characters": (_retrieve(query="\u200b\u200d"), "query"),
    "query of control characters": (_retrieve(query="\x00\x07"), "query"),
    "text of control characters": (_upsert(text="\x00\x07\x1b"), "documents[0].text"),
    "a weight that overflows the fused scores": (_retrieve(dense_weight=1e308), "dense_weight"),
    "more ids than a call may delete": (
        _delete([f"d{i}" for i in range(501)]),
        "document_ids",
    ),
    "the same id twice in a delete": (_delete(["bikes", "bikes"]), "document_ids[1]"),
    # Ids a caller cannot tell apart in a listing: invisible, padded or with a control char.
    "an invisible id": (_upsert(document_id="\u200b"), "documents[0].document_id"),
    "a no-break-space id": (_upsert(document_id="\xa0"), "documents[0].document_id"),
    "an id with a leading space": (_upsert(document_id=" bikes"), "documents[0].document_id"),
    "an id with a newline": (_upsert(document_id="x\ny"), "documents[0].document_id"),
    "an id with a NUL": (_upsert(document_id="a\x00b"), "documents[0].document_id"),
    "an id with a line separator": (_upsert(document_id="a\u2028b"), "documents[0].document_id"),
    "an id with a bidi override": (_upsert(document_id="a\u202eb"), "documents[0].document_id"),
    "an id with a leading zero-width space": (
        _upsert(document_id="\u200ba"),
        "documents[0].document_id",
    ),
    "an id with a soft hyphen": (_upsert(document_id="a\u00adb"), "documents[0].document_id"),
    "delete id over the byte limit": (_delete(["x" * (MAX_ID_BYTES + 1)]), "document_ids[0]"),
}


def _state(s: pb_grpc.RetrievalServiceStub) -> list[tuple[str, str]]:
    reply = s.Retrieve(pb.RetrieveRequest(tenant=TENANT, query="tyres", top_k=10))
    return [(c.document_id, c.text) for c in reply.candidates]


@pytest.mark.parametrize("case", CASES)
def test_bad_input_is_a_field_violation_and_changes_nothing(
    stub: pb_grpc.RetrievalServiceStub, case: str
) -> None:
    call, field = CASES[case]
    before = _state(stub)
    with pytest.raises(grpc.RpcError) as err:
        call(stub)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT, err.value.details()
    assert field in [f for f, _ in field_violations_of(err.value)]
    assert _state(stub) == before == [("bikes", TEXT)]


def test_ids_and_titles_at_the_limits_are_written(stub: pb_grpc.RetrievalServiceStub) -> None:
    long_id = "é" * (MAX_ID_BYTES // 2)
    _upsert(document_id=long_id, title="t" * MAX_TITLE_CHARS)(stub)
    reply = stub.DeleteDocuments(pb.DeleteDocumentsRequest(tenant=TENANT, document_ids=[long_id]))
    assert [r.outcome for r in reply.results] == [pb.DOCUMENT_OUTCOME_DELETED]


@pytest.mark.parametrize(
    "name",
    [
        "\u0645\u06cc\u200c\u062e\u0648\u0627\u0647\u0645",  # Persian: a zero-width non-joiner
        "\u0dc1\u0dca\u200d\u0dbb\u0dd3",  # Sinhala: a zero-width joiner
        "family-\U0001f468\u200d\U0001f469\u200d\U0001f467",  # an emoji sequence
        "\u200fשלום",  # a right-to-left mark
    ],
)
def test_ids_whose_script_needs_joiners_or_marks_are_written(
    stub: pb_grpc.RetrievalServiceStub, name: str
) -> None:
    # Refusing every format character refused these names of real files.
    _upsert(document_id=name)(stub)
    reply = stub.DeleteDocuments(pb.DeleteDocumentsRequest(tenant=TENANT, document_ids=[name]))
    assert [r.outcome for r in reply.results] == [pb.DOCUMENT_OUTCOME_DELETED]


def test_a_batch_with_hundreds_of_bad_documents_still_gets_its_field_violations(
    stub: pb_grpc.RetrievalServiceStub,
) -> None:
    # Every violation travels in the trailers: 30 listed in full overflowed gRPC's metadata
    # limit, and the caller got RESOURCE_EXHAUSTED with none of them.
    bad = [pb.Document(document_id="x" * (MAX_ID_BYTES + 1 + i), text=TEXT) for i in range(300)]
    with pytest.raises(grpc.RpcError) as err:
        stub.UpsertDocuments(pb.UpsertDocumentsRequest(tenant=TENANT, documents=bad))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    found = field_violations_of(err.value)
    assert len(found) == 21
    assert found[0][0].startswith("documents[0].document_id")
    assert found[-1] == ("", "280 more violation(s) not listed; fix these and retry")
