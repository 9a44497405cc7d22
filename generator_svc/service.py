"""GeneratorService: checks the pass token before anything else, then answers and verifies."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncGenerator, AsyncIterator
from pathlib import Path
from typing import NoReturn

import grpc
from google.protobuf.duration_pb2 import Duration
from prometheus_client import Counter, Histogram

from candor.common.v1 import evidence_pb2
from candor.generator.v1 import generator_pb2 as pb
from candor.generator.v1 import generator_pb2_grpc as pb_grpc
from candor.runtime.admission import TenantShare
from candor.runtime.auth import Authenticator
from candor.runtime.errors import FieldViolations, abort_info, abort_invalid
from candor.runtime.metrics import ServiceMetrics, deadline_spent
from candor.runtime.server import ServiceSpec
from candor.runtime.validation import check_enum, check_language, check_query
from candor.secrets import read_secret
from candor.settings import Settings, SettingsError
from candor.text import zipf
from candor.token import InMemoryReplayStore, KeyRing, PassClaims, TokenError, TokenVerifier
from generator_svc.citations import FAILURE_REASONS, failure_reason, verify_citations
from generator_svc.groundedness import GroundednessResult, check_groundedness
from generator_svc.llm.base import BackendError, Draft, EvidenceItem, GenerationInput, LLMBackend
from generator_svc.llm.extractive import CAVEAT, ExtractiveBackend
from generator_svc.llm.retry import RetryPolicy
from generator_svc.options import GeneratorOptions
from generator_svc.prompts import (
    PromptTemplates,
    fit_to_budget,
    framing_of,
    language_of,
    load_templates,
)

SERVICE_NAME = pb.DESCRIPTOR.services_by_name["GeneratorService"].full_name
log = logging.getLogger("candor.generator")
_TIERS = {
    "confident": evidence_pb2.TIER_CONFIDENT,
    "uncertain": evidence_pb2.TIER_UNCERTAIN,
    "no_match": evidence_pb2.TIER_NO_MATCH,
}
# BackendError.reason -> the status the caller sees (ErrorInfo reason LLM_<reason>).
_BACKEND_STATUS = {
    "TIMEOUT": grpc.StatusCode.DEADLINE_EXCEEDED,
    "RATE_LIMITED": grpc.StatusCode.RESOURCE_EXHAUSTED,
    "UPSTREAM_UNAVAILABLE": grpc.StatusCode.UNAVAILABLE,
    "UPSTREAM_ERROR": grpc.StatusCode.UNAVAILABLE,
    "UPSTREAM_REJECTED": grpc.StatusCode.INTERNAL,
    "MALFORMED_STREAM": grpc.StatusCode.INTERNAL,
}
_LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2, 4, 8, 15, 30, 60)
# The extractive backend's first token comes in ~0.5 ms, a hosted LLM's in seconds: buckets
# from 0.25 ms, or every local answer would read as the first bucket's bound.
FIRST_TOKEN_BUCKETS = (
    0.00025,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1,
    2,
    4,
    8,
    15,
    30,
    60,
)


_LOGGED_DETAIL_CHARS = 160
"""How much of a verification reason the answer log keeps: reasons can quote the answer."""


def _frames_quotes(draft: Draft) -> bool:
    """Whether a citation quotes part of its sentence, so its framing is read: the extractive
    answerer's never do, and deciding whether an answer is English loads a language model and
    word frequencies (~110 MiB) that its deployments otherwise never need."""
    return any((c.sentence and c.sentence != c.quote) or c.lead_in for c in draft.citations)


class GeneratorMetrics:
    def __init__(self, metrics: ServiceMetrics) -> None:
        self.tenant_limited = Counter(
            "candor_generator_tenant_limited_total",
            "Answers refused RESOURCE_EXHAUSTED (TENANT_LIMIT): the tenant already had "
            "generator.max_in_flight_per_tenant answers being written on this pod.",
            registry=metrics.registry,
        )
        self.llm_calls = Counter(
            "candor_generator_llm_calls_total",
            "Calls to the LLM backend.",
            ["backend"],
            registry=metrics.registry,
        )
        self.token_rejections = Counter(
            "candor_generator_token_rejections_total",
            "Pass tokens refused, by reason.",
            ["reason"],
            registry=metrics.registry,
        )
        self.verifications = Counter(
            "candor_generator_verifications_total",
            "Citation verification results.",
            ["result"],
            registry=metrics.registry,
        )
        self.verification_failures = Counter(
            "candor_generator_verification_failures_total",
            "Why answers failed verification: one per failed citation, uncited sentence or "
            "other problem, by reason.",
            ["reason"],
            registry=metrics.registry,
        )
        for _, reason in FAILURE_REASONS:  # every reason exported from the start, at 0
            self.verification_failures.labels(reason)
        self.llm_outcomes = Counter(
            "candor_generator_llm_outcomes_total",
            "How LLM calls ended: ok, deadline (the caller's ran out), cancelled, or the "
            "BackendError reason (lower case).",
            ["backend", "outcome"],
            registry=metrics.registry,
        )
        self.first_token = Histogram(
            "candor_generator_time_to_first_token_seconds",
            "From calling the backend to its first text delta.",
            ["backend"],
            buckets=FIRST_TOKEN_BUCKETS,
            registry=metrics.registry,
        )
        self.generation = Histogram(
            "candor_generator_generation_seconds",
            "From calling the backend to its final draft.",
            ["backend"],
            buckets=_LATENCY_BUCKETS,
            registry=metrics.registry,
        )
        self.tokens = Counter(
            "candor_generator_llm_tokens_total",
            "Tokens the backend reported (or estimated), by direction (input, output).",
            ["backend", "direction"],
            registry=metrics.registry,
        )
        self.trimmed = Counter(
            "candor_generator_evidence_trimmed_total",
            "Evidence chunks dropped, or cut short, to fit the context budget.",
            registry=metrics.registry,
        )
        self.groundedness = Counter(
            "candor_generator_groundedness_total",
            "Groundedness checks by result (passed, failed); only when enabled.",
            ["result"],
            registry=metrics.registry,
        )


class GeneratorServicer(pb_grpc.GeneratorServiceServicer):
    def __init__(
        self,
        settings: Settings,
        verifier: TokenVerifier,
        backend: LLMBackend,
        auth: Authenticator,
        metrics: GeneratorMetrics,
        options: GeneratorOptions | None = None,
        templates: PromptTemplates | None = None,
    ) -> None:
        self._s = settings.generator
        self._verifier, self._backend, self._auth, self._m = verifier, backend, auth, metrics
        self._opts = options or GeneratorOptions.from_settings(settings.generator)
        self._templates = templates or load_templates(self._opts.prompts_path)
        self._tenants = TenantShare(
            self._s.max_in_flight_per_tenant, "generator", metrics.tenant_limited
        )

    async def _refuse_token(self, exc: TokenError, context: grpc.aio.ServicerContext) -> NoReturn:
        self._m.token_rejections.labels(exc.reason).inc()
        log.warning("pass token refused", extra={"reason": exc.reason})
        await abort_info(context, grpc.StatusCode.PERMISSION_DENIED, exc.reason, str(exc))

    async def Generate(
        self, request: pb.GenerateRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.GenerateResponse]:
        start = time.perf_counter()
        # Key first: a caller without one must not learn (or count as rejected) token validity.
        caller = await self._auth.authenticate(context)
        v = FieldViolations()
        if not request.pass_token:
            v.add("pass_token", "required")
        check_query(request.query, self._s.max_query_chars, v)
        check_language(request.language, v)
        for i, e in enumerate(request.evidence):
            if not e.chunk_id:
                v.add(f"evidence[{i}].chunk_id", "required")
            # As UpsertDocuments refuses it: an unknown kind was streamed an answer.
            check_enum(
                e.source_kind, evidence_pb2.SourceKind.DESCRIPTOR, v, f"evidence[{i}].source_kind"
            )
        if v:
            # A malformed request is the caller's mistake (INVALID_ARGUMENT in
            # grpc_server_handled_total), not a refused token: CandorPassTokenRejected would
            # page for it.
            if not request.pass_token:
                self._m.token_rejections.labels("TOKEN_MISSING").inc()
            await abort_invalid(context, v)
        evidence = [(e.chunk_id, e.text) for e in request.evidence]
        titles = [e.title for e in request.evidence]
        try:
            claims = self._verifier.check(request.pass_token, request.query, evidence, titles)
        except TokenError as exc:
            await self._refuse_token(exc, context)
        # Authorised before the token is spent: a caller refused here must not use it up.
        await self._auth.authorize(context, caller, claims.tenant)
        # A tenant at its share is refused before the token is spent, too: asking again is safe.
        async with self._tenants.slot(claims.tenant, context):
            try:
                self._verifier.spend(claims)
            except TokenError as exc:
                await self._refuse_token(exc, context)
            # aclosing: a client's cancel closes this stream at its yield; the answer's own
            # stream must be closed with it (it closes the LLM's HTTP response).
            async with contextlib.aclosing(self._answer(request, claims, context, start)) as out:
                async for reply in out:
                    yield reply

    async def _answer(
        self,
        request: pb.GenerateRequest,
        claims: PassClaims,
        context: grpc.aio.ServicerContext,
        start: float,
    ) -> AsyncGenerator[pb.GenerateResponse, None]:
        """The LLM's answer to an authorised request whose token is spent, verified."""
        budget = fit_to_budget(
            [EvidenceItem(e.chunk_id, e.title, e.text) for e in request.evidence],
            self._opts.context_budget_tokens,
        )
        if budget.trimmed_chunk_ids or budget.truncated_chunk_id:
            # A cut top chunk counts: its tail is text the model never saw, too.
            self._m.trimmed.inc(len(budget.trimmed_chunk_ids) + bool(budget.truncated_chunk_id))
            log.info(
                "evidence trimmed to the context budget",
                extra={
                    "budget_tokens": self._opts.context_budget_tokens,
                    "kept": len(budget.kept),
                    "trimmed_chunk_ids": list(budget.trimmed_chunk_ids),
                    "truncated_chunk_id": budget.truncated_chunk_id,
                },
            )
        inp = GenerationInput(
            query=request.query,
            evidence=budget.kept,
            language=request.language,
            tier=claims.tier,
            clarify_only=request.clarify_only or claims.clarify_only,
            caveat=self._templates.caveat,
            deadline=_deadline(context),
        )
        name = self._backend.name
        # Counted here, once per actual backend call: every refusal above returned already.
        self._m.llm_calls.labels(name).inc()
        called = time.perf_counter()
        first_token = True
        draft: Draft | None = None
        try:
            # aclosing: however this call ends (client cancel included), the backend's stream
            # is closed, which closes its HTTP response and stops the LLM call.
            async with contextlib.aclosing(self._backend.stream(inp)) as events:
                async for event in events:
                    if isinstance(event, Draft):
                        draft = event
                    else:
                        if first_token:
                            self._m.first_token.labels(name).observe(time.perf_counter() - called)
                            first_token = False
                        yield pb.GenerateResponse(delta=pb.AnswerDelta(text=event))
        except BackendError as exc:
            self._m.llm_outcomes.labels(name, exc.reason.lower()).inc()
            log.warning(
                "LLM backend failed",
                extra={
                    "backend": name,
                    "reason": exc.reason,
                    "status": exc.status,
                    "upstream": exc.upstream,
                },
            )
            metadata = {"backend": name} | ({"http_status": str(exc.status)} if exc.status else {})
            await abort_info(
                context,
                _BACKEND_STATUS.get(exc.reason, grpc.StatusCode.INTERNAL),
                f"LLM_{exc.reason}",
                str(exc),
                metadata,
            )
        except (asyncio.CancelledError, GeneratorExit):
            # A client cancel reaches a handler waiting at its yield as GeneratorExit (the
            # stream is closed), one waiting on the backend as CancelledError.
            # Apart: deadlines cut short say the LLM is slow for its callers; cancels do not.
            ended = "deadline" if deadline_spent(context) else "cancelled"
            self._m.llm_outcomes.labels(name, ended).inc()
            raise
        if draft is None:
            self._m.llm_outcomes.labels(name, "no_result").inc()
            await abort_info(
                context,
                grpc.StatusCode.INTERNAL,
                "BACKEND_NO_RESULT",
                "the LLM backend ended without a result",
            )
        self._m.llm_outcomes.labels(name, "ok").inc()
        self._m.generation.labels(name).observe(time.perf_counter() - called)
        self._m.tokens.labels(name, "input").inc(draft.input_tokens)
        self._m.tokens.labels(name, "output").inc(draft.output_tokens)
        # Against what the model was shown: a chunk the budget trimmed (or cut) was not.
        checks = verify_citations(
            draft.citations,
            {e.chunk_id: e.text for e in budget.kept},
            withheld=budget.trimmed_chunk_ids,
            asked=framing_of(inp, draft.text) if _frames_quotes(draft) else None,
        )
        failed = [c for c in checks if not c.verified]
        unverifiable = list(draft.unverifiable)
        if inp.clarify_only and not draft.is_clarification:
            # The token allows one clarifying question and nothing else: a reply that states
            # things (the model answering from its own knowledge) is checked by nothing.
            unverifiable.append("a clarify-only answer must be one short question stating nothing")
        passed = not failed and not unverifiable and (bool(checks) or draft.is_clarification)
        problems = [f"{len(failed)} citation(s) did not hold"] if failed else []
        problems += unverifiable
        if not checks and not draft.is_clarification and not unverifiable:
            problems.append("the answer cites no evidence")
        detail = "" if passed else "; ".join(problems)
        grounded = self._groundedness(draft, budget.kept, claims.confidence)
        if grounded is not None and not grounded.passed:
            passed = False
            note = f"{len(grounded.unsupported)} sentence(s) not supported by the evidence"
            detail = f"{detail}; {note}" if detail else note
            problems.append(note)
        # Each failed citation by its own reason, not the "N citation(s) did not hold" summary.
        for why in [c.failure for c in failed] + problems[bool(failed) :]:
            self._m.verification_failures.labels(failure_reason(why)).inc()
        self._m.verifications.labels("passed" if passed else "failed").inc()
        tier = (
            _TIERS.get(claims.tier, evidence_pb2.TIER_UNCERTAIN)
            if passed
            else (evidence_pb2.TIER_VERIFICATION_FAILED)
        )
        latency = Duration()
        latency.FromNanoseconds(int((time.perf_counter() - start) * 1e9))
        citations = [
            evidence_pb2.Citation(
                chunk_id=c.chunk_id, quote=c.quote, verified=c.verified, failure=c.failure
            )
            for c in checks
        ]
        log.info(
            "answer generated",
            extra={
                "backend": name,
                "prompt_version": self._templates.version,
                # The threshold config that let this answer through, as the token says.
                "policy_version": claims.policy_version,
                "tenant": claims.tenant,
                "verified": passed,
                "citations": len(checks),
                # Why not, when not: the log said verified false and nothing more (a probe).
                # Cut short: a reason can quote the answer's own sentences.
                "verification_detail": "" if passed else detail[:_LOGGED_DETAIL_CHARS],
                "failed_citations": [
                    f"{c.chunk_id}: {c.failure[:_LOGGED_DETAIL_CHARS]}"
                    for c in checks
                    if not c.verified
                ],
                "input_tokens": draft.input_tokens,
                "output_tokens": draft.output_tokens,
            },
        )
        yield pb.GenerateResponse(
            final=pb.AnswerFinal(
                answer=draft.text,
                citations=citations,
                verification=evidence_pb2.Verification(
                    passed=passed,
                    failed_citations=[c for c in citations if not c.verified],
                    detail=detail,
                ),
                tier=tier,
                usage=pb.Usage(input_tokens=draft.input_tokens, output_tokens=draft.output_tokens),
                latency=latency,
                backend=self._backend.name,
                trimmed_chunk_ids=list(budget.trimmed_chunk_ids),
                truncated_chunk_id=budget.truncated_chunk_id,
                is_clarification=draft.is_clarification,
            )
        )

    def _groundedness(
        self, draft: Draft, evidence: tuple[EvidenceItem, ...], confidence: float
    ) -> GroundednessResult | None:
        """Seed 003's check, when enabled and the gate's confidence is in the ambiguous band."""
        o = self._opts
        if not o.groundedness or draft.is_clarification:
            return None
        if not o.groundedness_min_confidence <= confidence <= o.groundedness_max_confidence:
            return None
        result = check_groundedness(
            draft.text, evidence, ignore=(self._templates.caveat, CAVEAT.strip())
        )
        self._m.groundedness.labels("passed" if result.passed else "failed").inc()
        log.info(
            "groundedness checked",
            extra={
                "score": round(result.score, 3),
                "claims": [(c.support.value, c.chunk_id, c.overlap) for c in result.claims],
            },
        )
        return result


def _deadline(context: grpc.aio.ServicerContext) -> float | None:
    remaining = context.time_remaining()
    return None if remaining is None else time.monotonic() + remaining


def build_generator(settings: Settings) -> ServiceSpec:
    g = settings.generator
    keys_dir = Path(g.public_keys_dir) if g.public_keys_dir else settings.path("keys")
    keys = KeyRing(keys_dir)
    if not len(keys):
        # A configuration problem (or start order), not a crash: reported as one log line.
        raise SettingsError(
            f"no pass-token public keys (*.pub.pem) in {keys_dir}: start the gate first (it "
            "creates the embedded default's key pair there), or point "
            "generator.public_keys_dir at the gate's public keys"
        )
    verifier = TokenVerifier(
        keys, g.issuer, g.audience, InMemoryReplayStore(), g.clock_skew_seconds
    )
    options = GeneratorOptions.from_settings(g)
    templates = load_templates(options.prompts_path)
    backend = build_backend(options, templates)
    if backend.name != "extractive":
        # The LLM backends' caveat and lead-in checks read word frequencies, and the answer's
        # language when the request names none: loaded here, not in the first answer's time.
        language_of("", "warm up the language model")
        zipf("warm")
    log.info(
        "generator backend selected",
        extra={"backend": backend.name, "prompt_version": templates.version},
    )
    metrics = ServiceMetrics()
    servicer = GeneratorServicer(
        settings,
        verifier,
        backend,
        Authenticator(settings.auth, SERVICE_NAME, metrics.registry),
        GeneratorMetrics(metrics),
        options,
        templates,
    )
    return ServiceSpec(
        name=SERVICE_NAME,
        register=lambda server: pb_grpc.add_GeneratorServiceServicer_to_server(servicer, server),
        settings=g.server,
        metrics=metrics,
        on_stop=backend.aclose,
    )


def build_backend(options: GeneratorOptions, templates: PromptTemplates) -> LLMBackend:
    """The backend ``options.backend`` names; HTTP clients are created, nothing is sent."""
    llm = options.llm
    retry = RetryPolicy(llm.max_retries, llm.backoff_seconds, llm.backoff_max_seconds)
    if options.backend == "cohere":
        from generator_svc.llm.cohere import CohereBackend  # the cohere client loads lazily

        c = options.cohere
        return CohereBackend(
            api_key=read_secret(c.api_key, c.api_key_file, "CO_API_KEY"),
            model=c.model,
            templates=templates,
            base_url=c.base_url,
            timeout_seconds=llm.timeout_seconds,
            retry=retry,
            max_output_tokens=llm.max_output_tokens,
            temperature=llm.temperature,
        )
    if options.backend == "openai_compat":
        from generator_svc.llm.openai_compat import OpenAICompatBackend

        o = options.openai_compat
        return OpenAICompatBackend(
            base_url=o.base_url,
            model=o.model,
            templates=templates,
            api_key=read_secret(o.api_key, o.api_key_file, "OPENAI_API_KEY"),
            timeout_seconds=llm.timeout_seconds,
            connect_timeout_seconds=llm.connect_timeout_seconds,
            retry=retry,
            max_output_tokens=llm.max_output_tokens,
            temperature=llm.temperature,
            include_usage=o.include_usage,
        )
    return ExtractiveBackend(options.max_sentences)
