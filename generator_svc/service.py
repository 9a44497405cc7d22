"""GeneratorService: checks the pass token before anything else, then answers and verifies."""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
from google.protobuf.duration_pb2 import Duration
from prometheus_client import Counter

from candor.common.v1 import evidence_pb2
from candor.generator.v1 import generator_pb2 as pb
from candor.generator.v1 import generator_pb2_grpc as pb_grpc
from candor.runtime.auth import Authenticator
from candor.runtime.errors import FieldViolations, abort_info, abort_invalid
from candor.runtime.metrics import ServiceMetrics
from candor.runtime.server import ServiceSpec
from candor.runtime.validation import check_query
from candor.settings import Settings
from candor.token import InMemoryReplayStore, TokenError, TokenVerifier, load_public_keys
from generator_svc.citations import verify_citations
from generator_svc.llm.base import Draft, EvidenceItem, GenerationInput, LLMBackend
from generator_svc.llm.extractive import ExtractiveBackend

SERVICE_NAME = pb.DESCRIPTOR.services_by_name["GeneratorService"].full_name
log = logging.getLogger("candor.generator")
_TIERS = {"confident": evidence_pb2.TIER_CONFIDENT, "uncertain": evidence_pb2.TIER_UNCERTAIN}


class GeneratorMetrics:
    def __init__(self, metrics: ServiceMetrics) -> None:
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


class GeneratorServicer(pb_grpc.GeneratorServiceServicer):
    def __init__(
        self,
        settings: Settings,
        verifier: TokenVerifier,
        backend: LLMBackend,
        auth: Authenticator,
        metrics: GeneratorMetrics,
    ) -> None:
        self._s = settings.generator
        self._verifier, self._backend, self._auth, self._m = verifier, backend, auth, metrics

    async def Generate(
        self, request: pb.GenerateRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.GenerateResponse]:
        start = time.perf_counter()
        v = FieldViolations()
        if not request.pass_token:
            v.add("pass_token", "required")
        check_query(request.query, self._s.max_query_chars, v)
        for i, e in enumerate(request.evidence):
            if not e.chunk_id:
                v.add(f"evidence[{i}].chunk_id", "required")
        if v:
            self._m.token_rejections.labels(
                "TOKEN_MISSING" if not request.pass_token else "INVALID_REQUEST"
            ).inc()
            await abort_invalid(context, v)
        try:
            claims = self._verifier.verify(
                request.pass_token, request.query, [(e.chunk_id, e.text) for e in request.evidence]
            )
        except TokenError as exc:
            self._m.token_rejections.labels(exc.reason).inc()
            log.warning("pass token refused", extra={"reason": exc.reason})
            await abort_info(context, grpc.StatusCode.PERMISSION_DENIED, exc.reason, str(exc))
        await self._auth.authorize(context, claims.tenant)
        inp = GenerationInput(
            query=request.query,
            evidence=tuple(EvidenceItem(e.chunk_id, e.title, e.text) for e in request.evidence),
            language=request.language,
            tier=claims.tier,
            clarify_only=request.clarify_only or claims.clarify_only,
        )
        self._m.llm_calls.labels(self._backend.name).inc()
        draft: Draft | None = None
        async for event in self._backend.stream(inp):
            if isinstance(event, Draft):
                draft = event
            else:
                yield pb.GenerateResponse(delta=pb.AnswerDelta(text=event))
        if draft is None:
            await abort_info(
                context,
                grpc.StatusCode.INTERNAL,
                "BACKEND_NO_RESULT",
                "the LLM backend ended without a result",
            )
        checks = verify_citations(draft.citations, {e.chunk_id: e.text for e in request.evidence})
        failed = [c for c in checks if not c.verified]
        passed = not failed and (bool(checks) or draft.is_clarification)
        detail = (
            ""
            if passed
            else f"{len(failed)} citation(s) did not hold"
            if failed
            else "the answer cites no evidence"
        )
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
                is_clarification=draft.is_clarification,
            )
        )


def build_generator(settings: Settings) -> ServiceSpec:
    g = settings.generator
    keys_dir = Path(g.public_keys_dir) if g.public_keys_dir else settings.path("keys")
    keys = load_public_keys(keys_dir)
    if not keys:
        raise RuntimeError(f"no pass-token public keys (*.pub.pem) in {keys_dir}")
    verifier = TokenVerifier(
        keys, g.issuer, g.audience, InMemoryReplayStore(), g.clock_skew_seconds
    )
    if g.backend != "extractive":
        raise RuntimeError(f"generator.backend {g.backend!r} is not available in this build")
    backend = ExtractiveBackend(g.max_sentences)
    metrics = ServiceMetrics()
    servicer = GeneratorServicer(
        settings,
        verifier,
        backend,
        Authenticator(settings.auth, SERVICE_NAME),
        GeneratorMetrics(metrics),
    )
    return ServiceSpec(
        name=SERVICE_NAME,
        register=lambda server: pb_grpc.add_GeneratorServiceServicer_to_server(servicer, server),
        settings=g.server,
        metrics=metrics,
    )
