"""A tiny synthetic source shaped like HaluEval's QA, dialogue and summarization files.

Made-up names (pseudo-words) keep questions from accidentally answering each other, except
where a case below arranges it on purpose:

- plain questions: "In which city was the painter known for the series W born?" over a
  two-paragraph passage joined without a space (as in HaluEval), answer a city;
- yes/no comparisons (can't be near misses: the answer can't be located);
- "X or Y?" choices (can't be near misses: the answer is named in the question);
- passages shared by several questions, and passages sharing only one long sentence;
- cross-leak pairs: each passage of a pair also states the other question's answer next to
  most of its terms, so whichever lands in the negative half must be dropped;
- three-word answers the passage also gives reworded (first and last name): a near miss must
  lose that sentence too, and is dropped when too little text is left;
- distractors: dialogue knowledge (one of them answering a plain question, one duplicate)
  and long news documents (to be cut to their lead).
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evals.datasets.halueval import SOURCE_FILES

_CONSONANTS = "bdfgklmnprstvz"
_VOWELS = "aeiou"


def _words(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    out: dict[str, None] = {}
    while len(out) < n:
        word = "".join(rng.choice(_CONSONANTS) + rng.choice(_VOWELS) for _ in range(3))
        out.setdefault(word.capitalize(), None)
    return list(out)


@dataclass
class Fixture:
    directory: Path
    qa: list[dict[str, Any]]
    dialogue: list[dict[str, Any]]
    summarization: list[dict[str, Any]]


def write_fixture(directory: Path, n_plain: int = 40) -> Fixture:
    names = iter(_words(600, seed=7))
    qa: list[dict[str, Any]] = []

    def add(knowledge: str, question: str, answer: str) -> None:
        qa.append(
            {
                "knowledge": knowledge,
                "question": question,
                "right_answer": answer,
                "hallucinated_answer": "Somewhere else entirely.",
            }
        )

    plain: list[tuple[str, str, str, str]] = []
    for i in range(n_plain):
        person, work, city = next(names), next(names), next(names)
        year = str(1900 + i)
        plain.append((person, work, city, year))
        knowledge = (
            f"{person} is a painter known for the series {work} and for many large murals."
            f"{person} was born in the city of {city} in {year} and studied there."
        )
        add(knowledge, f"In which city was the painter known for the series {work} born?", city)
    # Three more questions on the first plain passages (shared passage -> same group).
    for _person, work, _city, year in plain[:3]:
        knowledge = next(q["knowledge"] for q in qa if work in q["question"])
        add(knowledge, f"In what year was the painter known for the series {work} born?", year)
    # Passages sharing one long sentence with a plain passage (-> same group).
    for person, work, _city, _year in plain[3:6]:
        other = next(names)
        knowledge = (
            f"{person} is a painter known for the series {work} and for many large murals."
            f"{other} is a gallery that first showed the work of {person} to the public."
        )
        add(knowledge, f"Which gallery first showed the work of {person}?", other)
    # Yes/no comparisons.
    for _ in range(6):
        a, b = next(names), next(names)
        add(
            f"{a} is a sculptor from the northern hills of the old valley."
            f"{b} is a sculptor from the southern coast of the old valley.",
            f"Are {a} and {b} both sculptors?",
            "yes",
        )
    # "X or Y?" choices.
    for i in range(6):
        a, b = next(names), next(names)
        add(
            f"{a} is a rowing club founded in {1800 + i} on the wide river."
            f"{b} is a rowing club founded in {1850 + i} on the narrow canal.",
            f"Which rowing club was founded first, {a} or {b}?",
            a,
        )
    # Cross-leak pairs.
    for _ in range(4):
        p1, w1, c1 = next(names), next(names), next(names)
        p2, w2, c2 = next(names), next(names), next(names)
        add(
            f"{p1} is a composer known for the cycle {w1} for strings. {p1} was born in {c1}."
            f"A festival devoted to the cycle {w2} by a composer born in {c2} is held yearly.",
            f"Where was the composer known for the cycle {w1} born?",
            c1,
        )
        add(
            f"{p2} is a composer known for the cycle {w2} for winds. {p2} was born in {c2}."
            f"A festival devoted to the cycle {w1} by a composer born in {c1} is held yearly.",
            f"Where was the composer known for the cycle {w2} born?",
            c2,
        )
    # Answers of three words that the passage also gives reworded (first and last name only):
    # removing the reworded sentence leaves a near miss (these) ...
    for _ in range(6):
        first, middle, last, work = next(names), next(names), next(names), next(names)
        add(
            f"{first} {middle} {last} is a painter of the {work} murals and of harbour scenes."
            f"The murals of {work} were painted by {first} {last} over many long summers."
            "The harbour scenes hang in a museum with a garden by the old port.",
            f"Who painted the {work} murals?",
            f"{first} {middle} {last}",
        )
    # ... or too little text to be one (these are dropped when negative).
    for _ in range(6):
        first, middle, last, work = next(names), next(names), next(names), next(names)
        add(
            f"{first} {middle} {last} is a poet of the northern coast."
            f"The {work} poems were written by {first} {last} in the hills.",
            f"Who wrote the {work} poems?",
            f"{first} {middle} {last}",
        )

    dialogue: list[dict[str, Any]] = []
    for _ in range(30):
        film, actor, other = next(names), next(names), next(names)
        dialogue.append(
            {
                "knowledge": f"{film} is starring {actor}.{actor} starred in {other}",
                "dialogue_history": f"[Human]: Do you like {film}? ",
                "right_response": "I do.",
                "hallucinated_response": "I don't.",
            }
        )
    person, work, city, _year = plain[7]
    dialogue.append(
        {
            "knowledge": f"The painter known for the series {work} was born in {city}.",
            "dialogue_history": "[Human]: Tell me about painters. ",
            "right_response": "Sure.",
            "hallucinated_response": "No.",
        }
    )
    dialogue.append(dict(dialogue[0]))  # a duplicate

    summarization: list[dict[str, Any]] = []
    for i in range(30):
        town, mayor = next(names), next(names)
        sentences = [
            f"{town} (News) The council of {town} voted on Tuesday to rebuild the old bridge "
            f"over the river after a long and heated debate among the residents.",
            f"Mayor {mayor} said the work would start in the spring and last about two years, "
            "with the road closed to heavy traffic for most of that time.",
            "Local shop owners worried that the closure would keep visitors away from the "
            "market square, which depends on trade from the neighbouring villages.",
            f"The bridge, built in {1850 + i}, was found to be unsafe by engineers last winter "
            "after a survey of its foundations and of the stone arches above them.",
            "A temporary footbridge will be put up next to it so that people can still walk "
            "into the town centre while the work goes on.",
        ]
        summarization.append(
            {
                "document": " ".join(sentences),
                "right_summary": "The bridge will be rebuilt.",
                "hallucinated_summary": "The bridge will be demolished.",
            }
        )

    directory.mkdir(parents=True, exist_ok=True)
    for key, rows in (("qa", qa), ("dialogue", dialogue), ("summarization", summarization)):
        with (directory / SOURCE_FILES[key]).open("w", encoding="utf-8") as f:
            for row in rows:
                f.write(json.dumps(row, ensure_ascii=False) + "\n")
    return Fixture(directory, qa, dialogue, summarization)
