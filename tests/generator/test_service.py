"""generator_svc.service: token first, budget trimming reported, backend errors mapped, client
cancellation closes the backend stream, backend selection from settings."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncGenerator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import grpc
import httpx
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from google.rpc import error_details_pb2, status_pb2

from candor.common.v1 import evidence_pb2
from candor.generator.v1 import generator_pb2 as pb
from candor.runtime.auth import Authenticator
from candor.runtime.metrics import ServiceMetrics
from candor.settings import Settings
from candor.token import InMemoryReplayStore, TokenSigner, TokenVerifier
from generator_svc.citations import CitationClaim
from generator_svc.llm.base import BackendError, Draft, EvidenceItem, GenerationInput
from generator_svc.llm.cohere import CohereBackend
from generator_svc.llm.extractive import ExtractiveBackend
from generator_svc.llm.openai_compat import OpenAICompatBackend
from generator_svc.options import GeneratorOptions
from generator_svc.prompts import load_templates
from generator_svc.service import GeneratorMetrics, GeneratorServicer, build_backend
from tests.generator.fakes import (
    EVIDENCE,
    QUERY,
    SSE_HEADERS,
    TIMING,
    VOIDING,
    HangingStream,
    Recorder,
    Sleeps,
    oa_answer_chunks,
    oa_chunk,
    oa_sse,
)

KEY = Ed25519PrivateKey.generate()
SIGNER = TokenSigner(KEY, "k1", "candor-gate", "candor-generator", 60)


class Aborted(Exception):
    def __init__(self, status: grpc.Status) -> None:
        super().__init__(status.details)
        self.code = status.code
        raw = dict(status.trailing_metadata)["grpc-status-details-bin"]
        info = error_details_pb2.ErrorInfo()
        status_pb2.Status.FromString(raw).details[0].Unpack(info)
        self.reason = info.reason
        self.metadata = dict(info.metadata)


class FakeContext:
    def __init__(self, remaining: float | None = None) -> None:
        self.remaining = remaining

    def invocation_metadata(self) -> tuple[()]:
        return ()

    def time_remaining(self) -> float | None:
        return self.remaining

    async def abort_with_status(self, status: grpc.Status) -> None:
        raise Aborted(status)


class ScriptedBackend:
    """Yields the given events (an exception is raised); records inputs and closing."""

    name = "scripted"

    def __init__(self, *events: str | Draft | Exception, hang: bool = False) -> None:
        self.events, self.hang = events, hang
        self.inputs: list[GenerationInput] = []
        self.closed = False
        self.stalled = asyncio.Event()

    async def stream(self, inp: GenerationInput) -> AsyncGenerator[str | Draft, None]:
        self.inputs.append(inp)
        try:
            for e in self.events:
                if isinstance(e, Exception):
                    raise e
                yield e
            if self.hang:
                self.stalled.set()
                await asyncio.Event().wait()
        finally:
            self.closed = True

    async def aclose(self) -> None:
        pass


def servicer(
    backend: Any, per_tenant: int = 0, **options: Any
) -> tuple[GeneratorServicer, GeneratorMetrics]:
    settings = Settings()
    settings = dataclasses.replace(
        settings,
        generator=dataclasses.replace(settings.generator, max_in_flight_per_tenant=per_tenant),
    )
    verifier = TokenVerifier(
        {"k1": KEY.public_key()}, "candor-gate", "candor-generator", InMemoryReplayStore()
    )
    metrics = GeneratorMetrics(ServiceMetrics())
    svc = GeneratorServicer(
        settings,
        verifier,
        backend,
        Authenticator(settings.auth, "test"),
        metrics,
        GeneratorOptions(**options),
        load_templates(),
    )
    return svc, metrics


def request(
    evidence: tuple[EvidenceItem, ...] = EVIDENCE,
    tier: str = "confident",
    tenant: str = "acme",
    **kw: Any,
) -> pb.GenerateRequest:
    token, _ = SIGNER.mint(
        tenant=tenant,
        query=QUERY,
        evidence=[(e.chunk_id, e.text) for e in evidence],
        policy_version="v1",
        tier=tier,
        confidence=0.8,
    )
    return pb.GenerateRequest(
        pass_token=token,
        query=QUERY,
        evidence=[
            evidence_pb2.Evidence(chunk_id=e.chunk_id, title=e.title, text=e.text) for e in evidence
        ],
        language="en",
        **kw,
    )


async def run(svc: GeneratorServicer, req: pb.GenerateRequest) -> list[pb.GenerateResponse]:
    return [r async for r in svc.Generate(req, FakeContext())]  # type: ignore[arg-type]


def calls(m: GeneratorMetrics, backend: str) -> float:
    return float(m.llm_calls.labels(backend)._value.get())


def outcome(m: GeneratorMetrics, backend: str, name: str) -> float:
    return float(m.llm_outcomes.labels(backend, name)._value.get())


SENTENCE = "Most refunds complete within 5 business days."
GOOD = Draft(f"{SENTENCE} [2]", (CitationClaim(TIMING.chunk_id, SENTENCE),), 10, 9)


async def test_a_refused_token_never_reaches_the_backend() -> None:
    backend = ScriptedBackend("x", GOOD)
    svc, m = servicer(backend)
    req = request()
    req.query = "Something else entirely?"
    with pytest.raises(Aborted) as err:
        await run(svc, req)
    assert err.value.code == grpc.StatusCode.PERMISSION_DENIED
    assert err.value.reason == "QUERY_MISMATCH"
    assert backend.inputs == []
    assert calls(m, "scripted") == 0


async def test_answer_streams_deltas_then_a_verified_final() -> None:
    backend = ScriptedBackend(f"{SENTENCE} [2]", GOOD)
    svc, m = servicer(backend)
    out = await run(svc, request())
    assert [r.delta.text for r in out[:-1]] == [f"{SENTENCE} [2]"]
    final = out[-1].final
    assert final.verification.passed and final.tier == evidence_pb2.TIER_CONFIDENT
    assert final.backend == "scripted" and list(final.trimmed_chunk_ids) == []
    assert final.truncated_chunk_id == ""
    assert calls(m, "scripted") == 1 and outcome(m, "scripted", "ok") == 1
    assert m.tokens.labels("scripted", "output")._value.get() == 9


async def test_a_tenant_at_its_share_is_refused_before_its_token_is_spent() -> None:
    # One answer being written for acme (the LLM has started and not finished).
    backend = ScriptedBackend("Most refunds", hang=True)
    svc, m = servicer(backend, per_tenant=1)
    first = svc.Generate(request(), FakeContext())  # type: ignore[arg-type]
    assert (await anext(first)).delta.text == "Most refunds"

    waiting = request()
    with pytest.raises(Aborted) as limited:
        await run(svc, waiting)
    assert limited.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert limited.value.reason == "TENANT_LIMIT"
    assert limited.value.metadata == {
        "tenant": "acme",
        "max_in_flight_per_tenant": "1",
        "service": "generator",
    }
    assert "generator.max_in_flight_per_tenant" in str(limited.value)
    assert calls(m, "scripted") == 1, "a refused answer must not reach the LLM"
    assert m.tenant_limited._value.get() == 1

    # Another tenant is not held back by acme.
    backend.hang, backend.events = False, (f"{SENTENCE} [2]", GOOD)
    other = await run(svc, request(tenant="globex"))
    assert other[-1].final.verification.passed

    # The first answer ends (its caller went away): acme's slot is back, and the refused
    # request's token was never spent, so the same request is now answered.
    backend.closed = False
    await first.aclose()
    assert backend.closed
    again = await run(svc, waiting)
    assert again[-1].final.verification.passed
    assert m.tenant_limited._value.get() == 1


async def test_no_per_tenant_limit_by_default() -> None:
    backend = ScriptedBackend("Most refunds", hang=True)
    svc, m = servicer(backend)
    held = [svc.Generate(request(), FakeContext()) for _ in range(3)]  # type: ignore[arg-type]
    assert [(await anext(h)).delta.text for h in held] == ["Most refunds"] * 3
    assert calls(m, "scripted") == 3 and m.tenant_limited._value.get() == 0
    for h in held:
        await h.aclose()


async def test_an_unverifiable_answer_fails_verification_whatever_its_citations_hold() -> None:
    uncited = "Refunds are paid in cash."
    draft = Draft(
        f"{uncited} {SENTENCE} [2]",
        GOOD.citations,
        10,
        9,
        unverifiable=(f"cites nothing: {uncited!r}",),
    )
    svc, m = servicer(ScriptedBackend(draft))
    final = (await run(svc, request()))[-1].final
    assert not final.verification.passed
    assert final.tier == evidence_pb2.TIER_VERIFICATION_FAILED
    assert uncited in final.verification.detail
    assert m.verifications.labels("failed")._value.get() == 1
    assert m.verification_failures.labels("uncited_sentence")._value.get() == 1
    assert m.verification_failures.labels("other")._value.get() == 0


async def test_evidence_over_the_budget_is_trimmed_lowest_ranked_first_and_reported() -> None:
    filler = " ".join(["word"] * 100)
    ev = (
        TIMING,
        EvidenceItem("b#1", "B", filler),
        EvidenceItem("c#1", "C", filler),
    )
    backend = ScriptedBackend(GOOD)
    budget = 200  # TIMING (~24) + one filler (~132) fit, the second filler does not
    svc, m = servicer(backend, context_budget_tokens=budget)
    out = await run(svc, request(ev))
    assert [e.chunk_id for e in backend.inputs[0].evidence] == [TIMING.chunk_id, "b#1"]
    final = out[-1].final
    assert list(final.trimmed_chunk_ids) == ["c#1"]
    assert final.verification.passed
    assert m.trimmed._value.get() == 1


async def test_a_citation_of_evidence_the_budget_trimmed_fails_and_says_so(
    caplog: pytest.LogCaptureFixture,
) -> None:
    filler = EvidenceItem("b#1", "B", " ".join(["word"] * 100))
    cites_trimmed = Draft(f"{SENTENCE} [2]", (CitationClaim(TIMING.chunk_id, SENTENCE),), 10, 9)
    svc, _ = servicer(ScriptedBackend(cites_trimmed), context_budget_tokens=150)
    with caplog.at_level("INFO"):
        final = (await run(svc, request((filler, TIMING))))[-1].final
    assert list(final.trimmed_chunk_ids) == [TIMING.chunk_id]
    assert not final.verification.passed
    (failed,) = final.verification.failed_citations
    assert failed.failure == "cites evidence trimmed from the model's context"
    # The log says why, as the reply does (it said "verified": false and nothing more).
    [line] = [r for r in caplog.records if r.getMessage() == "answer generated"]
    assert line.verification_detail == "1 citation(s) did not hold"  # type: ignore[attr-defined]
    assert line.failed_citations == [  # type: ignore[attr-defined]
        f"{TIMING.chunk_id}: cites evidence trimmed from the model's context"
    ]


async def test_a_top_chunk_cut_to_fit_the_budget_is_reported() -> None:
    top = EvidenceItem("b#1", "B", " ".join(["word"] * 100))
    svc, m = servicer(ScriptedBackend(GOOD), context_budget_tokens=40)
    final = (await run(svc, request((top, TIMING))))[-1].final
    assert final.truncated_chunk_id == "b#1"
    assert list(final.trimmed_chunk_ids) == [TIMING.chunk_id]
    assert m.trimmed._value.get() == 2  # the dropped chunk and the cut one


async def test_uncertain_tier_and_clarify_only_reach_the_backend() -> None:
    backend = ScriptedBackend(Draft("Which label?", (), 1, 2, is_clarification=True))
    svc, _ = servicer(backend)
    out = await run(svc, request(tier="uncertain", clarify_only=True))
    inp = backend.inputs[0]
    assert inp.tier == "uncertain" and inp.clarify_only
    final = out[-1].final
    assert final.is_clarification and final.verification.passed
    assert final.tier == evidence_pb2.TIER_UNCERTAIN


def _openai_saying(*pieces: str) -> OpenAICompatBackend:
    rec = Recorder(httpx.Response(200, headers=SSE_HEADERS, content=oa_answer_chunks(pieces)))
    return OpenAICompatBackend(
        base_url="http://llm.internal/v1",
        model="m",
        templates=load_templates(),
        transport=httpx.MockTransport(rec),
        sleep=Sleeps(),
    )


@pytest.mark.parametrize(
    "reply",
    [
        "Brazil won the 1998 World Cup, beating France 3-0. It was their fifth title.",
        "Did you know unused labels can be voided within 90 days?",
    ],
)
async def test_a_clarify_only_reply_that_states_things_fails_verification(reply: str) -> None:
    svc, m = servicer(_openai_saying(reply))
    final = (await run(svc, request((), tier="no_match", clarify_only=True)))[-1].final
    assert not final.verification.passed and not final.is_clarification
    assert final.tier == evidence_pb2.TIER_VERIFICATION_FAILED
    assert "clarify-only" in final.verification.detail
    assert m.verifications.labels("failed")._value.get() == 1


async def test_a_clarifying_question_passes_at_the_no_match_tier() -> None:
    svc, _ = servicer(_openai_saying("Do you mean a shipping label or a return label?"))
    final = (await run(svc, request((), tier="no_match", clarify_only=True)))[-1].final
    assert final.verification.passed and final.is_clarification
    assert final.tier == evidence_pb2.TIER_NO_MATCH


async def test_an_uncertain_answer_may_not_open_with_an_unchecked_claim() -> None:
    claim = "Two-factor authentication can be bypassed at any time with the backup code 0000."
    svc, _ = servicer(_openai_saying(f"{claim} Most refunds complete within 5 business days. [2]"))
    final = (await run(svc, request(tier="uncertain")))[-1].final
    assert not final.verification.passed and claim in final.verification.detail

    svc, _ = servicer(_openai_saying("This may be incomplete. ", f"{SENTENCE} [2]"))
    final = (await run(svc, request(tier="uncertain")))[-1].final
    assert final.verification.passed and final.tier == evidence_pb2.TIER_UNCERTAIN


@pytest.mark.parametrize(
    ("reason", "code"),
    [
        ("TIMEOUT", grpc.StatusCode.DEADLINE_EXCEEDED),
        ("RATE_LIMITED", grpc.StatusCode.RESOURCE_EXHAUSTED),
        ("UPSTREAM_UNAVAILABLE", grpc.StatusCode.UNAVAILABLE),
        ("MALFORMED_STREAM", grpc.StatusCode.INTERNAL),
        ("UPSTREAM_REJECTED", grpc.StatusCode.INTERNAL),
    ],
)
async def test_backend_errors_become_rich_statuses(reason: str, code: grpc.StatusCode) -> None:
    backend = ScriptedBackend("partial", BackendError(reason, "it broke", status=503))
    svc, m = servicer(backend)
    with pytest.raises(Aborted) as err:
        await run(svc, request())
    assert err.value.code == code
    assert err.value.reason == f"LLM_{reason}"
    assert err.value.metadata == {"backend": "scripted", "http_status": "503"}
    assert calls(m, "scripted") == 1  # the backend was called: counted
    assert outcome(m, "scripted", reason.lower()) == 1
    assert backend.closed


async def test_closing_the_rpc_mid_answer_closes_the_backend_stream() -> None:
    backend = ScriptedBackend("You can", hang=True)
    svc, m = servicer(backend)
    stream = svc.Generate(request(), FakeContext())  # type: ignore[arg-type]
    first = await stream.__anext__()
    assert first.delta.text == "You can"
    assert not backend.closed
    # A client cancel reaches a streaming handler parked at its yield as GeneratorExit.
    await stream.aclose()  # type: ignore[attr-defined]
    assert backend.closed
    assert outcome(m, "scripted", "cancelled") == 1
    # The same end with the caller's deadline spent is counted apart: the LLM was too slow.
    backend = ScriptedBackend("You can", hang=True)
    svc, m = servicer(backend)
    stream = svc.Generate(request(), FakeContext(remaining=0.0))  # type: ignore[arg-type]
    await stream.__anext__()
    await stream.aclose()  # type: ignore[attr-defined]
    assert (outcome(m, "scripted", "deadline"), outcome(m, "scripted", "cancelled")) == (1, 0)


async def test_cancelling_the_rpc_closes_the_openai_http_stream() -> None:
    body = HangingStream([oa_sse(oa_chunk("", role="assistant"), oa_chunk("You can"), done=False)])
    rec = Recorder(httpx.Response(200, headers=SSE_HEADERS, stream=body))
    backend = OpenAICompatBackend(
        base_url="http://llm.internal/v1",
        model="m",
        templates=load_templates(),
        transport=httpx.MockTransport(rec),
    )
    svc, m = servicer(backend)
    seen: list[str] = []

    async def consume() -> None:
        async for r in svc.Generate(request(), FakeContext()):  # type: ignore[arg-type]
            seen.append(r.delta.text)

    task = asyncio.create_task(consume())  # grpc.aio cancels the handler task like this
    await asyncio.wait_for(body.stalled.wait(), 5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert seen == ["You can"]
    assert body.closed
    assert outcome(m, "openai_compat", "cancelled") == 1


async def test_openai_compat_answer_end_to_end_through_the_servicer() -> None:
    answer = [
        "You can void an unused label within 30 days of buying it. [1]",
        " Most refunds complete within 5 business days. [2]",
    ]
    rec = Recorder(httpx.Response(200, headers=SSE_HEADERS, content=oa_answer_chunks(answer)))
    backend = OpenAICompatBackend(
        base_url="http://llm.internal/v1",
        model="m",
        templates=load_templates(),
        transport=httpx.MockTransport(rec),
        sleep=Sleeps(),
    )
    svc, _ = servicer(backend)
    out = await run(svc, request())
    final = out[-1].final
    assert final.answer == "".join(answer)
    assert [c.chunk_id for c in final.citations] == [VOIDING.chunk_id, TIMING.chunk_id]
    assert all(c.verified for c in final.citations)
    assert final.verification.passed and final.tier == evidence_pb2.TIER_CONFIDENT
    assert (final.usage.input_tokens, final.usage.output_tokens) == (180, 21)
    assert final.backend == "openai_compat"


@pytest.mark.parametrize(
    ("framing", "language", "passed"),
    [
        pytest.param("Refunds usually", "en", True, id="common-words"),
        pytest.param("For unused labels, refunds", "en", True, id="title-and-question-words"),
        pytest.param("Premium refunds", "en", False, id="invented-audience"),
        pytest.param("Premium refunds", "", False, id="detected-english"),
        # The tag is the language the model was told to write in; untagged, the words decide.
        pytest.param("Premium refunds", "de", True, id="another-tag-unchecked"),
        pytest.param("Laut Hilfe-Center werden Prämien", "", True, id="untagged-german"),
    ],
)
async def test_an_english_answers_rare_framing_words_must_come_from_what_it_was_shown(
    framing: str, language: str, passed: bool
) -> None:
    quote = "complete within 5 business days"
    sentence = f'{framing} "{quote}".'
    draft = Draft(f"{sentence} [2]", (CitationClaim(TIMING.chunk_id, quote, sentence),), 10, 9)
    svc, m = servicer(ScriptedBackend(draft))
    req = request()
    req.language = language
    final = (await run(svc, req))[-1].final
    assert final.verification.passed is passed
    invented = m.verification_failures.labels("invented_word")._value.get()
    assert invented == (0 if passed else 1)
    if not passed:
        assert "premium, which its evidence does not" in final.citations[0].failure


async def test_groundedness_when_enabled_fails_an_unsupported_sentence() -> None:
    text = f"{SENTENCE} [2] Refunds are also paid in gold coins."
    draft = Draft(text, (CitationClaim(TIMING.chunk_id, SENTENCE),), 10, 9)
    off, _ = servicer(ScriptedBackend(draft))
    assert (await run(off, request()))[-1].final.verification.passed
    on, m = servicer(ScriptedBackend(draft), groundedness=True)
    final = (await run(on, request()))[-1].final
    assert not final.verification.passed
    assert final.tier == evidence_pb2.TIER_VERIFICATION_FAILED
    assert "1 sentence(s) not supported" in final.verification.detail
    assert m.groundedness.labels("failed")._value.get() == 1
    band, _ = servicer(ScriptedBackend(draft), groundedness=True, groundedness_max_confidence=0.5)
    assert (await run(band, request()))[-1].final.verification.passed  # 0.8 is outside the band


# --- options and backend selection ------------------------------------------------------------


def test_options_default_from_todays_settings() -> None:
    o = GeneratorOptions.from_settings(Settings().generator)
    assert o.backend == "extractive" and o.context_budget_tokens == 3000
    assert o.max_sentences == Settings().generator.max_sentences


def test_options_read_nested_fields_where_present() -> None:
    g = SimpleNamespace(
        backend="openai_compat",
        context_budget_tokens=900,
        llm=SimpleNamespace(max_retries=5, timeout_seconds=12.0),
        openai_compat=SimpleNamespace(base_url="http://vllm:8000/v1", model="qwen"),
    )
    o = GeneratorOptions.from_settings(g)
    assert (o.backend, o.context_budget_tokens) == ("openai_compat", 900)
    assert (o.llm.max_retries, o.llm.timeout_seconds, o.llm.backoff_seconds) == (5, 12.0, 0.5)
    assert (o.openai_compat.model, o.cohere.model) == ("qwen", "command-a-03-2025")


@pytest.mark.parametrize(
    ("g", "message"),
    [
        (SimpleNamespace(backend="gpt"), "generator.backend must be one of"),
        (SimpleNamespace(backend="openai_compat"), "openai_compat.model is required"),
        (SimpleNamespace(llm=SimpleNamespace(max_retries=-1)), "max_retries"),
    ],
)
def test_invalid_options_name_the_setting(g: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        GeneratorOptions.from_settings(g)


async def test_build_backend_selects_by_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    t = load_templates()
    monkeypatch.delenv("CO_API_KEY", raising=False)
    assert isinstance(build_backend(GeneratorOptions(), t), ExtractiveBackend)
    secret = tmp_path / "cohere-key"
    secret.write_text("co-from-file\n")
    cohere_opts = GeneratorOptions.from_settings(
        SimpleNamespace(backend="cohere", cohere=SimpleNamespace(api_key_file=str(secret)))
    )
    co = build_backend(cohere_opts, t)
    assert isinstance(co, CohereBackend)
    await co.aclose()
    with pytest.raises(ValueError, match="API key"):
        build_backend(GeneratorOptions(backend="cohere"), t)
    monkeypatch.setenv("CO_API_KEY", "co-from-env")
    co = build_backend(GeneratorOptions(backend="cohere"), t)
    assert isinstance(co, CohereBackend)
    await co.aclose()
    oa_opts = GeneratorOptions.from_settings(
        SimpleNamespace(backend="openai_compat", openai_compat=SimpleNamespace(model="m"))
    )
    oa = build_backend(oa_opts, t)
    assert isinstance(oa, OpenAICompatBackend)
    await oa.aclose()


def test_an_empty_secret_file_fails_start_up(tmp_path: Path) -> None:
    secret = tmp_path / "key"
    secret.write_text("\n")
    opts = GeneratorOptions.from_settings(
        SimpleNamespace(backend="cohere", cohere=SimpleNamespace(api_key_file=str(secret)))
    )
    with pytest.raises(RuntimeError, match="empty"):
        build_backend(opts, load_templates())


async def test_time_to_first_token_resolves_the_extractive_backends_milliseconds() -> None:
    svc, m = servicer(ExtractiveBackend(3))
    await run(svc, request())
    # ~0.5 ms locally: it lands in a bucket well under 50 ms, not the first bound of seconds.
    samples = {
        s.labels.get("le"): s.value
        for metric in m.first_token.collect()
        for s in metric.samples
        if s.name.endswith("_bucket") and s.labels.get("backend") == "extractive"
    }
    assert samples.get("0.025") == 1, samples


def _rejections(m: GeneratorMetrics) -> dict[str, float]:
    return {
        s.labels["reason"]: s.value
        for metric in m.token_rejections.collect()
        for s in metric.samples
        if s.name.endswith("_total")
    }


async def test_a_malformed_request_is_not_counted_as_a_refused_token() -> None:
    svc, m = servicer(ScriptedBackend(GOOD))
    blank = request()
    blank.query = " "
    with pytest.raises(Aborted) as err:
        await run(svc, blank)
    assert err.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert _rejections(m) == {}
    missing = request()
    missing.pass_token = ""
    with pytest.raises(Aborted):
        await run(svc, missing)
    assert _rejections(m) == {"TOKEN_MISSING": 1}
    # An unknown evidence kind, as UpsertDocuments refuses it (it was streamed an answer).
    unknown = request()
    unknown.evidence[0].source_kind = 99  # type: ignore[assignment]
    with pytest.raises(Aborted) as err:
        await run(svc, unknown)
    assert err.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert "evidence[0].source_kind: unknown value 99" in str(err.value)


async def test_verbatim_answers_never_load_the_language_model(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Deciding whether an answer is English loads langid and word frequencies (~110 MiB, a
    # 10k-chunk benchmark's peak RSS 495 -> 607 MiB): the extractive answerer quotes whole
    # sentences, whose framing there is nothing of to read.
    def refuse(*_: object) -> None:
        raise AssertionError("framing read for a verbatim answer")

    monkeypatch.setattr("generator_svc.service.framing_of", refuse)
    svc, _ = servicer(ExtractiveBackend())
    final = (await run(svc, request()))[-1].final
    assert final.verification.passed and len(final.citations) >= 1
