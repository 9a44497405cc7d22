"""Chunking: documents become parent passages (sections) split into overlapping child chunks."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

from retrieval_svc.stores.base import Chunk

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


def _windows(words: list[str], size: int, overlap: int) -> list[list[str]]:
    if len(words) <= size:
        return [words]
    step = size - overlap
    out = []
    for start in range(0, len(words), step):
        out.append(words[start : start + size])
        if start + size >= len(words):
            break
    return out


def chunk_document(doc: SourceDocument, chunk_words: int, overlap_words: int) -> list[Chunk]:
    """Deterministic chunks: ids depend only on the document id and position."""
    gen = generation_of(doc)

    def make(parent: int, child: int, text: str) -> Chunk:
        return Chunk(
            tenant=doc.tenant,
            chunk_id=f"{doc.document_id}#p{parent}c{child}",
            parent_id=f"{doc.document_id}#p{parent}",
            document_id=doc.document_id,
            title=doc.title,
            text=text,
            source_kind=doc.source_kind,
            uri=doc.uri,
            generation=gen,
        )

    if doc.question:
        # A curated answer is one passage: the question and its answer stay together.
        return [make(0, 0, f"{doc.question}\n{doc.text}".strip())]
    chunks: list[Chunk] = []
    for p, (heading, body) in enumerate(sections(doc.text)):
        # Tokens keep their trailing whitespace so lists and line breaks survive chunking.
        tokens = re.findall(r"\S+\s*", body)
        for c, window in enumerate(_windows(tokens, chunk_words, overlap_words)):
            text = "".join(window).strip()
            chunks.append(make(p, c, f"{heading}\n\n{text}" if heading else text))
    return chunks


def embedding_text(chunk: Chunk) -> str:
    """What the dense arm embeds: the title gives a short chunk its topic."""
    return f"{chunk.title}\n{chunk.text}" if chunk.title else chunk.text
