"""generator_svc.prompts: versioned templates, rendering rules, context budget, [n] parsing."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import yaml

from generator_svc.citations import CitationClaim, verify_citations
from generator_svc.llm.base import EvidenceItem
from generator_svc.prompts import (
    DEFAULT_TEMPLATES_PATH,
    PromptError,
    caveat_rule,
    estimate_tokens,
    evidence_tokens,
    fit_to_budget,
    lead_in_of,
    lead_in_rule,
    load_templates,
    looks_like_clarification,
    parse_marked_citations,
    render,
    uncited_sentences,
    unspanned_sentences,
)
from tests.generator.fakes import EVIDENCE, TIMING, VOIDING, gen_input

T = load_templates()


def test_default_templates_are_versioned_and_complete() -> None:
    assert T.version
    assert T.caveat == "This may be incomplete."
    assert load_templates("") == T == load_templates(DEFAULT_TEMPLATES_PATH)


def test_answer_prompt_numbers_the_evidence_in_rank_order_and_asks_for_markers() -> None:
    p = render(T, gen_input(), native_citations=False)
    assert p.version == T.version
    assert T.system in p.system and T.cite_markers in p.system
    assert "only" in p.system and "clarifying question" in p.system  # seed 001
    assert p.user.index(f"[1] {VOIDING.title}\n{VOIDING.text}") < p.user.index("[2]")
    assert p.user.endswith(f"Question: {gen_input().query}")


def test_confident_tier_has_no_caveat_and_uncertain_adds_it() -> None:
    confident = render(T, gen_input(tier="confident"), native_citations=False)
    uncertain = render(T, gen_input(tier="uncertain"), native_citations=False)
    assert "This may be incomplete." not in confident.system
    assert "Begin your answer with this sentence" in uncertain.system
    assert '"This may be incomplete."' in uncertain.system


def test_clarify_only_prompt_sends_no_evidence_and_asks_one_question() -> None:
    p = render(T, gen_input(clarify_only=True), native_citations=False)
    assert p.system.startswith(T.clarify_only)
    assert T.system not in p.system
    assert VOIDING.text not in p.user and p.user == gen_input().query


def test_answer_language_follows_the_query() -> None:
    assert 'BCP-47 tag "de"' in render(T, gen_input(language="de"), native_citations=False).system
    detect = render(T, gen_input(language=""), native_citations=False).system
    assert "same language as the question" in detect
    clarify = render(T, gen_input(language="fr", clarify_only=True), native_citations=True)
    assert 'BCP-47 tag "fr"' in clarify.system


def test_native_citation_prompt_leaves_evidence_to_documents() -> None:
    p = render(T, gen_input(), native_citations=True)
    assert T.cite_native in p.system and T.cite_markers not in p.system
    assert p.user == gen_input().query


def test_no_evidence_is_said_explicitly() -> None:
    p = render(T, gen_input(evidence=()), native_citations=False)
    assert "(no evidence)" in p.user


def _write(tmp_path: Path, **changes: object) -> Path:
    data = yaml.safe_load(DEFAULT_TEMPLATES_PATH.read_text())
    data.update(changes)
    for key, value in changes.items():
        if value is None:
            del data[key]
    path = tmp_path / "prompts.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_a_custom_template_file_loads(tmp_path: Path) -> None:
    t = load_templates(_write(tmp_path, version="custom-2", caveat="Possibly incomplete."))
    assert t.version == "custom-2"
    assert (
        '"Possibly incomplete."'
        in render(t, gen_input(tier="uncertain"), native_citations=False).system
    )


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"version": None}, "missing"),
        ({"version": ""}, "non-empty"),
        ({"user": "{evidence} {question}"}, "unknown placeholders ['question']"),
        ({"system": "Use {braces"}, "'system'"),
        ({"extra_key": "x"}, "unknown keys"),
        ({"caveat": 3}, "non-empty string"),
    ],
)
def test_invalid_templates_are_rejected_with_the_key_named(
    tmp_path: Path, changes: dict[str, object], message: str
) -> None:
    with pytest.raises(PromptError, match=None) as err:
        load_templates(_write(tmp_path, **changes))
    assert message in str(err.value)


def test_unreadable_template_file_is_a_prompt_error(tmp_path: Path) -> None:
    with pytest.raises(PromptError, match="cannot read"):
        load_templates(tmp_path / "missing.yaml")


# --- budget -----------------------------------------------------------------------------------


def item(cid: str, words: int) -> EvidenceItem:
    return EvidenceItem(cid, "T", " ".join(f"w{i}" for i in range(words)))


def test_token_estimate_is_words_times_1_3_rounded_up() -> None:
    assert estimate_tokens("") == 0
    assert estimate_tokens("one two three") == math.ceil(3 * 1.3) == 4
    assert estimate_tokens("a  b\n\nc\td") == 6
    assert evidence_tokens(item("a", 10)) == 2 + 13


def test_a_character_of_a_script_without_spaces_counts_as_a_word() -> None:
    assert estimate_tokens("未使用的标签") == math.ceil(6 * 1.3)
    assert estimate_tokens("Labels 未使用 expire") == math.ceil(5 * 1.3)
    top = EvidenceItem("a", "", "未使用的标签可在购买后三十天内作废。" * 50)
    b = fit_to_budget([top], 40)
    assert b.truncated_chunk_id == "a" and b.tokens <= 40
    assert top.text.startswith(b.kept[0].text) and len(b.kept[0].text) >= 25


def test_everything_fits_nothing_trimmed() -> None:
    ev = [item("a", 10), item("b", 10)]
    b = fit_to_budget(ev, 1000)
    assert b.kept == tuple(ev) and b.trimmed_chunk_ids == () and b.tokens == 30


def test_trimming_keeps_the_highest_ranked_prefix() -> None:
    ev = [item("a", 20), item("b", 20), item("c", 20), item("d", 1)]  # 28 tokens each; d = 4
    b = fit_to_budget(ev, 60)
    assert [e.chunk_id for e in b.kept] == ["a", "b"]
    # d would fit on its own, but a lower-ranked chunk is never kept while a higher one is cut
    assert b.trimmed_chunk_ids == ("c", "d")
    assert b.tokens == 56 <= 60
    assert b.truncated_chunk_id == ""


def test_budget_boundary_is_inclusive() -> None:
    ev = [item("a", 20), item("b", 20)]
    assert [e.chunk_id for e in fit_to_budget(ev, 56).kept] == ["a", "b"]
    assert fit_to_budget(ev, 55).trimmed_chunk_ids == ("b",)


def test_an_oversized_top_chunk_is_cut_to_fit_never_dropped() -> None:
    top = EvidenceItem("a", "T", "First line here.\n\nSecond para " + " ".join(["x"] * 200))
    b = fit_to_budget([top, item("b", 5)], 20)
    assert [e.chunk_id for e in b.kept] == ["a"]
    assert b.truncated_chunk_id == "a"
    assert b.trimmed_chunk_ids == ("b",)
    assert b.kept[0].text.startswith("First line here.\n\nSecond para")  # formatting kept
    assert top.text.startswith(b.kept[0].text)
    assert b.tokens <= 20


def test_zero_budget_means_unlimited() -> None:
    ev = [item("a", 5000), item("b", 5000)]
    assert fit_to_budget(ev, 0).kept == tuple(ev)


# --- [n] markers --------------------------------------------------------------------------------


def claims(text: str) -> list[tuple[str, str]]:
    return [(c.chunk_id, c.quote) for c in parse_marked_citations(text, EVIDENCE)]


def test_marker_after_the_period_cites_the_sentence_before_it() -> None:
    text = "You can void it within 30 days of buying it. [1] Most refunds complete fast. [2]"
    assert claims(text) == [
        (VOIDING.chunk_id, "You can void it within 30 days of buying it"),
        (TIMING.chunk_id, "Most refunds complete fast"),
    ]


def test_marker_before_the_period_and_only_the_last_sentence_counts() -> None:
    text = "Good question. Refunds take 5 business days [2]. Kestrel takes 21 days [2]."
    assert claims(text) == [
        (TIMING.chunk_id, "Refunds take 5 business days"),
        (TIMING.chunk_id, "Kestrel takes 21 days"),
    ]


def test_several_numbers_cite_the_same_sentence() -> None:
    for text in (
        "Refunds apply to labels [1, 2].",
        "Refunds apply to labels [1][2].",
        "Refunds apply to labels. [1] [2]",
    ):
        assert claims(text) == [
            (VOIDING.chunk_id, "Refunds apply to labels"),
            (TIMING.chunk_id, "Refunds apply to labels"),
        ], text


def test_a_double_quoted_span_is_the_quote() -> None:
    text = 'Per the help centre, refunds complete "within 5 business days" [2].'
    assert claims(text) == [(TIMING.chunk_id, "within 5 business days")]
    curly = "It says “void an unused label within 30 days” [1]."
    assert claims(curly) == [(VOIDING.chunk_id, "void an unused label within 30 days")]


def test_list_items_are_claims_without_their_bullets() -> None:
    text = "Steps:\n- Go to Shipments [1]\n- Click More > Void label [1]"
    assert claims(text) == [
        (VOIDING.chunk_id, "Go to Shipments"),
        (VOIDING.chunk_id, "Click More > Void label"),
    ]


def test_a_numbered_item_is_one_sentence_with_its_number() -> None:
    # "1." was split off as a sentence stating a number, so every numbered answer failed as
    # citing nothing (a blind answer corpus).
    text = "1. Go to Shipments and find the label. [1]\n2. Click More > Void label. [1]"
    assert uncited_sentences(text) == []
    assert claims(text) == [
        (VOIDING.chunk_id, "Go to Shipments and find the label"),
        (VOIDING.chunk_id, "Click More > Void label"),
    ]
    indented = "Steps:\n  1. Go to Shipments. [1]\n  2. Click More. [1]"
    assert uncited_sentences(indented, lead_in=lambda _: True) == []
    assert uncited_sentences("1. Go to Shipments.\n2. Click More. [1]") == ["1) Go to Shipments."]
    # A number that opens no list ends the sentence before it, as markdown renders it.
    assert uncited_sentences("You get\n50. Each code can be used once. [1]") == ["50."]


def test_a_lead_in_may_use_a_title_but_not_the_question() -> None:
    titled = EvidenceItem(VOIDING.chunk_id, "Voiding in Parcelio", VOIDING.text)
    lead_in = "To void a label in Parcelio, follow these steps:"
    text = f"{lead_in}\n- Go to Shipments. [1]"
    assert uncited_sentences(text, lead_in=lead_in_of(gen_input(evidence=(titled,)))) == []
    # The question's words are no support: it may carry a false premise the steps never check.
    premise = "You can still void a label after the carrier scanned it:"
    asked = gen_input(query="Can I still void a label after the carrier scanned it?")
    listed = f"{premise}\n- Go to Shipments. [1]"
    assert uncited_sentences(listed, lead_in=lead_in_of(asked)) == [premise]


PLANS = EvidenceItem(
    "plans#p0c0",
    "Plans",
    "The Pro plan includes 24/7 phone support. The Basic plan includes email support only. "
    "The Team plan adds SSO.",
)


def test_a_list_item_holds_only_with_the_statement_it_completes() -> None:
    # Each item held by its one word ("Basic" stands in the evidence) and the lead-in
    # was spared as a list label (an outside review).
    evidence = {PLANS.chunk_id: PLANS.text}
    text = "Phone support is included in these plans:\n- Pro [1]\n- Basic [1]\n- Team [1]"
    cited = parse_marked_citations(text, (PLANS,))
    assert {c.lead_in for c in cited} == {"Phone support is included in these plans"}
    checks = verify_citations(cited, evidence)
    assert [(c.quote, c.verified) for c in checks] == [
        ("Pro", True),
        ("Basic", False),
        ("Team", False),
    ]
    # A label frames the list without stating anything to check.
    steps = parse_marked_citations("Steps:\n- Go to Shipments [1]", EVIDENCE)
    assert all(c.verified for c in verify_citations(steps, {VOIDING.chunk_id: VOIDING.text}))


def test_a_bare_yes_or_no_answers_only_before_a_cited_sentence() -> None:
    # As a leading "Yes," or "No," does: the cited sentence after it is checked.
    assert uncited_sentences("Yes. Labels can be voided within 30 days. [1]") == []
    assert uncited_sentences("**No.** Scanned labels cannot be voided. [1]") == []
    # Alone, or before a sentence that cites nothing, it states something unchecked.
    assert uncited_sentences("Yes.") == ["Yes."]
    assert uncited_sentences("Yes. Labels can be voided. Done. [1]") == [
        "Yes.",
        "Labels can be voided.",
    ]
    assert uncited_sentences("Labels can be voided. [1] Yes.") == ["Yes."]
    assert uncited_sentences("Steps: Void it. [1]") == []
    native = "No. Labels with a carrier scan cannot be voided."
    assert unspanned_sentences(native, [(4, len(native))]) == []
    assert unspanned_sentences(native, []) == [
        "No.",
        "Labels with a carrier scan cannot be voided.",
    ]


def test_a_colon_line_is_a_lead_in_only_before_a_list() -> None:
    claim = "All refunds are free:"
    assert uncited_sentences(f"{claim}\nYou can void an unused label. [1]") == [claim]
    rule = lead_in_rule([VOIDING.text])
    lead_in = "To void an unused label, follow these steps:"
    assert uncited_sentences(f"{lead_in}\n- Go to Shipments. [1]", lead_in=rule) == []
    # Its rarer words are all the evidence's own; a lead-in with words of its own is a claim
    # (the items' checks never read "instant" or "everyone").
    bogus = "Refunds are instant and free for everyone:"
    assert uncited_sentences(f"{bogus}\n- Go to Shipments. [1]", lead_in=rule) == [bogus]
    # With no evidence to read, every colon line is checked.
    assert uncited_sentences(f"{lead_in}\n- Go to Shipments. [1]") == [lead_in]


def test_only_the_caveat_is_spared_at_the_head_of_an_uncertain_answer() -> None:
    spare = caveat_rule("This may be incomplete.", [VOIDING.text, TIMING.text])
    cited = " You can void an unused label within 30 days of buying it. [1]"
    for caveat in (
        "This may be incomplete.",
        "Esto puede estar incompleto.",
        "Peut-être partiel.",
        "This may be partial.",  # a reworded English hedge
    ):
        assert uncited_sentences(caveat + cited, spare) == [], caveat
    # Beside evidence in its own language, a caveat shares its function words, not a claim.
    spanish = caveat_rule(
        "This may be incomplete.",
        ["Puede anular una etiqueta no usada en 30 días. Esto se hace en Envíos."],
        "es",
    )
    assert spanish("Esto puede estar incompleto.")
    assert not spanish("Puede anular cualquier etiqueta.")  # "anular", "etiqueta": a claim
    german = caveat_rule("This may be incomplete.", ["Dies ist in 30 Tagen möglich."], "de")
    assert german("Dies ist möglicherweise unvollständig.")
    for claim in (
        "Two-factor authentication can be bypassed with the backup code 0000.",
        "Refunds are never paid back.",
        "Every refund is instant.",  # borrows the evidence's words
        # In English a rare word the caveat lacks is a claim, borrowed or not (answer-path
        # probe: both passed as the caveat, verified).
        "Passkeys work too.",
        "Hackers rarely bypass it.",
    ):
        assert uncited_sentences(claim + cited, spare) == [claim], claim
        native = f"{claim} You can void an unused label within 30 days of buying it."
        assert unspanned_sentences(native, [(len(claim) + 1, len(native))], spare) == [claim]
    # Outside the UNCERTAIN tier nothing is spared.
    assert uncited_sentences("This may be incomplete." + cited) == ["This may be incomplete."]


def test_an_out_of_range_number_is_kept_visible() -> None:
    assert claims("Refunds are instant [7].") == [("[7]", "Refunds are instant")]


def test_no_markers_no_citations_and_duplicates_collapse() -> None:
    assert claims("Refunds take a while.") == []
    assert len(claims("Refunds take 5 days [2]. Refunds take 5 days [2].")) == 1


def test_clarification_detection() -> None:
    assert looks_like_clarification("Do you mean a return label?", ())
    assert looks_like_clarification("¿Te refieres a una etiqueta de devolución?", ())
    assert not looks_like_clarification("Refunds take 5 days.", ())
    cited = (CitationClaim("a", "b"),)
    assert not looks_like_clarification("Do you mean this? [1]", cited)
    # A claim dressed as a question states what nothing checks.
    assert not looks_like_clarification(
        "Did you know unused labels can be voided within 90 days?", ()
    )
    assert not looks_like_clarification(" ".join(["word"] * 40) + "?", ())
    assert not looks_like_clarification("Brazil won in 1998, beating France; anything else?", ())
    assert not looks_like_clarification("巴西赢得了世界杯。你还想了解什么？", ())
    # Real clarifying questions use negations, number words and the question's own numbers.
    for question, asked in (
        ("Which one do you mean?", ""),
        ("Do you mean orders that haven't shipped yet?", ""),
        ("Are you asking only about refunds?", ""),
        ("Do you mean the first or the second option?", ""),
        ("Is this about error 404 on the login page?", "What does error 404 mean?"),
    ):
        assert looks_like_clarification(question, (), asked), question
