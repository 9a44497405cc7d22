"""What `candor ask` and `candor search` print: every outcome's words, nothing a terminal runs."""

from __future__ import annotations

import argparse

import pytest

from candor.cli import client
from candor.cli.main import _api_key, _top_k
from candor.common.v1 import evidence_pb2
from candor.gate.v1 import gate_pb2
from candor.generator.v1 import generator_pb2
from candor.retrieval.v1 import retrieval_pb2


def _final(answer: str, tier: int = evidence_pb2.TIER_UNCERTAIN) -> gate_pb2.AskResponse:
    return gate_pb2.AskResponse(final=generator_pb2.AnswerFinal(answer=answer, tier=tier))


def test_a_clarify_prints_the_clarifying_question() -> None:
    decision = gate_pb2.Decision(
        outcome=gate_pb2.OUTCOME_CLARIFY,
        reason=gate_pb2.REASON_NO_HITS,
        refusal_message="I don't have information on this.",
    )
    question = "Could you say a little more about what you are looking for?"
    out = client.format_ask(client.AskResult(decision, question, _final(question)), debug=False)
    assert out.splitlines() == [question, "  [CLARIFY: NO_HITS]"]


def test_a_failed_generation_still_shows_the_decision() -> None:
    decision = gate_pb2.Decision(
        outcome=gate_pb2.OUTCOME_PASS, confidence=0.8, display_confidence=75, policy_version="v1"
    )
    result = client.AskResult(decision, "", None, "UNAVAILABLE: the answer could not be generated")
    out = client.format_ask(result, debug=True)
    assert "(no answer: UNAVAILABLE: the answer could not be generated)" in out
    assert "version v1; outcome PASS" in out


def test_control_characters_from_the_service_are_escaped() -> None:
    title = "Evil\x1b[31mRED\nFAKE LINE"
    reply = retrieval_pb2.RetrieveResponse(
        candidates=[retrieval_pb2.Candidate(chunk_id="c1", title=title, fused_rank=1)]
    )
    out = client.format_search(reply)
    assert "\x1b" not in out and "\\x1b[31mRED FAKE LINE" in out
    assert len(out.splitlines()) == 2


@pytest.mark.parametrize("bad", ["kéy", "key with space", "", "key\x00"])
def test_an_api_key_that_cannot_travel_as_metadata_is_refused(bad: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError):
        _api_key(bad)
    assert _api_key("key-acme\n") == "key-acme"  # a trailing newline from a file is dropped


@pytest.mark.parametrize("bad", ["0", "-1", "201"])
def test_top_k_out_of_range_is_refused(bad: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError):
        _top_k(bad)


def test_debug_shows_missing_facets_the_rewrite_and_the_shadow() -> None:
    decision = gate_pb2.Decision(
        outcome=gate_pb2.OUTCOME_REFUSE,
        missing_facets=["gift", "card"],
        rewritten_query="gift card refund window",
        shadow=gate_pb2.ShadowDecision(
            policy_version="v2", outcome=gate_pb2.OUTCOME_PASS, confidence=0.7, agrees=False
        ),
    )
    out = client.format_ask(client.AskResult(decision, "", None), debug=True)
    assert "missing facets: gift, card" in out
    assert "searched as: gift card refund window" in out
    assert "shadow v2: PASS, confidence 0.700 (DISAGREES)" in out


@pytest.mark.parametrize("tty", [True, False])
def test_ingest_progress_is_one_line_a_batch_unless_on_a_terminal(
    tty: bool, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("sys.stderr.isatty", lambda: tty)
    for done in (16, 32, 34):
        client.print_progress(done, 34)
    err = capsys.readouterr().err
    if tty:
        assert err.count("\r") == 3 and err.endswith("34/34\n")
    else:
        assert "\r" not in err
        assert [line.split()[-1] for line in err.splitlines()] == ["16/34", "32/34", "34/34"]


def test_a_count_of_documents_agrees_with_its_number() -> None:
    assert [client.n_documents(n) for n in (0, 1, 2)] == [
        "0 documents",
        "1 document",
        "2 documents",
    ]
