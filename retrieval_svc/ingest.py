"""Chunking: documents become parent passages (sections) split into overlapping child chunks."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from candor.text import units
from retrieval_svc.embed.wordpiece import token_counts
from retrieval_svc.stores.base import Chunk

TokenCounter = Callable[[Sequence[str]], list[int]]
"""Tokens per word; chunk sizes are budgets in these units (WordPiece tokens by default)."""

_HEADING = re.compile(r"^(#{1,6})\s+(.+?)\s*#*\s*$", re.MULTILINE)


@dataclass(frozen=True)
class SourceDocument:
    tenant: str
    document_id: str
    title: str
    text: str
    source_kind: int
    uri: str = ""
    question: str = ""


def generation_of(doc: SourceDocument) -> str:
    """Content hash of a document version; chunks of other versions are replaced."""
    h = hashlib.sha256()
    for part in (doc.title, doc.text, str(doc.source_kind), doc.uri, doc.question):
        h.update(part.encode())
        h.update(b"\x00")
    return h.hexdigest()[:16]


def sections(text: str) -> list[tuple[str, str]]:
    """Split markdown into (heading, body) sections; text before the first heading has ''."""
    out: list[tuple[str, str]] = []
    last_heading, last_end = "", 0
    for m in _HEADING.finditer(text):
        body = text[last_end : m.start()].strip()
        if body:
            out.append((last_heading, body))
        last_heading, last_end = m.group(2).strip(), m.end()
    body = text[last_end:].strip()
    if body:
        out.append((last_heading, body))
    return out


def _windows(costs: Sequence[int], size: int, overlap: int) -> list[tuple[int, int]]:
    """Word spans holding at most ``size`` tokens, each repeating ~``overlap`` tokens of the last.

    A single word longer than ``size`` gets a window of its own rather than being split.
    """
    spans: list[tuple[int, int]] = []
    start, n = 0, len(costs)
    while True:
        end, total = start, 0
        while end < n and (end == start or total + costs[end] <= size):
            total += costs[end]
            end += 1
        spans.append((start, end))
        if end >= n:
            return spans
        back, repeated = end, 0
        while back - 1 > start and repeated + costs[back - 1] <= overlap:
            back -= 1
            repeated += costs[back]
        start = back


@dataclass(frozen=True)
class Passage:
    """A parent passage: a section of a document (or a whole curated answer)."""

    parent_id: str
    heading: str
    text: str
    """The section body, without its heading."""


def parent_id(document_id: str, n: int) -> str:
    return f"{document_id}#p{n}"


def child_id(parent: str, n: int) -> str:
    """The id of a passage's ``n``-th window; every passage has a window 0."""
    return f"{parent}c{n}"


def passages(doc: SourceDocument) -> list[Passage]:
    """The document's parent passages, in order; their ids are the chunks' parent ids."""
    if doc.question:
        # A curated answer is one passage: the question and its answer stay together.
        return [Passage(parent_id(doc.document_id, 0), "", f"{doc.question}\n{doc.text}".strip())]
    return [
        Passage(parent_id(doc.document_id, p), heading, body)
        for p, (heading, body) in enumerate(sections(doc.text))
    ]


def chunk_document(
    doc: SourceDocument,
    chunk_tokens: int,
    overlap_tokens: int,
    count: TokenCounter = token_counts,
) -> list[Chunk]:
    """Deterministic chunks: ids depend only on the document id and position.

    Windows are cut at word boundaries to fit ``chunk_tokens`` of body text (the heading and
    title are added on top) and overlap by about ``overlap_tokens``.
    """
    gen = generation_of(doc)

    def make(passage: Passage, child: int, text: str) -> Chunk:
        return Chunk(
            tenant=doc.tenant,
            chunk_id=child_id(passage.parent_id, child),
            parent_id=passage.parent_id,
            document_id=doc.document_id,
            title=doc.title,
            text=text,
            source_kind=doc.source_kind,
            uri=doc.uri,
            generation=gen,
        )

    if doc.question:
        return [make(passage, 0, passage.text) for passage in passages(doc)]
    chunks: list[Chunk] = []
    for passage in passages(doc):
        # Units keep their trailing whitespace so lists and line breaks survive chunking.
        tokens = units(passage.text)
        costs = count([t.strip() for t in tokens])
        for c, (start, end) in enumerate(_windows(costs, chunk_tokens, overlap_tokens)):
            text = "".join(tokens[start:end]).strip()
            heading = passage.heading
            chunks.append(make(passage, c, f"{heading}\n\n{text}" if heading else text))
    return chunks


def embedding_text(chunk: Chunk) -> str:
    """What the dense arm embeds: the title gives a short chunk its topic."""
    return f"{chunk.title}\n{chunk.text}" if chunk.title else chunk.text
