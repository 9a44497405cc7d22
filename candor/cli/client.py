"""gRPC client helpers the CLI (and the demo) use: ingest files, ask, search."""

from __future__ import annotations

import collections
import json
import os
import re
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from candor.common.v1 import evidence_pb2
from candor.gate.v1 import gate_pb2, gate_pb2_grpc
from candor.retrieval.v1 import retrieval_pb2, retrieval_pb2_grpc
from candor.runtime.admission import backoff_seconds, retry_delay_of
from candor.runtime.auth import API_KEY_HEADER
from candor.runtime.errors import field_violations_of

TEXT_SUFFIXES = {".md", ".markdown", ".txt"}
_KINDS = {
    "document": evidence_pb2.SOURCE_KIND_DOCUMENT,
    "curated_answer": evidence_pb2.SOURCE_KIND_CURATED_ANSWER,
}


def metadata(api_key: str | None) -> tuple[tuple[str, str], ...]:
    return ((API_KEY_HEADER, api_key),) if api_key else ()


def _title_of(text: str, fallback: str) -> str:
    """The first level-1 heading outside code ("# fetch it" in a bash block is a comment),
    within the API's title limit; else ``fallback``."""
    from candor.runtime.validation import MAX_TITLE_CHARS
    from retrieval_svc.ingest import headings

    for level, heading, _, _ in headings(text):
        if level == 1 and heading:
            return heading[:MAX_TITLE_CHARS]
    return fallback


def _id_problem(document_id: str) -> str:
    """Why the service would refuse ``document_id`` for an upsert ("" if it would not)."""
    from candor.runtime.errors import FieldViolations
    from candor.runtime.validation import check_document_ids

    v = FieldViolations()
    check_document_ids([document_id], v, "id", new=True)
    return "; ".join(why for _, why in v.items)


NOT_CORPUS = frozenset({"README", "QUESTIONS", "LICENSE", "CHANGELOG", "CONTRIBUTING", "NOTICE"})
"""File stems (any case) that describe a source tree rather than belong to it."""


@dataclass
class SourceNotes:
    """What reading a source tree left out, file by file: said, never silent."""

    skipped: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)


def _listing(path: Path, notes: SourceNotes) -> list[Path]:
    """The files under ``path``, sorted. Links are named, never silently dropped: a broken
    one or a linked directory is skipped (not followed: it may lead anywhere, even back), and
    a linked file already in the tree under its real name is not ingested twice."""
    if not path.is_dir():
        return [path]
    files: list[Path] = []
    for root, dirs, names in os.walk(path):
        here = Path(root)
        for d in sorted(dirs):
            if (here / d).is_symlink():
                notes.skipped.append(f"{here / d}: a linked directory (not followed)")
        for name in names:
            f = here / name
            if f.is_symlink() and not f.exists():
                notes.skipped.append(f"{f}: a broken link")
            elif f.is_file():
                files.append(f)
    # Only a target that is itself ingested makes a link a duplicate ("guide.md -> README.md"
    # is the one copy of that text that is ingested).
    real = {
        f.resolve(): f
        for f in sorted(files)
        if not f.is_symlink()
        and f.suffix.lower() in TEXT_SUFFIXES
        and f.stem.upper() not in NOT_CORPUS
    }
    kept = []
    for f in sorted(files):
        if f.is_symlink() and f.resolve() in real:
            notes.skipped.append(f"{f}: a link to {real[f.resolve()]}, ingested under its own name")
        else:
            kept.append(f)
    return kept


def read_documents(
    path: Path, notes: SourceNotes | None = None
) -> Iterator[retrieval_pb2.Document]:
    """Markdown/text files (one document each, id = file stem) and, given on its own, a JSONL
    file (one object per line). Files left out are recorded in ``notes``."""
    notes = notes if notes is not None else SourceNotes()
    for f in _listing(path, notes):
        suffix = f.suffix.lower()
        if suffix in TEXT_SUFFIXES:
            if f.stem.upper() in NOT_CORPUS and path.is_dir():
                notes.skipped.append(f"{f}: describes the tree, not part of it")
                continue
            try:
                f.stem.encode("utf-8")
            except UnicodeEncodeError:
                named = os.fsencode(f).decode("utf-8", "backslashreplace")  # printable
                notes.failed.append(f"{named}: its name is not UTF-8, so it is no document id")
                continue
            try:
                # utf-8-sig: a byte-order mark hid the first heading and was indexed as text.
                text = f.read_text(encoding="utf-8-sig")
            except (OSError, UnicodeDecodeError) as exc:
                notes.failed.append(f"{f}: not readable as UTF-8 text ({exc})")
                continue
            if not text.strip():
                notes.skipped.append(f"{f}: empty")
                continue
            if why := _id_problem(f.stem):
                # Sent, it failed the whole batch it travelled in.
                notes.failed.append(f"{f}: its name is not a usable document id ({why})")
                continue
            yield retrieval_pb2.Document(
                document_id=f.stem, title=_title_of(text, f.stem), text=text, uri=str(f)
            )
        elif suffix == ".jsonl" and path.is_dir():
            # A .jsonl in a tree is as often an evaluation file as a corpus: only on its own.
            notes.skipped.append(f"{f}: JSONL rows are ingested only from the file given alone")
        elif suffix != ".jsonl":
            notes.skipped.append(f"{f}: not {', '.join(sorted(TEXT_SUFFIXES))} or .jsonl")
        else:
            yield from _jsonl_documents(f)


def _jsonl_documents(f: Path) -> Iterator[retrieval_pb2.Document]:
    """One document per JSON object line: ``id`` and ``text`` strings; ``title``, ``uri``,
    ``question`` strings when given; ``source_kind`` one of :data:`_KINDS`."""
    try:
        # Lines end at "\n" only: U+2028 and its kin are text inside a JSON string.
        lines = f.read_text(encoding="utf-8-sig").split("\n")
    except (OSError, UnicodeDecodeError) as exc:
        raise SystemExit(f"{f}: not readable as UTF-8 text ({exc})") from exc
    first: dict[str, int] = {}
    for n, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError as exc:
            raise SystemExit(f"{f}:{n}: not JSON ({exc})") from exc
        if not isinstance(row, dict):
            raise SystemExit(f"{f}:{n}: not a document row (a JSON object)")
        fields = {k: row.get(k, "") for k in ("id", "text", "title", "uri", "question")}
        # null was indexed as the text "None".
        wrong = [k for k, v in fields.items() if not isinstance(v, str)]
        if wrong or "id" not in row or "text" not in row:
            raise SystemExit(
                f"{f}:{n}: a document row needs string 'id' and 'text' (and string 'title', "
                f"'uri', 'question' when given){f'; not strings: {wrong}' if wrong else ''}"
            )
        kind = row.get("source_kind", "document")
        if not isinstance(kind, str) or kind not in _KINDS:
            raise SystemExit(f"{f}:{n}: 'source_kind' must be one of {', '.join(_KINDS)}")
        doc_id = str(fields["id"])
        if doc_id in first:
            raise SystemExit(
                f"{f}:{n}: document id {doc_id!r} is also on line {first[doc_id]} "
                "(nothing was sent)"
            )
        first[doc_id] = n
        yield retrieval_pb2.Document(
            document_id=doc_id,
            title=str(fields["title"]),
            text=str(fields["text"]),
            uri=str(fields["uri"]),
            question=str(fields["question"]),
            source_kind=_KINDS[kind],
        )


@dataclass
class IngestReport:
    written: int = 0
    failed: int = 0
    chunks: int = 0
    skipped: int = 0


def _unique_ids(docs: Sequence[retrieval_pb2.Document]) -> None:
    """Two files with one stem would be one document, the second silently replacing the first."""
    first: dict[str, str] = {}
    for d in docs:
        where = d.uri or d.document_id
        if d.document_id in first:
            raise SystemExit(
                f"document id {d.document_id!r} comes from both {first[d.document_id]} and "
                f"{where}: ids are file stems, so rename one (nothing was sent)"
            )
        first[d.document_id] = where


def ingest(
    channel: grpc.Channel,
    path: Path,
    tenant: str,
    api_key: str | None,
    batch: int = 16,
    progress: Callable[[int, int], None] | None = None,
    hypothetical_questions: bool = False,
) -> IngestReport:
    notes = SourceNotes()
    docs = list(read_documents(path, notes))
    _unique_ids(docs)
    for line in notes.skipped:
        print(f"  skipped: {line}", file=sys.stderr)
    for line in notes.failed:
        print(f"  failed: {line}", file=sys.stderr)
    report = upsert(channel, docs, tenant, api_key, batch, progress, hypothetical_questions)
    report.failed += len(notes.failed)
    report.skipped = len(notes.skipped)
    return report


def _rejected_documents(exc: grpc.RpcError) -> dict[int, str] | None:
    """Batch positions the service rejected, with why; None when the whole request was bad."""
    if exc.code() != grpc.StatusCode.INVALID_ARGUMENT:  # type: ignore[attr-defined]
        return None
    out: dict[int, str] = {}
    for name, why in field_violations_of(exc):
        if not name:
            continue  # "N more violation(s) not listed": the resend reports them
        m = re.match(r"documents\[(\d+)\](?:\.(\w+))?", name)
        if m is None:
            return None
        out.setdefault(int(m.group(1)), f"{m.group(2) or 'document'}: {why}")
    return out or None


def upsert(
    channel: grpc.Channel,
    docs: Sequence[retrieval_pb2.Document],
    tenant: str,
    api_key: str | None,
    batch: int = 16,
    progress: Callable[[int, int], None] | None = None,
    hypothetical_questions: bool = False,
) -> IngestReport:
    """UpsertDocuments in batches; failed documents are counted and printed, not raised.

    ``hypothetical_questions`` asks the service to index LLM-written questions per passage
    (it must have a question generator configured, else INVALID_ARGUMENT).
    """
    stub = retrieval_pb2_grpc.RetrievalServiceStub(channel)
    report = IngestReport()
    queue = collections.deque(_batches(docs, batch))
    done = 0
    while queue:
        chunk = queue.popleft()
        n = len(chunk)  # _send drops what the service rejects
        try:
            reply = _send(stub, chunk, tenant, api_key, hypothetical_questions, report)
        except grpc.RpcError as exc:
            if exc.code() != grpc.StatusCode.RESOURCE_EXHAUSTED:  # type: ignore[attr-defined]
                # Stopped part-way: say what already landed, on a line of its own.
                print(
                    f"\n  stopped: {report.written} document(s) written, {report.failed} "
                    f"failed, {len(docs) - done} not sent",
                    file=sys.stderr,
                )
                raise
            if len(chunk) > 1:
                # Over the service's message limit (set lower than ours): one at a time.
                queue.extendleft([d] for d in reversed(chunk))
                continue
            report.failed += 1
            print(
                f"\n  failed: {chunk[0].uri or chunk[0].document_id}: larger than the service "
                f"accepts in one message ({chunk[0].ByteSize():,} bytes)",
                file=sys.stderr,
            )
            reply = retrieval_pb2.UpsertDocumentsResponse()
        done += n
        for r in reply.results:
            if r.outcome == retrieval_pb2.DOCUMENT_OUTCOME_FAILED:
                report.failed += 1
                print(f"  failed: {r.document_id}: {r.error}", file=sys.stderr)
            else:
                report.written += 1
                report.chunks += r.chunks
                if r.question_error:
                    print(f"  questions for {r.document_id}: {r.question_error}", file=sys.stderr)
        if progress is not None:
            progress(done, len(docs))
    return report


def _send(
    stub: retrieval_pb2_grpc.RetrievalServiceStub,
    chunk: list[retrieval_pb2.Document],
    tenant: str,
    api_key: str | None,
    hypothetical_questions: bool,
    report: IngestReport,
) -> retrieval_pb2.UpsertDocumentsResponse:
    """One UpsertDocuments. The service rejects a whole batch for one bad document and writes
    none of it: those documents are reported failed and the rest sent again. UNAVAILABLE (a
    pod restarting or draining in a rollout) is retried after a pause: an upsert of the same
    documents writes them once."""
    unavailable = 0
    while True:
        try:
            reply: retrieval_pb2.UpsertDocumentsResponse = stub.UpsertDocuments(
                retrieval_pb2.UpsertDocumentsRequest(
                    tenant=tenant, documents=chunk, hypothetical_questions=hypothetical_questions
                ),
                metadata=metadata(api_key),
                timeout=300,
            )
            return reply
        except grpc.RpcError as exc:
            if _paused_after_unavailable(exc, unavailable):
                unavailable += 1
                continue
            rejected = _rejected_documents(exc)
            if rejected is None:
                raise
            for i, why in sorted(rejected.items()):
                report.failed += 1
                print(f"  failed: {chunk[i].uri or chunk[i].document_id}: {why}", file=sys.stderr)
            chunk[:] = [d for i, d in enumerate(chunk) if i not in rejected]
            if not chunk:
                return retrieval_pb2.UpsertDocumentsResponse()


def _pause(seconds: float) -> None:
    """Every retry's wait (one place for tests to stand in for the clock)."""
    time.sleep(seconds)


def _paused_after_unavailable(exc: grpc.RpcError, attempt: int) -> bool:
    """After an UNAVAILABLE (a pod restarting or draining, or shedding load), wait the
    attempt's pause and say so; False when the error is another or the pauses are spent."""
    if exc.code() != grpc.StatusCode.UNAVAILABLE or attempt >= len(RETRY_PAUSES):  # type: ignore[attr-defined]
        return False
    pause = RETRY_PAUSES[attempt]
    print(
        f"\n  retrying in {pause:g} s: retrieval unavailable "
        f"({exc.details()}), attempt {attempt + 2} of {len(RETRY_PAUSES) + 1}",  # type: ignore[attr-defined]
        file=sys.stderr,
    )
    _pause(pause)
    return True


RETRY_PAUSES: tuple[float, ...] = (1.0, 2.0, 4.0, 8.0, 16.0)
"""Pauses before each new attempt at a batch that met UNAVAILABLE: about 30 s in all, what a
retrieval pod takes to restart (docs/operations.md)."""

BATCH_BYTES = 3 * 1024 * 1024
"""A request's documents at most (gRPC's default message limit is 4 MiB): batches were 16
documents whatever their size, and five 1 MB files made one request the service refused."""


def _batches(
    docs: Sequence[retrieval_pb2.Document], most: int
) -> Iterator[list[retrieval_pb2.Document]]:
    """At most ``most`` documents and BATCH_BYTES per batch; a larger document goes alone."""
    batch: list[retrieval_pb2.Document] = []
    size = 0
    for doc in docs:
        n = doc.ByteSize()
        if batch and (len(batch) == most or size + n > BATCH_BYTES):
            yield batch
            batch, size = [], 0
        batch.append(doc)
        size += n
    if batch:
        yield batch


def delete(
    channel: grpc.Channel, document_ids: Sequence[str], tenant: str, api_key: str | None
) -> tuple[int, int]:
    """DeleteDocuments in calls of at most 500; prints the ids not deleted and why. Returns
    (deleted, failed): an id that was not there is neither."""
    stub = retrieval_pb2_grpc.RetrievalServiceStub(channel)
    deleted = failed = 0
    resent = False
    for start in range(0, len(document_ids), 500):
        unavailable = 0
        while True:
            try:
                reply = stub.DeleteDocuments(
                    retrieval_pb2.DeleteDocumentsRequest(
                        tenant=tenant, document_ids=document_ids[start : start + 500]
                    ),
                    metadata=metadata(api_key),
                    timeout=300,
                )
                break
            except grpc.RpcError as exc:
                # A delete of the same ids twice deletes them once: safe to send again.
                if not _paused_after_unavailable(exc, unavailable):
                    raise
                unavailable += 1
                resent = True
        for r in reply.results:
            if r.outcome == retrieval_pb2.DOCUMENT_OUTCOME_DELETED:
                deleted += 1
            else:
                failed += r.outcome == retrieval_pb2.DOCUMENT_OUTCOME_FAILED
                outcome = retrieval_pb2.DocumentOutcome.Name(r.outcome)
                print(f"  {r.document_id}: {outcome} {r.error}".rstrip(), file=sys.stderr)
    if resent:
        print(
            "  a call was sent again after UNAVAILABLE: ids reported NOT_FOUND may have been "
            "deleted by the first attempt",
            file=sys.stderr,
        )
    return deleted, failed


def status_line(text: str, last: bool) -> None:
    """Progress on stderr: redrawn in place on a terminal, one line an update otherwise (a log
    file keeps the carriage returns, and the updates ran together on one line)."""
    if sys.stderr.isatty():
        print(f"\r{text}", end="\n" if last else "", file=sys.stderr, flush=True)
    else:
        print(text, file=sys.stderr, flush=True)


def print_progress(done: int, total: int) -> None:
    width = 30
    filled = int(width * done / max(total, 1))
    status_line(f"  ingest [{'#' * filled}{'.' * (width - filled)}] {done}/{total}", done >= total)


def n_documents(n: int) -> str:
    """``n`` with "document" or "documents"."""
    return f"{n} document" if n == 1 else f"{n} documents"


@dataclass
class AskResult:
    decision: gate_pb2.Decision
    answer: str
    final: gate_pb2.AskResponse | None
    error: str = ""
    """Why the stream failed after the decision came (the generator down, say)."""
    retry_after: float | None = None
    """The retry hint when that failure was a generator's shed: its token unspent, so asking
    again is safe."""


SHED_RETRIES = 3
"""Times ``candor ask`` asks again when it is shed: by the gate before any decision, or by
the generator after one."""


def ask(
    channel: grpc.Channel, query: str, tenant: str, api_key: str | None, timeout: float = 30
) -> AskResult:
    """One Ask; a shed (OVERLOADED, TENANT_LIMIT; the generator's after a decision) is asked
    again after its retry hint, with exponential backoff and jitter, up to SHED_RETRIES times."""
    for attempt in range(SHED_RETRIES + 1):
        last = attempt == SHED_RETRIES
        try:
            result = _ask_once(channel, query, tenant, api_key, timeout)
        except grpc.RpcError as exc:
            hint = retry_delay_of(exc)
            if hint is None or last:
                raise
            busy = "the gate"
        else:
            if result.retry_after is None or last:
                return result
            hint, busy = result.retry_after, "the generator"
        wait = backoff_seconds(hint, attempt)
        print(f"candor: {busy} is busy; asking again in {wait:.1f} s", file=sys.stderr)
        _pause(wait)
    raise AssertionError("unreachable")


def _ask_once(
    channel: grpc.Channel, query: str, tenant: str, api_key: str | None, timeout: float
) -> AskResult:
    stub = gate_pb2_grpc.GateServiceStub(channel)
    decision: gate_pb2.Decision | None = None
    parts: list[str] = []
    final = None
    try:
        for event in stub.Ask(
            gate_pb2.AskRequest(tenant=tenant, query=query),
            metadata=metadata(api_key),
            timeout=timeout,
        ):
            kind = event.WhichOneof("event")
            if kind == "decision":
                decision = event.decision
            elif kind == "delta":
                parts.append(event.delta.text)
            else:
                final = event
    except grpc.RpcError as exc:
        if decision is None:
            raise
        # The gate decided (and --debug must show why) before generation failed.
        error = f"{exc.code().name}: {exc.details()}"  # type: ignore[attr-defined]
        return AskResult(decision, "".join(parts), final, error, retry_delay_of(exc))
    return AskResult(decision or gate_pb2.Decision(), "".join(parts), final)


_CONTROL = {c: f"\\x{c:02x}" for c in range(32) if chr(c) not in "\n"} | {0x7F: "\\x7f"}


def shown(text: str) -> str:
    """Text from the service as a terminal may print it: control characters (a title's ESC
    sequences could recolour or rewrite the screen) escaped; line breaks kept."""
    return text.translate(_CONTROL)


def format_ask(result: AskResult, debug: bool) -> str:
    d = result.decision
    lines = []
    outcome = gate_pb2.Outcome.Name(d.outcome).removeprefix("OUTCOME_")
    tier = evidence_pb2.Tier.Name(d.tier).removeprefix("TIER_")
    if d.outcome == gate_pb2.OUTCOME_CLARIFY and result.final is not None:
        # The generator's one clarifying question is the answer a CLARIFY gets.
        lines.append(shown(result.final.final.answer))
        lines.append(f"  [{outcome}: {gate_pb2.Reason.Name(d.reason).removeprefix('REASON_')}]")
    elif d.outcome == gate_pb2.OUTCOME_PASS and result.final is not None:
        f = result.final.final
        tier = evidence_pb2.Tier.Name(f.tier).removeprefix("TIER_")
        lines.append(shown(f.answer))
        lines.append(f"  [{tier}, confidence {d.display_confidence}%]")
        # Answer markers [n] number the evidence, so list each cited evidence once by that n.
        index = {e.chunk_id: (i, e) for i, e in enumerate(d.evidence, start=1)}
        listed: set[str] = set()
        for c in f.citations:
            if c.chunk_id in listed:
                continue
            listed.add(c.chunk_id)
            n, ev = index.get(c.chunk_id, (0, evidence_pb2.Evidence(title="?", document_id="?")))
            mark = "verified" if c.verified else f"FAILED: {c.failure}"
            lines.append(
                shown(f"  [{n}] {ev.title} ({ev.document_id}, {c.chunk_id}) - {mark}").replace(
                    "\n", " "
                )
            )
    elif result.error:
        lines.append(f"(no answer: {result.error})")
        lines.append(f"  [{outcome}, confidence {d.display_confidence}%]")
    else:
        lines.append(shown(d.refusal_message) or "(no answer)")
        lines.append(f"  [{outcome}: {gate_pb2.Reason.Name(d.reason).removeprefix('REASON_')}]")
    if debug:
        lines.append(
            f"  policy {d.policy_name} version {d.policy_version}; outcome {outcome}, "
            f"tier {tier}, confidence {d.confidence:.3f}"
        )
        lines.append(f"  reason: {gate_pb2.Reason.Name(d.reason)}: {d.reason_detail}")
        lines.append("  signals:    " + ", ".join(f"{s.name}={s.value:.4g}" for s in d.signals))
        lines.append("  thresholds: " + ", ".join(f"{t.name}={t.value:g}" for t in d.thresholds))
        if d.missing_facets:
            lines.append("  missing facets: " + shown(", ".join(d.missing_facets)))
        if d.rewritten_query:
            lines.append("  searched as: " + shown(d.rewritten_query))
        if d.HasField("shadow"):
            sh = d.shadow
            lines.append(
                f"  shadow {sh.policy_version}: "
                f"{gate_pb2.Outcome.Name(sh.outcome).removeprefix('OUTCOME_')}, "
                f"confidence {sh.confidence:.3f} ({'agrees' if sh.agrees else 'DISAGREES'})"
            )
        for a in d.arms:
            lines.append(
                f"  arm {retrieval_pb2.Arm.Name(a.arm)}: {retrieval_pb2.ArmState.Name(a.state)} "
                f"{a.latency.ToNanoseconds() / 1e6:.1f} ms, {a.hits} hits {a.detail}"
            )
    return "\n".join(lines)


def search(
    channel: grpc.Channel, query: str, tenant: str, api_key: str | None, top_k: int = 10
) -> retrieval_pb2.RetrieveResponse:
    stub = retrieval_pb2_grpc.RetrievalServiceStub(channel)
    reply: retrieval_pb2.RetrieveResponse = stub.Retrieve(
        retrieval_pb2.RetrieveRequest(tenant=tenant, query=query, top_k=top_k),
        metadata=metadata(api_key),
        timeout=10,
    )
    return reply


def format_search(reply: retrieval_pb2.RetrieveResponse) -> str:
    lines = [f"{'#':>2} {'fused':>7} {'cos':>6} {'bm25':>7} both  chunk"]
    for c in reply.candidates:
        cos = f"{c.dense.raw_score:.3f}" if c.dense.rank else "-"
        bm = f"{c.keyword.raw_score:.2f}" if c.keyword.rank else "-"
        both = "yes" if c.in_both else "no"
        lines.append(
            f"{c.fused_rank:>2} {c.fused_score:7.4f} {cos:>6} {bm:>7} {both:4} "
            f"{shown(c.chunk_id)}  {shown(c.title)}".replace("\n", " ")
        )
    for a in reply.arms:
        lines.append(f"arm {retrieval_pb2.Arm.Name(a.arm)}: {retrieval_pb2.ArmState.Name(a.state)}")
    return "\n".join(lines)
