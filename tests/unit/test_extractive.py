"""generator_svc.llm.extractive: the offline answerer quotes evidence sentences faithfully."""

from __future__ import annotations

from generator_svc.citations import verify_citations
from generator_svc.llm.base import Draft, EvidenceItem, GenerationInput
from generator_svc.llm.extractive import CAVEAT, CLARIFY, ExtractiveBackend
from tests.helpers import outputs_under_hash_seeds

REFUNDS = EvidenceItem(
    "refunds#p2c0",
    "Refunds for Unused Labels",
    "When the money comes back\n\n"
    "Parcelio asks the carrier to confirm that the label was not used. Once the carrier "
    "confirms, the postage is credited back to your **shipping balance**. Most refunds complete "
    "within 5 business days. Kestrel Express refunds can take up to 21 days.",
)
VOIDING = EvidenceItem(
    "refunds#p1c0",
    "Refunds for Unused Labels",
    "How to void a label\n\n"
    "1. Go to **Shipments** and find the label you want to void.\n"
    "2. Click **More > Void label** to void the label.\n"
    "3. Confirm the number of labels and the total amount to be refunded.",
)


def gen(query: str, *evidence: EvidenceItem, tier: str = "confident", **kw: object):
    return GenerationInput(query, tuple(evidence), "en", tier, **kw)  # type: ignore[arg-type]


async def run(inp: GenerationInput, max_sentences: int = 3) -> tuple[list[str], Draft]:
    events = [e async for e in ExtractiveBackend(max_sentences).stream(inp)]
    *deltas, draft = events
    assert isinstance(draft, Draft)
    assert all(isinstance(d, str) for d in deltas)
    return deltas, draft  # type: ignore[return-value]


async def test_stream_yields_deltas_then_one_draft_with_holding_citations() -> None:
    query = "How do I void a label?"
    deltas, draft = await run(gen(query, VOIDING, REFUNDS))
    assert deltas
    assert "".join(deltas) == draft.text
    assert not draft.is_clarification
    assert draft.citations
    assert len(draft.citations) <= 3
    assert draft.citations[0].chunk_id == VOIDING.chunk_id
    evidence = {e.chunk_id: e.text for e in (VOIDING, REFUNDS)}
    checks = verify_citations(draft.citations, evidence)
    assert all(c.verified for c in checks), checks
    # each cited sentence is marked with its 1-based evidence number
    assert "[1]" in draft.text
    assert "**" not in draft.text
    assert draft.input_tokens == 6 + len(VOIDING.text.split()) + len(REFUNDS.text.split())
    assert draft.output_tokens == len(draft.text.split())


async def test_every_quote_holds_for_a_multi_evidence_answer() -> None:
    _, draft = await run(gen("refunds shipping balance carrier label", REFUNDS, VOIDING), 5)
    assert len(draft.citations) >= 2
    evidence = {e.chunk_id: e.text for e in (VOIDING, REFUNDS)}
    assert all(c.verified for c in verify_citations(draft.citations, evidence))


async def test_how_long_prefers_the_sentence_with_a_duration() -> None:
    words_only = EvidenceItem(
        "a#p0c0", "Refunds", "Refunds are reviewed by our friendly team. Refunds are great."
    )
    duration = EvidenceItem("b#p0c0", "Refunds", "Refunds are paid out within 5 business days.")
    _, draft = await run(gen("How long do refunds take?", words_only, duration), max_sentences=1)
    assert [c.chunk_id for c in draft.citations] == ["b#p0c0"]
    assert draft.text == "Refunds are paid out within 5 business days. [2]"


async def test_without_duration_question_the_higher_ranked_evidence_wins_ties() -> None:
    a = EvidenceItem("a#p0c0", "Refunds", "Refunds are reviewed by our friendly team.")
    b = EvidenceItem("b#p0c0", "Refunds", "Refunds are paid out within 5 business days.")
    _, draft = await run(gen("Tell me about refunds.", a, b), max_sentences=1)
    assert [c.chunk_id for c in draft.citations] == ["a#p0c0"]


async def test_the_top_chunk_outweighs_more_overlap_two_ranks_down() -> None:
    # Retrieval ranked the garden chunk first; the third chunk shares one more of the question's
    # words. At the old 0.1 decay per rank the third chunk's sentence led the answer.
    top = EvidenceItem("a#p0c0", "Museum", "The museum garden is open all year.")
    other = EvidenceItem("b#p0c0", "Parking", "Parking is free on weekdays.")
    third = EvidenceItem("c#p0c0", "Cafe", "A museum garden cafe sells tea.")
    _, draft = await run(gen("Tell me about the museum garden cafe.", top, other, third), 2)
    assert [c.chunk_id for c in draft.citations] == ["a#p0c0", "c#p0c0"]


async def test_uncertain_tier_starts_with_the_caveat() -> None:
    deltas, draft = await run(gen("How do I void a label?", VOIDING, tier="uncertain"))
    assert deltas[0] == CAVEAT
    assert draft.text.startswith(CAVEAT)
    assert all(c.quote not in CAVEAT for c in draft.citations)


async def test_confident_tier_has_no_caveat() -> None:
    _, draft = await run(gen("How do I void a label?", VOIDING))
    assert not draft.text.startswith(CAVEAT)


async def test_no_overlapping_terms_asks_for_clarification() -> None:
    deltas, draft = await run(gen("Is there a dark mode for the mobile app?", VOIDING, REFUNDS))
    assert deltas == [CLARIFY]
    assert draft.text == CLARIFY
    assert draft.is_clarification is True
    assert draft.citations == ()


async def test_clarify_only_never_quotes_evidence() -> None:
    _, draft = await run(gen("How do I void a label?", VOIDING, clarify_only=True))
    assert draft.is_clarification is True
    assert draft.citations == ()


async def test_no_evidence_asks_for_clarification() -> None:
    _, draft = await run(gen("How do I void a label?"))
    assert draft.is_clarification is True
    assert draft.citations == ()


def test_select_skips_headings_and_respects_max_sentences() -> None:
    picked = ExtractiveBackend(max_sentences=2).select(gen("void label shipments", VOIDING))
    assert len(picked) == 2
    assert all(q.evidence == 0 for q in picked)
    assert "How to void a label" not in [q.sentence for q in picked]


# Neighbouring windows of one section (retrieval_svc.ingest cuts at word boundaries): the first
# ends mid-sentence, the second starts mid-sentence.
CUT_TAIL = EvidenceItem(
    "refunds#p3c1",
    "Refunds for Unused Labels",
    "When the money comes back\n\n"
    "to 21 days because the carrier waits for its own scan records to close.\n\n"
    "You can dispute a rejected refund by contacting Support within 30 days.\n\n"
    "Fees for optional extras bought with the label, such as Parcelio Cover insurance and "
    "signature confirmation, are refunded",
)
CUT_HEAD = EvidenceItem(
    "refunds#p3c2",
    "Refunds for Unused Labels",
    "When the money comes back\n\n"
    "extras bought with the label, such as Parcelio Cover insurance and signature "
    "confirmation, are refunded together with the postage. Insurance claims are separate.",
)


async def test_a_sentence_the_chunk_window_cut_is_shown_cut() -> None:
    _, draft = await run(
        gen("Are Parcelio Cover insurance fees refunded with the label?", CUT_TAIL), 1
    )
    assert draft.text == (
        "Fees for optional extras bought with the label, such as Parcelio Cover insurance and "
        "signature confirmation, are refunded… [1]"
    )
    # The citation quotes what the chunk holds; the ellipsis is the answer's, not the source's.
    assert draft.citations[0].quote.endswith("are refunded")
    assert all(
        c.verified for c in verify_citations(draft.citations, {CUT_TAIL.chunk_id: CUT_TAIL.text})
    )
    _, draft = await run(gen("How long until the scan records close?", CUT_TAIL), 1)
    assert draft.text.startswith("…to 21 days because the carrier waits")


def test_a_cut_sentence_gives_way_to_a_whole_copy_and_no_sentence_is_quoted_twice() -> None:
    whole = EvidenceItem(
        "refunds#p9c0",
        "Refunds for Unused Labels",
        "Fees for optional extras bought with the label, such as Parcelio Cover insurance and "
        "signature confirmation, are refunded together with the postage.",
    )
    picked = ExtractiveBackend(max_sentences=5).select(
        gen("Are Parcelio Cover insurance fees refunded?", CUT_TAIL, CUT_HEAD, whole, whole)
    )
    quoted = [q.sentence for q in picked]
    assert quoted.count(whole.text) == 1
    assert [q.evidence for q in picked if q.sentence == whole.text] == [2]
    assert not [q for q in picked if q.cut_head or q.cut_tail]
    assert "Insurance claims are separate." in quoted
    # The whole copy takes the cut one's place, even where it would rank below another sentence.
    invoice = EvidenceItem(
        "billing#p1c0", "Invoices", "Parcelio Cover insurance fees are listed on each invoice."
    )
    question = "Are Parcelio Cover insurance fees refunded?"
    top = ExtractiveBackend(max_sentences=1).select(
        gen(question, CUT_TAIL, invoice, REFUNDS, REFUNDS, REFUNDS, whole)
    )
    assert [(q.evidence, q.sentence) for q in top] == [(5, whole.text)]
    # A sentence that merely contains the cut words is another sentence, not the cut one whole.
    other = EvidenceItem(
        "faq#p1c0",
        "FAQ",
        "We confirm that fees for optional extras bought with the label, such as Parcelio Cover "
        "insurance and signature confirmation, are refunded only on request.",
    )
    top = ExtractiveBackend(max_sentences=1).select(gen(question, CUT_TAIL, other))
    assert [(q.evidence, q.cut_tail) for q in top] == [(0, True)]


def test_a_whole_chunk_and_a_final_list_item_without_a_full_stop_are_not_marked_cut() -> None:
    steps = EvidenceItem(
        "refunds#p1c0",
        "Refunds for Unused Labels",
        "How to void a label\n\n"
        "1. Go to **Shipments** and find the label you want to void.\n"
        "2. Confirm the number of labels and the total amount to be refunded",
    )
    picked = ExtractiveBackend(5).select(gen("confirm total amount refunded", steps))
    assert picked[0].sentence.startswith("2. Confirm the number of labels")
    picked += ExtractiveBackend(5).select(gen("how long do refunds take", REFUNDS))
    assert "Kestrel Express refunds can take up to 21 days." in [q.sentence for q in picked]
    assert not [q for q in picked if q.cut_head or q.cut_tail]


async def test_a_question_in_the_evidence_is_never_quoted_as_an_answer() -> None:
    # A curated answer holds its own question: quoted, "How do I reset my password? [1]" read as
    # the source's answer to whatever was asked.
    faq = EvidenceItem(
        "faq#p0c0",
        "Resetting your password",
        "How do I reset my password?\nOpen Settings > Security and choose Reset password.",
    )
    _, draft = await run(gen("How do I reset my password?", faq))
    assert "How do I reset my password?" not in draft.text
    assert draft.text.startswith("Open Settings > Security and choose Reset password.")


PORTAL = EvidenceItem(
    "returns#p0c0",
    "The Returns Portal",
    "The Returns Portal\n\n"
    "The returns portal lets your customers start a return themselves and print or download a "
    "prepaid return label, without emailing you first. It is available on the **Growth** and "
    "**Scale** plans. Returns from the portal appear under **Shipments > Returns**.",
)


async def test_a_sentence_that_refers_back_is_quoted_with_the_one_it_narrows() -> None:
    # Quoted alone, the first sentence told a Starter customer the portal was theirs.
    query = "I'm on Starter. Can my customers make their own return labels?"
    _, draft = await run(gen(query, PORTAL), 1)
    assert [c.quote for c in draft.citations] == [
        "The returns portal lets your customers start a return themselves and print or download "
        "a prepaid return label, without emailing you first.",
        "It is available on the **Growth** and **Scale** plans.",
    ]
    assert draft.text.endswith("It is available on the Growth and Scale plans. [1]")
    checks = verify_citations(draft.citations, {PORTAL.chunk_id: PORTAL.text})
    assert all(c.verified for c in checks), checks
    # A following sentence that does not refer back stays out, and nothing is quoted twice.
    picked = ExtractiveBackend(3).select(gen("where do portal returns appear?", PORTAL))
    sentences = [q.sentence for q in picked]
    assert len(sentences) == len(set(sentences))
    assert sentences[0].startswith("Returns from the portal appear")


def test_matched_weight_is_the_same_in_any_order() -> None:
    from generator_svc.llm.extractive import matched_weight

    idf = {"a": 0.1, "b": 0.2, "c": 0.3}
    assert (0.1 + 0.2) + 0.3 != 0.1 + (0.2 + 0.3)  # a plain sum's last bits follow its order
    assert matched_weight(idf, ["a", "b", "c"]) == matched_weight(idf, ["c", "b", "a"]) == 0.6


def test_the_quoted_order_does_not_depend_on_the_processs_hash_seed() -> None:
    # Two sentences matching the same query terms tie; the earlier one goes first in every
    # process. Summed in set order, their scores could differ in the last bit, and the answer's
    # sentence order changed between runs (3 of 984 HaluEval test answers at one head).
    code = (
        "from generator_svc.llm.base import EvidenceItem, GenerationInput\n"
        "from generator_svc.llm.extractive import ExtractiveBackend\n"
        "q = 'hotel alpha echo romeo india foxtrot mike juliet victor yankee?'\n"
        "rows = ['india hotel echo juliet november quebec.', "
        "'foxtrot romeo mike echo india uniform whiskey.', "
        "'foxtrot mike victor echo alpha india golf kilo.', 'foxtrot juliet kilo xray.', "
        "'juliet victor alpha echo yankee foxtrot hotel india mike bravo lima.', "
        "'hotel echo foxtrot romeo yankee india alpha mike juliet papa bravo.', "
        "'mike juliet foxtrot echo yankee victor india alpha kilo november.', "
        "'juliet yankee victor echo foxtrot mike india alpha.']\n"
        "ev = (EvidenceItem('c1', '', ' '.join(r.capitalize() for r in rows)),)\n"
        "picked = ExtractiveBackend(len(rows)).select(GenerationInput(q, ev, 'en', 'confident'))\n"
        "print([p.sentence for p in picked])\n"
    )
    seen = outputs_under_hash_seeds(code, 16)
    assert len(seen) == 1, seen
