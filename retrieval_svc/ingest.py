"""Chunking: documents become parent passages (sections) split into overlapping child chunks."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from functools import lru_cache

from candor.text import is_blank, units
from retrieval_svc.embed.wordpiece import token_counts
from retrieval_svc.stores.base import CURATED_ANSWER, Chunk

TokenCounter = Callable[[Sequence[str]], list[int]]
"""Tokens per word; chunk sizes are budgets in these units (WordPiece tokens by default)."""

# An ATX heading: "#" to "######", a space, its text, and an optional closing run of "#" that
# needs a space before it ("# C#" is about C#). A bare "#" is an empty heading, not the start of
# one that takes the next line for its text.
_HEADING = re.compile(r"(#{1,6})(?:[ \t]+(.*?))??(?:[ \t]+#+)?[ \t]*")
_FENCE = re.compile(r"[ ]{0,3}(`{3,}|~{3,})")
_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+$")
#: The fewest tokens any bundled embedder reads of a chunk (MiniLM: 256, less its two markers).
EMBED_WINDOW_TOKENS = 250
#: What a title or heading may take of that window: a 1,000-character title (212 tokens) left
#: the body of every chunk past the embedder's window, unseen by the dense arm.
TITLE_TOKENS = 64
HEADING_TOKENS = 96
#: A chunk's body never shrinks below this (the caps above leave it 90 at least).
MIN_BODY_TOKENS = 32


@dataclass(frozen=True)
class SourceDocument:
    tenant: str
    document_id: str
    title: str
    text: str
    source_kind: int
    uri: str = ""
    question: str = ""


INDEXING_VERSION = 3
"""Bump when :func:`chunk_document` cuts the same text and settings differently, or
:func:`embedding_text` embeds a chunk differently, so that a re-ingest replaces every chunk
made the old way (2: a curated answer embeds only its first CURATED_EMBED_TOKENS; 3: a heading
path too long for a chunk's head opens its body)."""


def generation_of(doc: SourceDocument, chunking: tuple[int, int] | None = None) -> str:
    """Hash of a document version as chunked; chunks of other versions are replaced.

    ``chunking`` (chunk tokens, overlap tokens) is part of it: cut with other settings, the
    same content gives other windows under the same positional chunk ids, and a re-ingest
    after a settings change left the old windows published in the dense store (one arm
    searched text the other no longer held), unseen by verify and kept by reindex.
    """
    h = hashlib.sha256()
    for part in (doc.title, doc.text, str(doc.source_kind), doc.uri, doc.question):
        h.update(part.encode())
        h.update(b"\x00")
    h.update(f"indexing {INDEXING_VERSION}".encode())
    if chunking is not None:
        h.update(f" chunking {chunking[0]} {chunking[1]}".encode())
    return h.hexdigest()[:16]


def headings(text: str) -> Iterator[tuple[int, str, int, int]]:
    """Markdown headings outside fenced code: (level, text, start, end) with the line's
    character offsets ("# fetch the package" in a bash block is a comment, not a section)."""
    fence = ""
    at = 0
    # Lines end at "\r\n", "\r" or "\n", as in markdown: str.splitlines also breaks at form
    # feeds and U+2028, which markdown does not.
    for line in _LINE.findall(text):
        start, at = at, at + len(line)
        bare = line.rstrip("\r\n")
        if m := _FENCE.match(bare):
            marker = m.group(1)
            if not fence:
                # A backtick fence's info string has no backtick: "```x``` is inline" is code
                # inside a line, not a fence that swallows every later heading.
                if marker[0] == "`" and "`" in bare[m.end() :]:
                    continue
                fence = marker
            elif (
                marker[0] == fence[0] and len(marker) >= len(fence) and not bare[m.end() :].strip()
            ):
                fence = ""
            continue
        if not fence and (m := _HEADING.fullmatch(bare)):
            yield len(m.group(1)), (m.group(2) or "").strip(), start, at


def sections(text: str) -> list[tuple[str, str]]:
    """Split markdown into (heading, body) sections; text before the first heading has ''.

    A heading with no body of its own heads the next section with it ("Handbook / Billing /
    Refunds"): dropped, its words were in no chunk and no search found them."""
    out: list[tuple[str, str]] = []
    path: list[str] = []  # headings not yet followed by text, the current one last
    last_end = 0
    for _, heading, start, end in headings(text):
        if body := _readable(text[last_end:start]):
            out.append((" / ".join(path), body))
            path = []
        path = [*path, heading] if heading else path
        last_end = end
    if body := _readable(text[last_end:]):
        out.append((" / ".join(path), body))
    elif out and path:
        # Headings alone at the end: still words of the document (a document of headings
        # alone has no text to index, which the service refuses).
        out.append(("", " / ".join(path)))
    return out


def _readable(body: str) -> str:
    """``body`` stripped, or "" when nothing in it can be read (a NUL or a zero-width space
    under a heading made a chunk of its own, though the service refuses such a document)."""
    return "" if is_blank(body) else body.strip()


def cut_to_tokens(text: str, max_tokens: int, count: TokenCounter = token_counts) -> str:
    """``text``'s leading units within ``max_tokens`` (all of it when it fits).

    Units as chunks count them (a character of Chinese, not a run of it), and a single unit
    over the limit (a URL, a path) is cut by characters: kept whole, a title of 100 Chinese
    characters or one long URL took the body's whole window, whose chunks then held one
    token each."""
    pieces = units(text)
    costs = count([p.strip() for p in pieces])
    if sum(costs) <= max_tokens:
        return text
    kept: list[str] = []
    total = 0
    for piece, cost in zip(pieces, costs, strict=True):
        if total + cost > max_tokens:
            if not kept:  # one unit too long on its own: the characters that fit
                lo, hi = 0, len(piece)
                while lo < hi:
                    mid = (lo + hi + 1) // 2
                    if count([piece[:mid].strip()])[0] <= max_tokens:
                        lo = mid
                    else:
                        hi = mid - 1
                kept.append(piece[:lo])
            break
        kept.append(piece)
        total += cost
    return "".join(kept).strip()


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
    # A curated answer is one chunk whatever the settings.
    gen = generation_of(doc, None if doc.question else (chunk_tokens, overlap_tokens))

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
    title_cost = _cost(cut_to_tokens(doc.title, TITLE_TOKENS, count), count)
    for passage in passages(doc):
        heading = cut_to_tokens(passage.heading, HEADING_TOKENS, count)
        body = passage.text
        if passage.heading.startswith(heading):
            # The heading path past what a chunk's head may hold opens the body: cut off, its
            # words were in no chunk (40 empty headings in a row, an outside probe). Not a
            # single unit too long for any window (a 1,000-character run), cut off as before.
            rest = units(passage.heading[len(heading) :])
            kept = [
                u
                for u, n in zip(rest, count([u.strip() for u in rest]), strict=True)
                if n <= MIN_BODY_TOKENS
            ]
            if "".join(kept).strip():
                body = f"{''.join(kept).strip()}\n\n{body}"
        # Title, heading and body within what the embedder reads (the default 80 always is).
        room = EMBED_WINDOW_TOKENS - title_cost - _cost(heading, count)
        size = max(min(chunk_tokens, room), min(chunk_tokens, MIN_BODY_TOKENS))
        # Units keep their trailing whitespace so lists and line breaks survive chunking.
        tokens = units(body)
        costs = count([t.strip() for t in tokens])
        for c, (start, end) in enumerate(_windows(costs, size, min(overlap_tokens, size // 2))):
            text = "".join(tokens[start:end]).strip()
            chunks.append(make(passage, c, f"{heading}\n\n{text}" if heading else text))
    return chunks


def _cost(text: str, count: TokenCounter) -> int:
    return sum(count([u.strip() for u in units(text)]))


@lru_cache(maxsize=1024)
def _embedded_title(title: str) -> str:
    # Every chunk of a document shares its title: cut (tokenised) once, not once per chunk.
    return cut_to_tokens(title, TITLE_TOKENS)


CURATED_EMBED_TOKENS = 80
"""What the dense arm embeds of a curated answer (question first, then the answer): one
default chunk's body. Embedded whole, a long answer drowned its own question: asked word for
word, a 1,300-character answer's cosine fell to 0.43, under the curated bound, and was
refused (an outside probe); cut here it stays at 0.74."""


def embedding_text(chunk: Chunk) -> str:
    """What the dense arm embeds: the title gives a short chunk its topic (its first
    :data:`TITLE_TOKENS`, so the chunk stays inside the embedder's window)."""
    title = _embedded_title(chunk.title)
    text = chunk.text
    if chunk.source_kind == CURATED_ANSWER:
        text = cut_to_tokens(text, CURATED_EMBED_TOKENS)
    return f"{title}\n{text}" if title else text
