"""The shipped evidence reader: pair encoding, and that it tells an answer from a near miss."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from gate_svc.reader import (
    MAX_QUESTION_TOKENS,
    MAX_TOKENS,
    MODEL_PATH,
    ReadAbandoned,
    bundled_readers,
    encode_pairs,
    model_digest,
    reader_file,
    reader_question,
    shared_reader,
)
from gate_svc.reader_files import bundled_name
from gate_svc.reader_view import (
    READER_SIGNALS,
    ReaderView,
    reader_log_odds,
    reader_texts,
    weighs_reader,
)
from gate_svc.signals import CandidateView


def test_pairs_are_cls_question_sep_evidence_sep_with_segments() -> None:
    enc = encode_pairs(["who wrote it?", "when"], ["Jane wrote it.", "In 1813, long ago."])
    ids, mask, types = enc["input_ids"], enc["attention_mask"], enc["token_type_ids"]
    assert ids.shape == mask.shape == types.shape
    assert ids.dtype.name == "int64"
    for row in range(2):
        n = int(mask[row].sum())
        assert ids[row, 0] == 101 and ids[row, n - 1] == 102
        first_sep = list(ids[row]).index(102)
        assert set(types[row, : first_sep + 1]) == {0}
        assert set(types[row, first_sep + 1 : n]) == {1}
        assert not ids[row, n:].any() and not types[row, n:].any()


def test_long_inputs_are_cut_to_the_window_keeping_both_segments() -> None:
    long_question = " ".join(f"why {i}" for i in range(200))  # not one word repeated: read once
    enc = encode_pairs([long_question], ["evidence " * 400])
    ids = list(enc["input_ids"][0])
    assert len(ids) == MAX_TOKENS
    assert ids.index(102) == MAX_QUESTION_TOKENS + 1


# Hand-written, not from HaluEval: each question with a chunk that answers it and one on the
# same topic that does not.
GIFT_CARDS = "Gift cards can be refunded within 14 days of purchase if they have not been used."
ORDERS = (
    "Orders can be refunded within 30 days of delivery. Refunds go back to the original "
    "payment method."
)
CASES = [
    (
        "What year did the bridge over the Tamar open?",
        "The Tamar Bridge carries the A38 over the river. It opened to traffic in 1961 after two "
        "years of construction.",
        "The Tamar Bridge carries the A38 over the river. It is maintained by a joint committee "
        "of the two councils and is lit at night.",
    ),
    (
        "Who founded the company that makes the Model Q kettle?",
        "The Model Q kettle is made by Brightwell Appliances, a firm founded by Ada Brightwell "
        "in Leeds.",
        "The Model Q kettle is made by Brightwell Appliances. It boils 1.7 litres and switches "
        "off automatically.",
    ),
    (
        # Readers v2 and v3 read the same kind of answer for a neighbouring entity as the better
        # answer (v3: 0.69 against 0.63); v4, trained also on SQuAD 2.0's human-written
        # unanswerable questions (Disfl-QA), ranks it right (0.41 against 0.30).
        "How long is the refund window for gift cards?",
        GIFT_CARDS,
        ORDERS,
    ),
    (
        # v1 read the general chunk, which shares "high tides", as the answer; v2 to v4 do not.
        "How high was the highest tide ever recorded in Canada?",
        "The highest tide recorded in Canada reached 16.3 metres, in the Bay of Fundy in 1869.",
        "The Moon's gravity pulls the oceans, which causes two high tides every day. Spring "
        "tides happen at new and full moon.",
    ),
    (
        "What is the capital of the province where Lake Vire is located?",
        "Lake Vire lies in the province of Ostmark, whose capital is Haldberg.",
        "Lake Vire lies in the province of Ostmark. It is popular with anglers and sailors.",
    ),
]


def test_a_neighbouring_entity_does_not_read_as_an_answer() -> None:
    # Readers v1 to v3 read the orders chunk as more likely an answer than not (v3: 0.69);
    # v4 scores it 0.30 (docs/evaluation.md, the Disfl-QA section). The opt-in v5 does not
    # (0.80), though it ranks the gift-card chunk above it (next test).
    (near,) = shared_reader().score("How long is the refund window for gift cards?", [ORDERS])
    assert near < 0.5


READERS = bundled_readers()


def test_both_readers_ship_and_settings_name_them() -> None:
    assert set(READERS) == {"v4", "v5"}
    assert reader_file() == MODEL_PATH
    assert reader_file("v5").name == "reader-v5.onnx" and reader_file("v5").is_file()
    assert str(reader_file("v5", "/elsewhere/r.onnx")) == "/elsewhere/r.onnx"
    with pytest.raises(ValueError, match=r"bundled readers v4, v5, got 'v9'"):
        reader_file("v9")
    with pytest.raises(ValueError, match="bundled readers"):
        reader_file("../models/reader-v4")
    assert [bundled_name(model_digest(reader_file(m))) for m in READERS] == list(READERS)
    assert bundled_name("0123456789abcdef") == ""


@pytest.mark.parametrize("model", READERS)
@pytest.mark.parametrize(("question", "answers", "near_miss"), CASES)
def test_the_answering_chunk_outscores_the_near_miss(
    question: str, answers: str, near_miss: str, model: str
) -> None:
    good, near = shared_reader(reader_file(model)).score(question, [answers, near_miss])
    assert 0.0 <= near < good <= 1.0


def test_a_chunk_reads_the_same_whatever_it_is_read_with() -> None:
    # The int8 graph quantises activations with one scale per run: read beside others, a
    # chunk's score depended on them (gate.reader.top_k > 1).
    question, answers, near_miss = CASES[0]
    alone = shared_reader().score(question, [answers])
    assert shared_reader().score(question, [near_miss, answers, ORDERS])[1] == alone[0]


@pytest.mark.parametrize("model", READERS)
def test_an_off_topic_chunk_scores_low(model: str) -> None:
    (p,) = shared_reader(reader_file(model)).score(
        "What year did the bridge over the Tamar open?",
        ["Sourdough starter is flour and water kept alive with regular feeding."],
    )
    assert p < 0.2
    assert shared_reader().score("anything", []) == []


@pytest.mark.parametrize("model", READERS)
def test_the_shipped_file_records_how_it_was_trained(model: str) -> None:
    meta = json.loads(reader_file(model).with_suffix(".json").read_text())
    assert meta["pairs"] > 5000
    assert "held-out" in meta["data"]


def test_the_log_odds_keep_no_reading_lowest_and_a_certain_one_highest() -> None:
    assert reader_log_odds(0.0) == 0.0 and reader_log_odds(1.0) == 1.0
    assert reader_log_odds(0.5) == pytest.approx(0.5)
    # Equal steps in odds are equal steps here, which they are not in probability.
    step = reader_log_odds(0.99) - reader_log_odds(0.9)
    assert reader_log_odds(0.999) - reader_log_odds(0.99) == pytest.approx(step, rel=0.05)
    assert {"reader", "reader_log_odds"} <= READER_SIGNALS


def test_view_signals_and_texts() -> None:
    # log(0.7 / 0.3) = 0.8473 on a scale whose ends are log(9999) = 9.2102 either side of 0.
    assert ReaderView((0.2, 0.7)).signal_values() == pytest.approx(
        {
            "reader_fallback": 0.0,
            "reader": 0.7,
            "reader_top1": 0.2,
            "reader_log_odds": (0.8473 + 9.2102) / (2 * 9.2102),
        },
        abs=1e-4,
    )
    assert ReaderView(error="boom").signal_values() == {"reader_fallback": 1.0}
    c = CandidateView("c", "p", "d", "Tides", "Two a day.", 1, 0.5, 1.0, 0.1, 1, True)
    assert reader_texts([c, c], 1) == ["Tides\nTwo a day."]
    assert weighs_reader({"reader": 1.0, "top_cosine": 2.0})
    assert not weighs_reader({"top_cosine": 2.0, "reader": 0.0})


def test_a_read_is_skipped_only_when_a_certain_reading_would_refuse() -> None:
    from gate_svc.policy import parse_policy, skip_reading, uses_reader

    policy = parse_policy(
        "version: r1\npolicy: calibrated\ncalibrated:\n  bias: 0.0\n"
        "  coefficients: {reader: 2.0, top_cosine: 40.0}\n"
        "  means: {reader: 0.5, top_cosine: 0.6}\n  scales: {reader: 1.0, top_cosine: 1.0}\n"
    )
    assert uses_reader(policy)

    def cand(cosine: float) -> CandidateView:
        return CandidateView("c", "p", "d", "", "text", 1, cosine, 1.0, 0.03, 1, True)

    assert skip_reading([cand(0.2)], policy, "q") == "pass_bound"
    assert skip_reading([cand(0.8)], policy, "q") == ""
    negative = parse_policy(
        "version: r2\npolicy: calibrated\ncalibrated:\n  bias: 0.0\n"
        "  coefficients: {reader_top1: -1.0, top_cosine: 40.0}\n"
        "  means: {top_cosine: 0.6}\n"
    )
    # Not monotone in the reader: never skip.
    assert skip_reading([cand(0.2)], negative, "q") == ""
    assert not uses_reader(parse_policy("version: s\npolicy: seed000\n"))


#: sigmoid(2 * (reader - 0.5) + 40 * (top_cosine - 0.6)); pass bound 0.5, read floor 0.8.
FLOORED = (
    "version: f1\npolicy: calibrated\ncalibrated:\n  bias: 0.0\n"
    "  coefficients: {reader: 2.0, top_cosine: 40.0}\n"
    "  means: {reader: 0.5, top_cosine: 0.6}\n  scales: {reader: 1.0, top_cosine: 1.0}\n"
    "  read_floor: 0.8\ntiers: {confident: 0.9, uncertain: 0.5}\n"
)


def _cand(cosine: float) -> CandidateView:
    return CandidateView("c", "p", "d", "", "text", 1, cosine, 1.0, 0.03, 1, True)


def test_the_read_floor_refuses_what_only_a_reading_could_pass_read_or_not() -> None:
    from gate_svc.policy import POLICIES, decide, parse_policy, skip_reading
    from gate_svc.signals import Signals, sigmoid

    policy = parse_policy(FLOORED)
    # top_cosine 0.58: a certain reading gives sigmoid(1 - 0.8) = 0.55, above the pass bound
    # (0.5) and below the floor (0.8).
    c = [_cand(0.58)]
    assert skip_reading(c, policy, "q") == "read_floor"
    without = parse_policy(FLOORED.replace("  read_floor: 0.8\n", ""))
    assert skip_reading(c, without, "q") == ""
    assert decide(c, without, "q", reader=ReaderView((0.99,))).outcome == "pass"
    read = decide(c, policy, "q", reader=ReaderView((0.99,)))
    unread = decide(c, policy, "q", reader=ReaderView(skipped=True))
    assert read.outcome == unread.outcome == "refuse"
    assert read.reason == unread.reason == "low_confidence"
    assert "read floor" in read.detail and "0.550" in read.detail
    # One decision and confidence whether the gate read or not: the no-reading value.
    assert read.confidence == unread.confidence == pytest.approx(sigmoid(-1.0 - 0.8))
    assert read.thresholds["read_floor"] == 0.8
    # Rows replayed from their saved signals (the evaluation) decide the same way.
    replay = POLICIES["calibrated"](c, Signals(dict(read.signals), (), ""), policy, None)
    assert (replay.outcome, replay.confidence) == (read.outcome, read.confidence)
    # Well above the floor, the reading decides as before.
    assert skip_reading([_cand(0.7)], policy, "q") == ""
    assert decide([_cand(0.7)], policy, "q", reader=ReaderView((0.99,))).outcome == "pass"


def test_read_floor_must_be_a_probability() -> None:
    from gate_svc.policy import PolicyError, parse_policy

    for bad in ("1.5", "-0.1", "yes", "'0.7'"):
        with pytest.raises(PolicyError, match="read_floor"):
            parse_policy(FLOORED.replace("read_floor: 0.8", f"read_floor: {bad}"))


def test_get_policy_lists_the_read_floor_only_when_set() -> None:
    from gate_svc.policy import parse_policy, policy_thresholds

    assert policy_thresholds(parse_policy(FLOORED))["calibrated.read_floor"] == 0.8
    without = parse_policy(FLOORED.replace("  read_floor: 0.8\n", ""))
    assert "calibrated.read_floor" not in policy_thresholds(without)


#: FLOORED with a no-reading model: sigmoid(bias + 20 * (top_cosine - 0.6)).
def _with_unread(bias: float) -> str:
    return FLOORED.replace(
        "  read_floor: 0.8\n",
        f"  read_floor: 0.8\n  unread: {{bias: {bias}, coefficients: {{top_cosine: 20.0}}}}\n",
    )


def test_an_unread_decision_takes_the_no_reading_models_confidence_read_or_not() -> None:
    from gate_svc.policy import POLICIES, decide, parse_policy
    from gate_svc.signals import Signals, sigmoid

    policy = parse_policy(_with_unread(0.0))
    c = [_cand(0.58)]  # unread under the floor: a certain reading gives sigmoid(0.2)
    read = decide(c, policy, "q", reader=ReaderView((0.99,)))
    unread = decide(c, policy, "q", reader=ReaderView(skipped=True))
    assert read.outcome == unread.outcome == "refuse"
    assert read.confidence == unread.confidence == pytest.approx(sigmoid(20.0 * -0.02))
    replay = POLICIES["calibrated"](c, Signals(dict(read.signals), (), ""), policy, None)
    assert replay.confidence == read.confidence
    # Above the floor the full model decides, reading included: the no-reading model is unused.
    above = decide([_cand(0.7)], policy, "q", reader=ReaderView((0.2,)))
    assert above.confidence == pytest.approx(sigmoid(2.0 * -0.3 + 40.0 * 0.1))


def test_the_no_reading_confidence_never_exceeds_a_certain_readings() -> None:
    from gate_svc.policy import decide, parse_policy
    from gate_svc.signals import sigmoid

    # bias 2: sigmoid(2 - 0.4) = 0.83 would pass the bound no reading reaches; capped at 0.55.
    policy = parse_policy(_with_unread(2.0))
    d = decide([_cand(0.58)], policy, "q", reader=ReaderView(skipped=True))
    assert d.outcome == "refuse"
    assert d.confidence == pytest.approx(sigmoid(0.2))
    assert d.signals["calibrated_logit"] == pytest.approx(0.2)


def test_the_no_reading_model_is_validated_and_listed() -> None:
    from gate_svc.policy import PolicyError, parse_policy, policy_thresholds

    thresholds = policy_thresholds(parse_policy(_with_unread(0.5)))
    assert thresholds["calibrated.unread.bias"] == 0.5
    assert thresholds["calibrated.unread.coefficients.top_cosine"] == 20.0
    assert not any(
        k.startswith("calibrated.unread") for k in policy_thresholds(parse_policy(FLOORED))
    )
    for bad, match in (
        ("{bias: 0, coefficients: {reader: 1.0}}", "cannot weigh reader"),
        ("{bias: 0, coefficients: {no_such_signal: 1.0}}", "unknown signals"),
        ("{bias: yes, coefficients: {}}", "unread.bias"),
        ("{bias: 0, coefficients: {top_cosine: '1'}}", "unread.coefficients"),
        ("{bias: 0, means: {}}", "mapping of bias and coefficients"),
        ("[1, 2]", "mapping of bias and coefficients"),
    ):
        text = FLOORED.replace("  read_floor: 0.8\n", f"  read_floor: 0.8\n  unread: {bad}\n")
        with pytest.raises(PolicyError, match=match):
            parse_policy(text)


@pytest.mark.parametrize(
    ("query", "read"),
    [
        ("Is there a phone app? Is there a phone app?", "Is there a phone app?"),
        ("is there a phone app   is there a phone app", "is there a phone app"),
        ("What is PX-403?\nwhat is px-403?", "What is PX-403?"),
        ("Why? Why not?", "Why? Why not?"),
        ("New York New York is a song by whom?", "New York New York is a song by whom?"),
        ("New York New York", "New York New York"),
        ("Is there a phone app? Is there a phone app", "Is there a phone app?"),
        ("Is there a phone app? (Is there a phone app?)", "Is there a phone app?"),
        ("Is there a phone app, is there a phone app", "Is there a phone app"),
        ("Is there a phone app - Is there a phone app?", "Is there a phone app?"),
        ("Is there a phone app??Is there a phone app", "Is there a phone app?"),
        ("Is there a phone app.Is there a phone app.Is there a phone app", "Is there a phone app"),
        ("Is there an app? Is there an app for Android?", "Is there an app for Android?"),
        ("Is it free? Is it free?", "Is it free?"),
        ("Is it? Is it free?", "Is it? Is it free?"),
        (
            "Who served in the Minnesota House of Representatives and the U.S. House of "
            "Representatives?",
            "Who served in the Minnesota House of Representatives and the U.S. House of "
            "Representatives?",
        ),
    ],
)
def test_the_reader_reads_each_sentence_of_the_question_once(query: str, read: str) -> None:
    assert reader_question(query) == read


@pytest.mark.parametrize(
    "twice",
    [
        "{q} {q}",
        "{q} {q} {q}",
        "{q} {bare}",
        "{q} ({q})",
        "{q}. {q}",
        "{q}?? {q}",
        "{bare}, {bare}",
        "{bare} - {q}",
    ],
)
def test_a_repeated_question_reads_as_the_question(twice: str) -> None:
    # Sent twice, a help-centre near miss read 0.40 -> 0.91 and passed the gate; the second
    # copy without its "?" or in brackets read 0.31 -> 0.80-0.89 and passed.
    question = "Is there a Parcelio phone app for managing shipments on the go?"
    sent = twice.format(q=question, bare=question.rstrip("?"))
    single = question if "?" in sent else question.rstrip("?")
    chunk = "Parcelio is a web app for small businesses. It runs in any modern browser."
    once, again = (shared_reader().score(q, [chunk])[0] for q in (single, sent))
    assert again == pytest.approx(once, abs=0.01)


def test_a_read_past_its_deadline_is_not_run(monkeypatch: pytest.MonkeyPatch) -> None:
    # Under overload a read whose caller had gone still ran and made every later read late.
    reader = shared_reader()
    question, answers, _ = CASES[0]
    (expected,) = reader.score(question, [answers])
    assert reader.score(question, [answers], time.monotonic() + 60) == [expected]
    runs: list[object] = []
    session = reader._session

    class Counting:
        def run(self, *args: Any) -> Any:
            runs.append(args)
            return session.run(*args)

    monkeypatch.setattr(reader, "_session", Counting())
    with pytest.raises(ReadAbandoned):
        reader.score(question, [answers], time.monotonic() - 0.001)
    assert runs == []
    reader.score(question, [answers], time.monotonic() + 60)
    assert len(runs) == 1
    assert issubclass(ReadAbandoned, TimeoutError)  # the gate's timeout fallback catches it
