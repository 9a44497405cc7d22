"""Counterfactual twins for the reader's training: the answer taken out, nothing else."""

from __future__ import annotations

from evals.reader_counterfactual import answer_kind, counterfactual_pairs
from evals.reader_data import Pair

GODMOTHER = "Who is the godmother of Mia Tindall?"
ANSWERS = {
    1: "Zara Phillips",
    2: "Gaumont",
    3: "1844",
    4: "Tom Paxton",
    5: "Arthur's Magazine",
    6: "Pathé",
    7: "1991",
}


def _twin(pair: Pair) -> Pair | None:
    out = counterfactual_pairs([pair], ANSWERS, seed=0, swap_share=0.0)
    return out[0] if out else None


def test_an_answer_opening_its_sentence_becomes_a_pronoun() -> None:
    twin = _twin(Pair(1, GODMOTHER, "Zara Phillips is the godmother of Mia Tindall.", "answers"))
    assert twin is not None and twin.label == "near_miss" and twin.question_line == 1
    assert twin.evidence in (
        "He is the godmother of Mia Tindall.",
        "She is the godmother of Mia Tindall.",
    )


def test_an_answer_mid_sentence_is_swapped_for_another_answer_of_its_kind() -> None:
    film = Pair(2, "Which studio made the film?", "The film was made by Gaumont.", "answers")
    other = Pair(6, "Which studio made the short?", "The short was made by Pathé.", "answers")
    twins = counterfactual_pairs([film, other], ANSWERS, seed=0, swap_share=0.0)
    assert [t.evidence for t in twins] == [
        "The film was made by Pathé.",
        "The short was made by Gaumont.",
    ]
    founded = Pair(3, "When was it founded?", "It was founded in 1844 in Philadelphia.", "answers")
    rival = Pair(7, "When was it sold?", "It was sold in 1991.", "answers")
    year = counterfactual_pairs([founded, rival], ANSWERS, seed=0)[0]
    assert year.evidence == "It was founded in 1991 in Philadelphia."


def test_no_twin_where_the_answer_is_in_the_question_or_not_in_the_evidence() -> None:
    choice = "Which magazine came first, Arthur's Magazine or First for Women?"
    assert _twin(Pair(5, choice, "Arthur's Magazine was started in 1844.", "answers")) is None
    assert _twin(Pair(1, GODMOTHER, "Mia Tindall was born in 2014.", "answers")) is None


def test_a_twin_still_naming_the_answer_is_dropped() -> None:
    text = "Songs by Tom Paxton and others. In 2009, Paxton received a Grammy award."
    assert _twin(Pair(4, "Who played with Bill Lee?", text, "answers")) is None


def test_only_positives_get_twins() -> None:
    near = Pair(1, GODMOTHER, "Zara Phillips rides horses.", "near_miss")
    assert counterfactual_pairs([near], ANSWERS) == []


def test_answer_kinds() -> None:
    assert [answer_kind(a) for a in ("1844", "Gaumont", "a stage magician")] == [
        "number",
        "name",
        "other",
    ]


def test_wrong_answers_come_only_from_the_pairs_own_questions() -> None:
    """An evaluated question's answer is in ``answers`` (the whole source) but not in the pairs:
    it must never be swapped in."""
    pairs = [
        Pair(2, "Which studio made the film?", "The film was made by Gaumont.", "answers"),
        Pair(1, GODMOTHER, "Mia Tindall's godmother is Zara Phillips.", "answers"),
    ]
    for seed in range(20):
        for twin in counterfactual_pairs(pairs, ANSWERS, seed=seed):
            assert not any(a in twin.evidence for a in ("Tom Paxton", "Arthur's Magazine", "Pathé"))
