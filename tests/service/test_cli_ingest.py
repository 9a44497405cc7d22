"""`candor ingest` / `reindex` / `delete` against a running retrieval service: every file is
ingested, reported as failed or said to be skipped; none is lost in silence."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import pytest

from candor.cli.main import main
from candor.cli.stack import start_stack
from candor.retrieval.v1 import retrieval_pb2 as pb
from candor.retrieval.v1 import retrieval_pb2_grpc as pb_grpc
from candor.settings import load_settings
from tests.helpers import Stack, stack_env


@pytest.fixture
def target(tmp_path: Path) -> Iterator[str]:
    stack = Stack(lambda: start_stack(load_settings(env=stack_env(str(tmp_path / "data")))))
    try:
        yield stack.address("RetrievalService")
    finally:
        stack.stop()


def _ids(target: str) -> set[str]:
    with grpc.insecure_channel(target) as ch:
        reply = pb_grpc.RetrievalServiceStub(ch).Retrieve(
            pb.RetrieveRequest(tenant="default", query="refund window policy", top_k=50)
        )
    return {c.document_id for c in reply.candidates}


def _tree(root: Path, files: dict[str, str | bytes]) -> Path:
    for name, body in files.items():
        f = root / name
        f.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(body, bytes):
            f.write_bytes(body)
        else:
            f.write_text(body, encoding="utf-8")
    return root


def test_every_file_is_ingested_failed_or_skipped_out_loud(
    tmp_path: Path, target: str, capsys: pytest.CaptureFixture[str]
) -> None:
    src = _tree(
        tmp_path / "src",
        {
            "2024.md": "The 2024 refund policy: refunds within 30 days.",
            "GDPR.md": "Refund requests under GDPR are answered within a month.",
            "退款.md": "Refund window policy in Chinese: 退款期限为三十天。",
            "README.md": "About this folder.",
            "notes/empty.md": "   \n",
            "latin1.md": "Caf\xe9 refund policy".encode("latin-1"),
            "headings.md": "# Refunds\n\n## Window\n",
            "big.txt": "refund " * 200_000,  # over the service's 1,000,000 characters
            "rows.jsonl": '{"id": "r1", "text": "refund window"}\n',
            "ok.md": "Our refund window policy is thirty days.",
        },
    )
    code = main(["ingest", str(src), "--target", target])
    out, err = capsys.readouterr()
    assert code == 1  # some files failed
    assert _ids(target) == {"2024", "GDPR", "退款", "ok"}
    assert "ingested 4 documents" in out and "3 failed, 3 files skipped" in out
    for name, why in (
        ("latin1.md", "UTF-8"),
        ("headings.md", "outside its markdown headings"),
        ("big.txt", "at most 1000000 characters"),
    ):
        assert any(name in line and why in line for line in err.splitlines()), (name, err)
    for name in ("README.md", "empty.md", "rows.jsonl"):
        assert any("skipped" in line and name in line for line in err.splitlines()), name


def test_one_stem_in_two_folders_stops_before_anything_is_sent(tmp_path: Path, target: str) -> None:
    src = _tree(tmp_path / "src", {"a/refunds.md": "Refund window A.", "b/refunds.md": "B."})
    with pytest.raises(SystemExit, match=r"'refunds' comes from both .*a/refunds.md and .*b/"):
        main(["ingest", str(src), "--target", target])
    assert _ids(target) == set()


def test_reindex_keeps_what_left_the_tree_until_it_is_deleted(
    tmp_path: Path, target: str, capsys: pytest.CaptureFixture[str]
) -> None:
    src = _tree(
        tmp_path / "src",
        {"keep.md": "Refund window policy: 30 days.", "gone.md": "Old refund window policy."},
    )
    assert main(["ingest", str(src), "--target", target]) == 0
    (src / "gone.md").unlink()
    assert main(["reindex", str(src), "--target", target]) == 0
    assert _ids(target) == {"keep", "gone"}
    assert main(["delete", "gone", "missing", "--target", target]) == 0
    out, err = capsys.readouterr()
    assert "deleted 1 of 2 documents, 0 failed" in out
    assert "missing: DOCUMENT_OUTCOME_NOT_FOUND" in err
    assert _ids(target) == {"keep"}


def test_a_delete_that_failed_for_some_document_exits_1(
    target: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # A store that refused the delete (down, disk full) must not look like success to a script.
    from candor.cli import client

    monkeypatch.setattr(client, "delete", lambda *a: (1, 1))
    assert main(["delete", "a", "b", "--target", target]) == 1
    assert "deleted 1 of 2 documents, 1 failed" in capsys.readouterr().out


def test_a_files_title_is_its_first_heading_outside_code_within_the_limit(tmp_path: Path) -> None:
    from candor.cli.client import SourceNotes, read_documents
    from candor.runtime.validation import MAX_TITLE_CHARS

    src = _tree(
        tmp_path / "src",
        {
            # A byte-order mark hid the heading; a bash comment in a fence was the title; a
            # 1,439-character heading failed the file.
            "bom.md": "\ufeff# Refund Policy\nRefunds take 30 days.".encode(),
            "code.md": "```bash\n# install the tool\n```\n# Setup guide\nRun it.",
            "long.md": "# " + "Refunds " * 180 + "\nBody.",
            # An id the service refuses failed the whole batch it was sent in.
            "notes .md": "Refund notes.",
        },
    )
    notes = SourceNotes()
    titles = {d.document_id: (d.title, d.text) for d in read_documents(src, notes)}
    assert "notes " not in titles
    assert any("notes .md: its name is not a usable document id" in f for f in notes.failed)
    assert titles["bom"] == ("Refund Policy", "# Refund Policy\nRefunds take 30 days.")
    assert titles["code"][0] == "Setup guide"
    assert len(titles["long"][0]) == MAX_TITLE_CHARS


def test_a_file_over_the_message_limit_fails_alone_and_the_rest_are_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Batches were 16 documents whatever their bytes: one large file failed its whole batch
    # with RESOURCE_EXHAUSTED, named no file, and stopped the ingest.
    env = stack_env(str(tmp_path / "data"), CANDOR_RETRIEVAL__SERVER__MAX_MESSAGE_BYTES="65536")
    stack = Stack(lambda: start_stack(load_settings(env=env), "retrieval"))
    try:
        target = stack.address("RetrievalService")
        src = _tree(
            tmp_path / "src",
            {
                "big.md": "Refund window policy. " * 5000,  # ~110 kB
                "small.md": "The refund window policy is 30 days.",
                "other.md": "Refunds for labels follow the refund window policy.",
            },
        )
        code = main(["ingest", str(src), "--target", target])
        err = capsys.readouterr().err
        assert code == 1
        assert "big.md: larger than the service accepts in one message" in err
        assert _ids(target) == {"small", "other"}
    finally:
        stack.stop()


def test_batches_are_bounded_in_bytes_as_well_as_documents() -> None:
    from candor.cli import client

    big = pb.Document(document_id="big", text="x" * (client.BATCH_BYTES - 100))
    small = [pb.Document(document_id=f"s{i}", text="y" * 200) for i in range(40)]
    sizes = [[d.document_id for d in b] for b in client._batches([big, *small], 16)]
    assert sizes[0] == ["big"] and all(len(b) <= 16 for b in sizes)
    assert sum(len(b) for b in sizes) == 41


def test_links_odd_names_and_a_mistyped_path_are_said_out_loud(
    tmp_path: Path, target: str, capsys: pytest.CaptureFixture[str]
) -> None:
    import os

    src = _tree(tmp_path / "src", {"refunds.md": "The refund window policy is 30 days."})
    outside = _tree(tmp_path / "outside", {"far.md": "Refund window policy, far away."})
    os.symlink(outside, src / "linked")
    os.symlink(src / "refunds.md", src / "again.md")
    os.symlink(src / "gone.md", src / "dangling.md")
    (src / os.fsdecode(b"caf\xe9.md")).write_text("Refund window policy, Latin-1 name.")
    code = main(["ingest", str(src), "--target", target])
    err = capsys.readouterr().err
    assert code == 1  # the undecodable name failed
    assert "linked: a linked directory (not followed)" in err
    assert "dangling.md: a broken link" in err
    assert "again.md: a link to" in err
    assert "its name is not UTF-8" in err
    assert _ids(target) == {"refunds"}

    assert main(["ingest", str(tmp_path / "no-such-dir"), "--target", target]) == 2
    assert "no such file or directory" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("line", "says"),
    [
        ('["not", "an", "object"]', "not a document row"),
        ('{"id": "j1", "text": null}', "not strings: ['text']"),
        ('{"id": "j1", "text": "x", "source_kind": "curated"}', "'source_kind' must be one of"),
        ('{"id": "j1", "text": "x", "source_kind": ["document"]}', "'source_kind' must be one of"),
    ],
)
def test_a_bad_jsonl_row_is_named_with_its_line_and_nothing_is_sent(
    tmp_path: Path, target: str, capsys: pytest.CaptureFixture[str], line: str, says: str
) -> None:
    rows = tmp_path / "rows.jsonl"
    rows.write_text('{"id": "ok", "text": "Refund window policy."}\n' + line + "\n")
    with pytest.raises(SystemExit, match=f"rows.jsonl:2: .*{re.escape(says)}"):
        main(["ingest", str(rows), "--target", target])
    assert _ids(target) == set()


def test_jsonl_rows_keep_line_separators_and_a_byte_order_mark_is_ignored(
    tmp_path: Path, target: str
) -> None:
    rows = tmp_path / "rows.jsonl"
    text = "Refund window policy\u2028 is 30 days."
    rows.write_text("\ufeff" + json.dumps({"id": "j1", "text": text}, ensure_ascii=False) + "\n")
    assert main(["ingest", str(rows), "--target", target]) == 0
    assert _ids(target) == {"j1"}
    (tmp_path / "dup.jsonl").write_text(
        '{"id": "j2", "text": "a"}\n{"id": "j2", "text": "b"}\n', encoding="utf-8"
    )
    with pytest.raises(SystemExit, match=r"dup\.jsonl:2: document id 'j2' is also on line 1"):
        main(["ingest", str(tmp_path / "dup.jsonl"), "--target", target])


def test_ask_during_a_retrieval_outage_exits_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The refusal (ARMS_UNAVAILABLE) printed "I don't have information" with exit 0: a script
    # could not tell an outage from a question the knowledge base lacks.
    from tests.helpers import free_ports

    dead = f"127.0.0.1:{free_ports(1)[0]}"
    env = stack_env(
        str(tmp_path / "data"),
        CANDOR_GATE__RETRIEVAL_TARGET=dead,
        CANDOR_GATE__GENERATOR_TARGET=dead,
    )
    stack = Stack(lambda: start_stack(load_settings(env=env), "gate"))
    try:
        code = main(["ask", "What is the refund window?", "--target", stack.address("GateService")])
    finally:
        stack.stop()
    captured = capsys.readouterr()
    assert code == 1 and "retrieval is unavailable" in captured.err
    assert "[REFUSE: ARMS_UNAVAILABLE]" in captured.out


def test_a_batch_with_many_rejected_documents_writes_the_rest(
    tmp_path: Path, target: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # Past 20 violations the service lists "N more" with no field: the ingest read that as a
    # bad request and stopped, writing none of the good rows.
    rows = [{"id": f"ok{i}", "text": "Refund window policy."} for i in range(3)]
    # Two violations each (title and uri), so a batch of 16 holds more than 20.
    bad = {"title": "Two\nlines", "uri": "u" * 5000, "text": "Refund."}
    rows += [{"id": f"bad{i}", **bad} for i in range(25)]
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert main(["ingest", str(path), "--target", target]) == 1
    out = capsys.readouterr().out
    assert "ingested 3 documents" in out and "25 failed" in out
    assert _ids(target) == {"ok0", "ok1", "ok2"}


class _Draining:
    """A gRPC front for the real retrieval service whose first ``failures`` upserts end
    UNAVAILABLE, as a pod draining in a rollout ends them."""

    METHOD = "/candor.retrieval.v1.RetrievalService/UpsertDocuments"

    def __init__(self, target: str, failures: int) -> None:
        self.failures, self.calls = failures, 0
        self._behind = grpc.insecure_channel(target)
        self._server = grpc.server(ThreadPoolExecutor(2))
        handler = grpc.method_handlers_generic_handler(
            "candor.retrieval.v1.RetrievalService",
            {"UpsertDocuments": grpc.unary_unary_rpc_method_handler(self._upsert)},
        )
        self._server.add_generic_rpc_handlers((handler,))
        self.address = f"127.0.0.1:{self._server.add_insecure_port('127.0.0.1:0')}"
        self._server.start()

    def _upsert(self, request: bytes, context: grpc.ServicerContext) -> bytes:
        self.calls += 1
        if self.failures:
            self.failures -= 1
            context.abort(grpc.StatusCode.UNAVAILABLE, "the pod is draining")
        return self._behind.unary_unary(self.METHOD)(request, timeout=60)  # type: ignore[no-any-return]

    def close(self) -> None:
        self._server.stop(0)
        self._behind.close()


@pytest.mark.parametrize(("failures", "lands"), [(2, True), (9, False)])
def test_an_upsert_that_meets_a_draining_pod_is_sent_again(
    tmp_path: Path,
    target: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    failures: int,
    lands: bool,
) -> None:
    # A rollout or a connection's age ended an upsert UNAVAILABLE and the whole ingest stopped.
    from candor.cli import client

    monkeypatch.setattr(client, "RETRY_PAUSES", (0.01, 0.01, 0.01))
    src = _tree(tmp_path / "src", {"policy.md": "The refund window policy is 30 days."})
    front = _Draining(target, failures)
    try:
        if lands:
            assert main(["ingest", str(src), "--target", front.address]) == 0
            assert _ids(target) == {"policy"}
            assert front.calls == failures + 1
        else:
            assert main(["ingest", str(src), "--target", front.address]) == 1
            assert front.calls == 4  # the first attempt and one per pause, then it stops
            assert _ids(target) == set()
    finally:
        front.close()
    err = capsys.readouterr().err
    assert "retrying in 0.01 s: retrieval unavailable (the pod is draining), attempt 2 of 4" in err
    assert ("candor: UNAVAILABLE: the pod is draining" in err) is not lands
