"""generator_svc.groundedness: the model-free sentence-overlap check (seed 003, off by default)."""

from __future__ import annotations

from generator_svc.groundedness import Support, check_groundedness, check_sentence
from tests.generator.fakes import EVIDENCE, TIMING, VOIDING


def test_a_copied_sentence_is_supported_by_the_chunk_it_cites() -> None:
    claim = check_sentence("Most refunds complete within 5 business days. [2]", EVIDENCE)
    assert claim is not None
    assert claim.support is Support.SUPPORTED
    assert claim.chunk_id == TIMING.chunk_id
    assert claim.overlap == 1.0
    assert claim.sentence == "Most refunds complete within 5 business days."


def test_a_changed_number_is_unsupported() -> None:
    claim = check_sentence("Kestrel Express refunds can take up to 40 days. [2]", EVIDENCE)
    assert claim is not None
    assert claim.support is Support.UNSUPPORTED
    assert "40" in claim.missing


def test_an_invented_fact_is_unsupported() -> None:
    claim = check_sentence("Refunds are paid out in gold coins by courier.", EVIDENCE)
    assert claim is not None and claim.support is Support.UNSUPPORTED


def test_half_the_terms_is_partial() -> None:
    claim = check_sentence("You can void an unused label from the mobile app settings.", EVIDENCE)
    assert claim is not None
    assert claim.support is Support.PARTIAL
    assert claim.chunk_id == VOIDING.chunk_id


def test_a_flipped_negation_is_only_partial() -> None:
    claim = check_sentence("You cannot void an unused label within 30 days of buying it.", EVIDENCE)
    assert claim is not None and claim.support is Support.PARTIAL


def test_the_cited_chunk_is_where_support_must_be() -> None:
    # True of evidence [2], but it cites [1]
    claim = check_sentence("Most refunds complete within 5 business days. [1]", EVIDENCE)
    assert claim is not None and claim.support is not Support.SUPPORTED


def test_whole_answer_skips_caveat_and_questions_and_scores() -> None:
    answer = (
        "This may be incomplete. You can void an unused label within 30 days of buying it. [1] "
        "Kestrel Express refunds can take up to 40 days [2]. Anything else?"
    )
    result = check_groundedness(answer, EVIDENCE, ignore=["This may be incomplete."])
    assert [c.support for c in result.claims] == [Support.SUPPORTED, Support.UNSUPPORTED]
    assert result.score == 0.5
    assert not result.passed
    assert [c.sentence for c in result.unsupported] == [
        "Kestrel Express refunds can take up to 40 days."
    ]


def test_nothing_to_check_passes() -> None:
    result = check_groundedness("Which label do you mean?", EVIDENCE)
    assert result.claims == () and result.score == 1.0 and result.passed


def test_no_evidence_makes_every_claim_unsupported() -> None:
    result = check_groundedness("Refunds take 5 days.", ())
    assert [c.support for c in result.claims] == [Support.UNSUPPORTED]
