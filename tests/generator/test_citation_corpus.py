# ruff: noqa: E501  (answers are kept on one line each, as a model writes them)
"""Citation verification on answers an LLM would write about the sample help centre: faithful
answers verify (framing words, "Yes,", a negation elsewhere in the source sentence, list lead-ins,
a second quote of the same chunk), and answers that say what the chunk does not do not."""

from __future__ import annotations

import pytest

from evals.citation_corpus import judge, section
from generator_svc.llm.base import EvidenceItem

R = ("05-refunds-for-unused-labels.md", "Refund time limits")
RM = ("05-refunds-for-unused-labels.md", "When the money comes back")
RI = ("05-refunds-for-unused-labels.md", "Refunds for Unused Labels")
RV = ("05-refunds-for-unused-labels.md", "How to void a label")
RW = ("05-refunds-for-unused-labels.md", "Withdrawing your shipping balance")
RN = ("05-refunds-for-unused-labels.md", "Things that are not refunded")
PO = ("02-plans-and-pricing.md", "Plan overview")
PI = ("02-plans-and-pricing.md", "What each plan includes")
PA = ("02-plans-and-pricing.md", "Label allowance")
PF = ("02-plans-and-pricing.md", "Free trial")
T2 = ("23-two-factor-authentication.md", "Methods")
TB = ("23-two-factor-authentication.md", "Backup codes")
TT = ("23-two-factor-authentication.md", "Requiring 2FA for your team")
TS = ("23-two-factor-authentication.md", "Turning on 2FA")
TL = ("23-two-factor-authentication.md", "Lost your phone and backup codes?")
CD = ("10-international-shipping-customs.md", "Customs declarations")
DT = ("10-international-shipping-customs.md", "Duties and taxes")
AL = ("27-api-rate-limits.md", "Limits by plan")
AH = ("27-api-rate-limits.md", "Higher limits")
GL = ("15-tracking-status-glossary.md", "Before the parcel moves")
ZH = "退款时间\n\n未使用的标签可在购买后30天内作废。大多数退款在5个工作日内完成。"
DE = "Rückerstattungen\n\nDie meisten Rückerstattungen werden innerhalb von 5 Werktagen abgeschlossen. Nicht verwendete Etiketten können innerhalb von 30 Tagen storniert werden."


def _evidence(source: tuple[str, str] | str) -> EvidenceItem:
    if isinstance(source, str):
        return EvidenceItem("", "", source)
    return section(*source)


def _verified(answer: str, sources: list[tuple[str, str] | str], question: str = "") -> bool:
    """Verified as the generator verifies it, framing words included for English answers."""
    return judge(answer, tuple(_evidence(s) for s in sources), question).verified


@pytest.mark.parametrize(
    ("answer", "sources"),
    [
        pytest.param(
            'Refunds usually take "within 5 business days" to complete. [1]', [RM], id="F01"
        ),
        pytest.param(
            'According to the help centre, "most refunds complete within 5 business days." [1]',
            [RM],
            id="F02",
        ),
        pytest.param(
            'You can void an unused label "within 30 days" of buying it. [1]', [R], id="F03"
        ),
        pytest.param(
            'Unused labels can be voided "within 30 days of buying it". [1]', [R], id="F04"
        ),
        pytest.param(
            'The article says: "Most refunds complete within 5 business days." [1]', [RM], id="F05"
        ),
        pytest.param(
            "You can void the label and get the postage back on your shipping balance. [1]",
            [RI],
            id="F06",
        ),
        pytest.param(
            'If a parcel is not being sent, "you can void the label and get the postage back on your shipping balance". [1]',
            [RI],
            id="F07",
        ),
        pytest.param(
            'Yes, "you can dispute a rejected refund by contacting Support within 30 days". [1]',
            [RM],
            id="F08",
        ),
        pytest.param('No, "labels with a carrier scan cannot be voided". [1]', [R], id="F09"),
        pytest.param(
            "Kestrel Express International uses paperless customs, so the CD-2 is sent electronically. [1]",
            [CD],
            id="F10",
        ),
        pytest.param("2FA is handled by your identity provider instead. [1]", [TT], id="F11"),
        pytest.param(
            "The Growth plan adds the following features:\n- the branded returns portal [1]\n- SMS notifications [1]\n- live chat support [1]",
            [PI],
            id="F12",
        ),
        pytest.param(
            "To void an unused label, follow these steps:\n1. Go to **Shipments** and find the label. [1]\n2. Click **More > Void label** (or press **V**). [1]",
            [RV],
            id="F13",
        ),
        pytest.param(
            'Scale customers who need more than 1200 requests per minute "can ask Support for a higher limit". [1]',
            [AH],
            id="F14",
        ),
        pytest.param(
            'On the Scale plan, the "Labels included per month" figure is 10,000. [1]',
            [PO],
            id="F15",
        ),
        pytest.param("You get **10 backup codes**. [1]", [TB], id="F20"),
        pytest.param(
            'Note that "unused labels do not roll over to the next month". [1]', [PA], id="F21"
        ),
        pytest.param(
            'Parcelio says "each code is valid for 10 minutes" for SMS codes. [1]', [T2], id="F22"
        ),
        pytest.param("未使用的标签可在购买后30天内作废。[1]", [ZH], id="F23"),
        pytest.param(
            'Laut Hilfe-Center "werden innerhalb von 5 Werktagen abgeschlossen" die meisten Rückerstattungen. [1]',
            [DE],
            id="F25",
        ),
        pytest.param(
            "Die meisten Rückerstattungen werden innerhalb von 5 Werktagen abgeschlossen. [1]",
            [DE],
            id="F26",
        ),
        pytest.param(
            'Withdrawals "have a $10 minimum and are returned to the original payment method". [1]',
            [RW],
            id="F28",
        ),
        pytest.param(
            'With Kestrel Express International "you can choose DDP instead", so you pay the duties and taxes. [1]',
            [DT],
            id="F29",
        ),
        pytest.param(
            'Backup codes: "each code can be used once instead of a 6-digit code". [1]',
            [TB],
            id="F30",
        ),
        pytest.param(
            'Return labels count toward your allowance "only when they are actually used". [1]',
            [PA],
            id="F31",
        ),
        pytest.param(
            'New accounts get "a 14-day free trial with Growth features" and up to 25 labels. [1]',
            [PF],
            id="F32",
        ),
        pytest.param(
            'An identity check is done before resetting 2FA, and "this takes up to 2 business days". [1]',
            [TL],
            id="F34",
        ),
        pytest.param(
            'Team members who haven\'t set up 2FA "cannot use Parcelio until they have". [1]',
            [TT],
            id="F33",
        ),
        pytest.param("Phone support is included in these plans:\n- Scale [1]", [PI], id="F35"),
        pytest.param(
            'Most refunds "complete within 5 business days", but "Kestrel Express refunds can take up to 21 days". [1]',
            [RM],
            id="F36",
        ),
        pytest.param(
            'Each backup code "can be used once instead of a 6-digit code". [1]', [TB], id="F37"
        ),
        pytest.param(
            'Voided labels "still count toward your plans monthly label allowance". [1]',
            [RN],
            id="F38",
        ),
        pytest.param('"Labels with a carrier scan cannot be voided". [1]', [R], id="F39"),
        pytest.param(
            "Parcelio can send parcels to more than 190 countries and territories. [1]",
            [("10-international-shipping-customs.md", "International Shipping and Customs Forms")],
            id="F40",
        ),
    ],
)
def test_a_faithful_answer_verifies(
    answer: str, sources: list[tuple[str, str] | str], request: pytest.FixtureRequest
) -> None:
    assert _verified(answer, sources, ASKED.get(request.node.callspec.id, ""))


#: The question of an answer whose framing names what only the question says: Parcelio is not
#: in its section.
ASKED = {"F22": "How long is a Parcelio SMS code valid?"}


def test_a_lead_in_names_the_product_only_if_the_evidence_does() -> None:
    """F13 as first written: its lead-in's "in Parcelio" is in neither its section nor a title,
    only in the question, which a lead-in may not lean on (it can carry a false premise)."""
    answer = (
        "To void an unused label in Parcelio, follow these steps:\n"
        "1. Go to **Shipments** and find the label. [1]\n"
        "2. Click **More > Void label** (or press **V**). [1]"
    )
    asked = "How do I void an unused label in Parcelio?"
    assert not _verified(answer, [RV], asked)
    assert _verified(answer, [RV, TT], asked)  # another admitted section names Parcelio


def test_a_name_nothing_shown_holds_is_framing_the_model_brought() -> None:
    """The same faithful answer fails when neither its evidence nor its question names the
    product: the model had the name from nowhere it was given."""
    answer = 'Parcelio says "each code is valid for 10 minutes" for SMS codes. [1]'
    assert _verified(answer, [T2], ASKED["F22"])
    assert not _verified(answer, [T2], "How long is an SMS code valid?")
    assert _verified(answer, [T2, TT], "How long is an SMS code valid?")


@pytest.mark.parametrize(
    ("answer", "sources"),
    [
        pytest.param(
            'Kestrel Express refunds "can take up to 5 business days", while most refunds complete within 21 days. [1]',
            [RM],
            id="W05",
        ),
        pytest.param("Included with Starter:\n- SMS notifications [1]", [PI], id="W06"),
        pytest.param("Yes. [1]", [PA], id="W07"),
        pytest.param('Growth includes "single sign-on (SAML)". [1]', [PI], id="W08"),
        pytest.param('Starter "adds the branded returns portal". [1][2]', [PI, PO], id="W09"),
        # An invented claim around a real quote (an answer-path probe's cases).
        pytest.param(
            'Premium customers can skip it, but everyone else should "enter the 6-digit code to confirm". [1]',
            [TS],
            id="W10",
        ),
        pytest.param(
            'Hackers rarely bypass it, because "each code is valid for 10 minutes". [1]',
            [T2],
            id="W11",
        ),
    ],
)
def test_an_answer_the_chunk_does_not_support_does_not_verify(
    answer: str, sources: list[tuple[str, str] | str]
) -> None:
    assert not _verified(answer, sources)
