"""retrieval_svc.ingest: markdown sections, deterministic overlapping chunks, generation hashes."""

from __future__ import annotations

import dataclasses
import itertools
import re
from collections.abc import Sequence

from retrieval_svc.embed.wordpiece import token_counts
from retrieval_svc.ingest import (
    SourceDocument,
    chunk_document,
    embedding_text,
    generation_of,
    sections,
)


def doc(text: str, **kw: object) -> SourceDocument:
    base: dict[str, object] = {
        "tenant": "acme",
        "document_id": "refunds",
        "title": "Refunds",
        "text": text,
        "source_kind": 1,
    }
    base.update(kw)
    return SourceDocument(**base)  # type: ignore[arg-type]


def numbered(n: int) -> str:
    return " ".join(f"w{i}" for i in range(n))


def one_per_word(words: Sequence[str]) -> list[int]:
    """Window arithmetic is easier to read with one token per word."""
    return [1] * len(words)


# --- sections ------------------------------------------------------------------------------


def test_sections_split_on_headings_with_preamble_untitled() -> None:
    text = "Intro line.\n\n# First\nbody one\n\n## Second ##\nbody two\n# Empty\n"
    assert sections(text) == [
        ("", "Intro line."),
        ("First", "body one"),
        ("Second", "body two"),
        ("", "Empty"),  # a heading alone at the end is still the document's words
    ]


def test_a_heading_with_no_body_heads_the_next_section_with_it() -> None:
    # Dropped, "Zephyrine" and "Grallock" were in no chunk and no search found them.
    text = "# Zephyrine Handbook\n## Grallock Billing\n### Refunds\nRefunds take 30 days."
    assert sections(text) == [
        ("Zephyrine Handbook / Grallock Billing / Refunds", "Refunds take 30 days.")
    ]


def test_headings_in_fenced_code_are_code() -> None:
    text = "# Install\nRun this:\n```bash\n# fetch the package\ncurl x\n```\nThen continue."
    assert sections(text) == [
        ("Install", "Run this:\n```bash\n# fetch the package\ncurl x\n```\nThen continue.")
    ]


def test_inline_code_and_unusual_line_breaks_do_not_change_the_sections() -> None:
    assert sections("# A\n```x``` is inline code\n# B\nbody") == [
        ("A", "```x``` is inline code"),
        ("B", "body"),
    ]
    assert sections("# A\ntext\x0c# not a heading\u2028# nor this") == [
        ("A", "text\x0c# not a heading\u2028# nor this")
    ]
    # A lone carriage return ends a line, as in markdown (old Mac files).
    assert sections("# A\rbody a\r# B\rbody b") == [("A", "body a"), ("B", "body b")]


def test_a_bare_hash_is_an_empty_heading_and_a_closing_run_needs_a_space() -> None:
    # "#" took the next line for its text, which then headed every chunk of the section.
    assert sections("Intro.\n#\nA paragraph line.\nBody.") == [
        ("", "Intro."),
        ("", "A paragraph line.\nBody."),
    ]
    assert sections("# C#\nbody\n## F# language ##\nmore") == [
        ("C#", "body"),
        ("F# language", "more"),
    ]


def test_title_heading_and_body_stay_inside_the_embedders_window() -> None:
    # A 1,000-character title (212 tokens) left every chunk's body past MiniLM's 256 tokens.
    from retrieval_svc.ingest import EMBED_WINDOW_TOKENS, embedding_text

    body = " ".join(f"word{i}" for i in range(3000))
    plain_chunks = len(chunk_document(doc(body), 80, 20))
    for title, heading in [
        ("title " * 200, "heading " * 300),
        ("数据库" * 100, "配置" * 150),  # no spaces: each character is a unit
        ("https://example.com/" + "a" * 820, "x" * 600),  # one unit
        # One unit over every limit: cut by characters (kept whole, it was the window).
        ("https://example.com/" + "/".join(f"seg{i}" for i in range(150)), "!" * 1000),
    ]:
        chunks = chunk_document(doc(f"## {heading}\n{body}", title=title), 80, 20)
        # Not one token per chunk: a long unspaced title once took the body's whole window.
        assert len(chunks) <= 2 * plain_chunks
        for chunk in chunks:
            assert sum(token_counts(embedding_text(chunk).split())) <= EMBED_WINDOW_TOKENS
    plain = doc(body, title="A short title")
    assert [c.text for c in chunk_document(plain, 80, 20)] == [
        c.text for c in chunk_document(dataclasses.replace(plain, title="Another"), 80, 20)
    ]


def test_sections_without_headings_is_one_untitled_section() -> None:
    assert sections("just text\nmore text") == [("", "just text\nmore text")]


def test_sections_of_blank_text_is_empty() -> None:
    assert sections("  \n\n ") == []


def test_sections_ignore_hash_without_space() -> None:
    assert sections("#hashtag is not a heading") == [("", "#hashtag is not a heading")]


# --- chunk_document --------------------------------------------------------------------------


def test_short_section_is_one_chunk_with_deterministic_ids() -> None:
    chunks = chunk_document(doc("# Limits\nYou can void within 30 days."), 60, 15)
    assert len(chunks) == 1
    c = chunks[0]
    assert c.chunk_id == "refunds#p0c0"
    assert c.parent_id == "refunds#p0"
    assert c.document_id == "refunds"
    assert c.tenant == "acme"
    assert c.title == "Refunds"
    assert c.text == "Limits\n\nYou can void within 30 days."


def test_long_section_windows_overlap_by_the_configured_words() -> None:
    chunks = chunk_document(doc(numbered(25)), 10, 3, count=one_per_word)
    # step 7: windows start at 0, 7, 14, 21
    assert [c.chunk_id for c in chunks] == [f"refunds#p0c{i}" for i in range(4)]
    assert {c.parent_id for c in chunks} == {"refunds#p0"}
    windows = [c.text.split() for c in chunks]
    assert windows[0] == [f"w{i}" for i in range(10)]
    assert windows[1] == [f"w{i}" for i in range(7, 17)]
    assert windows[3] == [f"w{i}" for i in range(21, 25)]
    for prev, nxt in itertools.pairwise(windows):
        assert prev[-3:] == nxt[:3]
    # every word is covered
    assert {w for win in windows for w in win} == {f"w{i}" for i in range(25)}


def test_windows_are_budgets_in_wordpiece_tokens() -> None:
    # "unbelievably" and "antidisestablishmentarianism" are several WordPiece tokens each.
    words = "refund unbelievably antidisestablishmentarianism policy " * 30
    costs = token_counts(words.split())
    assert max(costs) > 2 and min(costs) == 1
    chunks = chunk_document(doc(words), 40, 10)
    assert len(chunks) > 3
    for c in chunks:
        assert sum(token_counts(c.text.split())) <= 40
    for prev, nxt in itertools.pairwise(chunks):
        shared = prev.text.split()[-3:]
        assert nxt.text.split()[: len(shared)] == shared  # the overlap repeats the tail
    assert " ".join(" ".join(c.text.split()) for c in chunks).count("policy") >= 30


def test_a_word_longer_than_the_budget_gets_its_own_window() -> None:
    long_word = "supercalifragilistic" * 4
    assert token_counts([long_word])[0] > 5
    chunks = chunk_document(doc(f"a {long_word} b"), 5, 1)
    assert [c.text for c in chunks] == ["a", long_word, "b"]
    assert all(c.text for c in chunks)


CHINESE = "退款政策适用于所有订单。未使用的标签可在购买后三十天内作废。" * 40
"""A paragraph with no spaces: split on whitespace it would be a single "word"."""


def test_text_without_spaces_is_windowed_like_text_with_them() -> None:
    chunks = chunk_document(doc(CHINESE), 64, 8)
    assert len(chunks) > len(CHINESE) // 64
    assert all(sum(token_counts(list(c.text))) <= 64 for c in chunks)
    # Each window continues the text: dropping its overlap, the windows spell the document.
    assert chunks[0].text == CHINESE[: len(chunks[0].text)]
    assert CHINESE.endswith(chunks[-1].text)


def test_mixed_scripts_keep_their_spaces() -> None:
    text = "Refunds 退款 take 5 days; 東京 office closed."
    (chunk,) = chunk_document(doc(text), 200, 10)
    assert chunk.text == text


def test_each_section_is_its_own_parent() -> None:
    chunks = chunk_document(doc("Preamble.\n# A\nalpha text\n# B\nbeta text"), 60, 15)
    assert [(c.chunk_id, c.parent_id) for c in chunks] == [
        ("refunds#p0c0", "refunds#p0"),
        ("refunds#p1c0", "refunds#p1"),
        ("refunds#p2c0", "refunds#p2"),
    ]
    assert [c.text for c in chunks] == ["Preamble.", "A\n\nalpha text", "B\n\nbeta text"]


def test_heading_prefixes_every_window_of_its_section() -> None:
    chunks = chunk_document(doc("# Head\n" + numbered(20)), 8, 2, count=one_per_word)
    assert len(chunks) > 1
    assert all(c.text.startswith("Head\n\n") for c in chunks)


def test_list_line_breaks_survive_chunking() -> None:
    chunks = chunk_document(doc("- first item\n- second item"), 60, 15)
    assert chunks[0].text == "- first item\n- second item"


def test_chunking_is_deterministic() -> None:
    d = doc("# A\n" + numbered(40))
    assert chunk_document(d, 10, 3) == chunk_document(d, 10, 3)


def test_curated_answer_is_one_chunk_with_question_and_answer() -> None:
    d = doc(
        numbered(200),
        document_id="faq-7",
        question="How long do refunds take?",
        source_kind=2,
    )
    chunks = chunk_document(d, 10, 3, count=one_per_word)
    assert len(chunks) == 1
    assert chunks[0].chunk_id == "faq-7#p0c0"
    assert chunks[0].parent_id == "faq-7#p0"
    assert chunks[0].text == "How long do refunds take?\n" + numbered(200)
    assert chunks[0].source_kind == 2


def test_generation_changes_when_text_changes_and_is_shared_by_all_chunks() -> None:
    d1 = doc("# A\n" + numbered(30))
    d2 = dataclasses.replace(d1, text="# A\n" + numbered(31))
    c1, c2 = chunk_document(d1, 10, 3), chunk_document(d2, 10, 3)
    assert {c.generation for c in c1} == {generation_of(d1, (10, 3))}
    assert {c.generation for c in c2} == {generation_of(d2, (10, 3))}
    assert generation_of(d1) != generation_of(d2)
    assert generation_of(d1) == generation_of(dataclasses.replace(d1))
    assert len(generation_of(d1)) == 16


def test_generation_changes_with_title_or_question() -> None:
    d = doc("text")
    assert generation_of(d) != generation_of(dataclasses.replace(d, title="Other"))
    assert generation_of(d) != generation_of(dataclasses.replace(d, question="Q?"))


def test_embedding_text_prefixes_the_title() -> None:
    with_title = chunk_document(doc("Void within 30 days."), 60, 15)[0]
    assert embedding_text(with_title) == "Refunds\nVoid within 30 days."
    untitled = chunk_document(doc("Void within 30 days.", title=""), 60, 15)[0]
    assert embedding_text(untitled) == "Void within 30 days."


def test_generation_fields_cannot_run_into_each_other() -> None:
    assert generation_of(doc("c", title="ab")) != generation_of(doc("bc", title="a"))


def test_other_chunk_settings_make_another_generation() -> None:
    # Same content cut with other settings: other windows under the same positional ids.
    # Sharing a generation, the re-ingest kept the old windows published in the dense store.
    d = doc("# A\n" + numbered(60))
    gens = {
        settings: {c.generation for c in chunk_document(d, *settings)}
        for settings in ((10, 3), (10, 5), (20, 3))
    }
    assert all(len(g) == 1 for g in gens.values())
    assert len(set.union(*gens.values())) == 3
    assert chunk_document(d, 10, 3)[1].chunk_id == chunk_document(d, 10, 5)[1].chunk_id


def test_a_heading_path_too_long_for_a_chunks_head_opens_its_body() -> None:
    # 40 empty headings join into one path; cut to the head's 96 tokens, topic16-topic39 were
    # in no chunk, and no search could find them.
    text = "".join(f"# topic{i}\n" for i in range(40)) + "The body of the section.\n"
    chunks = chunk_document(doc(text), 80, 20)
    words = {w for c in chunks for w in re.findall(r"topic\d+", c.text)}
    assert words == {f"topic{i}" for i in range(40)}
    assert any("The body of the section." in c.text for c in chunks)
