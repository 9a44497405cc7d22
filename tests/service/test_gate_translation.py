"""The gate's refusal in a language the message table lacks, translated by a real (local, fake)
OpenAI-compatible endpoint; English when that endpoint fails; never called for the table."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from candor.cli.stack import start_stack
from candor.gate.v1 import gate_pb2
from candor.settings import load_settings
from gate_svc.refusal import DEFAULT_MESSAGES
from tests.helpers import Stack, evaluate, metric_value, scrape, seed_bikes, stack_env
from tests.llm.server import FakeLLM, fake_llm
from tests.rerank.fakes import oa_completion, oa_error

POLISH = "Nie mam informacji na ten temat w bazie wiedzy."
# Out of the knowledge base below, so every one is refused.
POLISH_QUERY = "Kto wygrał mistrzostwa świata w piłce nożnej w 1998 roku?"
SWEDISH_QUERY = "Vem vann fotbolls-VM 1998 och vem gjorde flest mål?"
GERMAN_QUERY = "Wer hat die Fußball-Weltmeisterschaft 1998 gewonnen?"


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Stack, FakeLLM]]:
    tmp = tmp_path_factory.mktemp("translation")
    with fake_llm(lambda body: oa_completion(POLISH)) as llm:
        env = stack_env(
            str(tmp / "data"),
            CANDOR_GATE__TRANSLATION__BACKEND="openai_compat",
            CANDOR_GATE__TRANSLATION__BASE_URL=llm.base_url,
            CANDOR_GATE__TRANSLATION__MODEL="small",
        )
        s = Stack(lambda: start_stack(load_settings(env=env)))
        seed_bikes(s)
        yield s, llm
        s.stop()


def translations(stack: Stack, outcome: str) -> float:
    text = scrape(stack.metrics_port("GateService"))
    return metric_value(text, "candor_gate_refusal_translations_total", {"outcome": outcome})


def test_a_refusal_outside_the_table_is_translated_then_cached(
    stack: tuple[Stack, FakeLLM],
) -> None:
    s, llm = stack
    before = len(llm.bodies)
    d = evaluate(s, POLISH_QUERY)
    assert d.outcome == gate_pb2.OUTCOME_REFUSE
    assert (d.refusal_message, d.refusal_language) == (POLISH, "pl")
    assert llm.bodies[before]["messages"][1]["content"] == DEFAULT_MESSAGES["en"]
    again = evaluate(s, "Ile kosztuje bilet na mecz finałowy mistrzostw świata?")
    assert (again.refusal_message, again.refusal_language) == (POLISH, "pl")
    assert len(llm.bodies) == before + 1
    assert translations(s, "translated") == 1 and translations(s, "cached") >= 1


def test_a_failing_translator_gives_the_english_message(stack: tuple[Stack, FakeLLM]) -> None:
    s, llm = stack
    llm.handler = lambda body: oa_error(503, "model is loading")
    try:
        d = evaluate(s, SWEDISH_QUERY)
    finally:
        llm.handler = lambda body: oa_completion(POLISH)
    assert d.outcome == gate_pb2.OUTCOME_REFUSE
    assert (d.refusal_message, d.refusal_language) == (DEFAULT_MESSAGES["en"], "en")
    assert translations(s, "failed") == 1


def test_a_table_language_never_calls_the_translator(stack: tuple[Stack, FakeLLM]) -> None:
    s, llm = stack
    before = len(llm.bodies)
    d = evaluate(s, GERMAN_QUERY)
    assert (d.refusal_message, d.refusal_language) == (DEFAULT_MESSAGES["de"], "de")
    assert len(llm.bodies) == before
