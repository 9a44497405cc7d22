"""GateService: the policy decision point. Thin adapter over signals + policy + pass token."""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path

import grpc
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from google.protobuf.timestamp_pb2 import Timestamp
from opentelemetry.instrumentation.grpc import aio_client_interceptors
from prometheus_client import Counter, Gauge, Histogram

from candor.common.v1 import evidence_pb2
from candor.gate.v1 import gate_pb2 as pb
from candor.gate.v1 import gate_pb2_grpc as pb_grpc
from candor.generator.v1 import generator_pb2, generator_pb2_grpc
from candor.retrieval.v1 import retrieval_pb2, retrieval_pb2_grpc
from candor.runtime.admission import (
    TenantShare,
    mark_shed,
    passed_on,
    release_slot,
    retry_delay_of,
    retry_pause,
)
from candor.runtime.auth import Authenticator, forwarded_metadata
from candor.runtime.deadline import DeadlineExhausted, caller_bound, downstream_timeout
from candor.runtime.errors import (
    FieldViolations,
    abort_info,
    abort_invalid,
    abort_with,
    error_reason_of,
)
from candor.runtime.message_size import trim_to_fit
from candor.runtime.metrics import LATENCY_BUCKETS, ServiceMetrics, deadline_spent
from candor.runtime.server import ServiceSpec
from candor.runtime.validation import check_enum, check_language, check_query, check_tenant
from candor.settings import ServerSettings, Settings, SettingsError
from candor.token import (
    SigningKeyError,
    TokenSigner,
    load_or_create_signing_key,
    write_public_key,
)
from gate_svc.policy import (
    CLARIFY,
    CONFIDENT,
    PASS,
    REFUSE,
    SKIP_BOUNDS,
    UNCERTAIN,
    Decision,
    PolicyConfig,
    arms_unavailable,
    decide,
    policy_thresholds,
    reader_mismatch,
    skip_reading,
    uses_reader,
    uses_reranker,
)
from gate_svc.policy_store import Loaded, PolicyStore
from gate_svc.reader import EvidenceReader, reader_file, shared_reader
from gate_svc.reader_view import ReaderView, reader_texts
from gate_svc.refusal import detect_language, localized_refusal, refusal_message
from gate_svc.rerank import build_reranker
from gate_svc.rerank_view import RerankView
from gate_svc.signals import CandidateView
from gate_svc.translation import build_translator

SERVICE_NAME = pb.DESCRIPTOR.services_by_name["GateService"].full_name
DECISION_RESERVE_BYTES = 16 * 1024
"""Left under the send limit for what is set on a decision after its evidence: the rewritten
query, the shadow decision, the elapsed time."""
log = logging.getLogger("candor.gate")
#: The services the gate calls (``downstream`` label of candor_gate_downstream_calls_total).
DOWNSTREAMS = ("retrieval", "generator")
#: Why a decision that weighs the reader got no reading (``reader_fallbacks`` label).
READER_FALLBACK_REASONS = ("DISABLED", "DEADLINE", "TIMEOUT", "ERROR")

_ARM_NAMES = {retrieval_pb2.ARM_DENSE: "dense", retrieval_pb2.ARM_KEYWORD: "keyword"}
_OUTCOMES = {PASS: pb.OUTCOME_PASS, REFUSE: pb.OUTCOME_REFUSE, CLARIFY: pb.OUTCOME_CLARIFY}
_TIERS = {
    CONFIDENT: evidence_pb2.TIER_CONFIDENT,
    UNCERTAIN: evidence_pb2.TIER_UNCERTAIN,
    "no_match": evidence_pb2.TIER_NO_MATCH,
}
_REASONS = {
    "passed": pb.REASON_PASSED,
    "curated_answer": pb.REASON_CURATED_ANSWER,
    "no_hits": pb.REASON_NO_HITS,
    "below_floor": pb.REASON_BELOW_FLOOR,
    "low_confidence": pb.REASON_LOW_CONFIDENCE,
    "no_clear_winner": pb.REASON_NO_CLEAR_WINNER,
    "missing_facets": pb.REASON_MISSING_FACETS,
    "rerank_not_relevant": pb.REASON_RERANK_NOT_RELEVANT,
    "arms_unavailable": pb.REASON_ARMS_UNAVAILABLE,
}


class GateMetrics:
    def __init__(self, metrics: ServiceMetrics) -> None:
        r = metrics.registry
        self.decisions = Counter(
            "candor_gate_decisions_total",
            "Gate decisions by outcome, reason, tier and threshold config version.",
            ["outcome", "reason", "tier", "policy_version"],
            registry=r,
        )
        self.confidence = Histogram(
            "candor_gate_confidence",
            "Confidence of gate decisions.",
            ["outcome"],
            buckets=(0.05, 0.1, 0.2, 0.3, 0.4, 0.45, 0.5, 0.6, 0.7, 0.75, 0.8, 0.9, 1.0),
            registry=r,
        )
        self.decide_seconds = Histogram(
            "candor_gate_decide_seconds",
            "Signals + policy computation for one decision (no retrieval).",
            buckets=(0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05),
            registry=r,
        )
        self.evaluate_seconds = Histogram(
            "candor_gate_evaluate_seconds",
            "Time to a decision, retrieval included.",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.tokens = Counter(
            "candor_gate_pass_tokens_total", "Pass tokens minted.", ["policy_version"], registry=r
        )
        self.shadow = Counter(
            "candor_gate_shadow_decisions_total",
            "Shadow config decisions, by agreement with the active outcome.",
            ["agreement", "policy_version", "shadow_version"],
            registry=r,
        )
        self.rerank_seconds = Histogram(
            "candor_gate_rerank_seconds",
            "Reranker latency per decision.",
            ["backend"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.rerank_fallbacks = Counter(
            "candor_gate_rerank_fallbacks_total",
            "Decisions where the reranker failed and retrieval scores were used.",
            ["backend", "reason"],
            registry=r,
        )
        self.reader_seconds = Histogram(
            "candor_gate_reader_seconds",
            "Evidence reader latency per decision that reads.",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.reader_skips = Counter(
            "candor_gate_reader_skips_total",
            "Decisions not read because even a certain reading would have refused, by the "
            "bound it would miss (pass_bound, or the config's read_floor).",
            ["bound"],
            registry=r,
        )
        for bound in SKIP_BOUNDS:
            self.reader_skips.labels(bound)
        self.reader_fallbacks = Counter(
            "candor_gate_reader_fallbacks_total",
            "Decisions whose policy weighs the reader but got no reading, by reason.",
            ["reason"],
            registry=r,
        )
        # Zero series from start-up: the dashboard and alerts see a rate of 0, not no data.
        for reason in READER_FALLBACK_REASONS:
            self.reader_fallbacks.labels(reason)
        self.reader_waiting = Gauge(
            "candor_gate_reader_waiting",
            "Evidence reads queued or running on the reader's one thread; a queue that stays "
            "high means reads wait out gate.reader.timeout_seconds (TIMEOUT fallbacks).",
            registry=r,
        )
        self.reloads = Counter(
            "candor_gate_config_reloads_total",
            "Threshold config loads by role and result; a bad file counts once, not per poll.",
            ["role", "result"],
            registry=r,
        )
        self.config_rejected = Gauge(
            "candor_gate_config_rejected",
            "1 while the role's threshold config file on disk is rejected and the previous "
            "version keeps serving; 0 once the file loads or is put back.",
            ["role"],
            registry=r,
        )
        self.policy_info = Gauge(
            "candor_gate_policy_info",
            "1 for the threshold config version in each role.",
            ["role", "policy_version"],
            registry=r,
        )
        self.reader_info = Gauge(
            "candor_gate_evidence_reader_info",
            "1 for the evidence reader this gate runs: its settings name (gate.reader.model, "
            "or file for gate.reader.model_path) and file digest; no series when it is off.",
            ["model", "digest"],
            registry=r,
        )
        self.downstream = Counter(
            "candor_gate_downstream_calls_total",
            "The gate's calls to retrieval (Retrieve) and the generator (Generate), by "
            "downstream and the gRPC code they ended with.",
            ["downstream", "grpc_code"],
            registry=r,
        )
        self.downstream_caller_deadlines = Counter(
            "candor_gate_downstream_caller_deadlines_total",
            "Calls to retrieval or the generator cut off by the gate's caller's own deadline, "
            "not counted in candor_gate_downstream_calls_total (alone they say nothing about "
            "the service called; CandorGateDownstreamUnanswered fires when none succeeds).",
            ["downstream"],
            registry=r,
        )
        for downstream in DOWNSTREAMS:
            self.downstream.labels(downstream, grpc.StatusCode.OK.name)
            self.downstream_caller_deadlines.labels(downstream)
        self.refusal_translations = Counter(
            "candor_gate_refusal_translations_total",
            "Refusals in a language the message table lacks, by outcome "
            "(translated, cached, failed = English sent).",
            ["outcome"],
            registry=r,
        )
        self.tenant_limited = Counter(
            "candor_gate_tenant_limited_total",
            "Calls refused RESOURCE_EXHAUSTED (TENANT_LIMIT) because their tenant already had "
            "gate.max_in_flight_per_tenant decisions in flight (the tenant is in the log).",
            registry=r,
        )


RETRIEVE_ATTEMPTS = 3
"""Tries of one Retrieve (``GateService._retrieve``); Generate is tried once."""


def _service_config(load_balancing: str) -> tuple[str, str]:
    return ("grpc.service_config", json.dumps({"loadBalancingConfig": [{load_balancing: {}}]}))


def _receive_limit(server: ServerSettings) -> tuple[str, int]:
    return ("grpc.max_receive_message_length", server.max_message_bytes)


def candidate_view(c: retrieval_pb2.Candidate) -> CandidateView:
    return CandidateView(
        chunk_id=c.chunk_id,
        parent_id=c.parent_id,
        document_id=c.document_id,
        title=c.title,
        text=c.text,
        source_kind=int(c.source_kind),
        cosine=c.dense.raw_score if c.HasField("dense") and c.dense.rank else None,
        bm25=c.keyword.raw_score if c.HasField("keyword") and c.keyword.rank else None,
        fused_score=c.fused_score,
        fused_rank=c.fused_rank,
        in_both=c.in_both,
    )


class GateServicer(pb_grpc.GateServiceServicer):
    def __init__(
        self,
        settings: Settings,
        policies: PolicyStore,
        signer: TokenSigner,
        auth: Authenticator,
        metrics: GateMetrics,
        reader: EvidenceReader | None,
    ) -> None:
        self._s = settings.gate
        # A decision goes to the caller and, as GenerateRequest evidence, to the generator:
        # it must fit the smaller of what the gate sends and what the generator receives.
        self._max_message_bytes = min(
            settings.gate.server.max_message_bytes, settings.generator.server.max_message_bytes
        )
        self._policies = policies
        try:
            self._reranker = build_reranker(settings.gate.reranker)
            self._translator = build_translator(settings.gate.translation)
        except ValueError as exc:
            raise SettingsError(str(exc)) from exc
        self._reader = reader
        # Reads are serialised anyway (EvidenceReader's lock). One thread of its own keeps them
        # out of the default executor, and a read still queued when its caller's wait ends is
        # dropped from the queue instead of holding a thread.
        self._reader_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="evidence-reader")
        self._signer, self._auth, self._m = signer, auth, metrics
        self._tenants = TenantShare(
            self._s.max_in_flight_per_tenant, "gate", self._m.tenant_limited
        )
        interceptors = aio_client_interceptors()  # type: ignore[no-untyped-call]
        # A reply may be as large as its server sends (server.max_message_bytes in that
        # service's section), not the client's 4 MiB default.
        self._retrieval_channel = grpc.aio.insecure_channel(
            self._s.retrieval_target,
            options=[
                _service_config(self._s.load_balancing),
                _receive_limit(settings.retrieval.server),
            ],
            interceptors=interceptors,
        )
        # Generate is not retried: its pass token is single-use, so a second attempt after
        # one that reached the generator would be refused as a replay.
        self._generator_channel = grpc.aio.insecure_channel(
            self._s.generator_target,
            options=[
                _service_config(self._s.load_balancing),
                _receive_limit(settings.generator.server),
            ],
            interceptors=interceptors,
        )
        self._retrieval = retrieval_pb2_grpc.RetrievalServiceStub(self._retrieval_channel)
        self._generator = generator_pb2_grpc.GeneratorServiceStub(self._generator_channel)

    async def close(self) -> None:
        if self._reranker is not None:
            await self._reranker.aclose()
        if self._translator is not None:
            await self._translator.aclose()
        await self._retrieval_channel.close()
        await self._generator_channel.close()
        self._reader_pool.shutdown(wait=False, cancel_futures=True)

    async def _validate(
        self,
        tenant: str,
        query: str,
        language: str,
        mode: int,
        context: grpc.aio.ServicerContext,
    ) -> None:
        caller = await self._auth.authenticate(context)
        v = FieldViolations()
        check_tenant(tenant, v)
        check_query(query, self._s.max_query_chars, v)
        check_language(language, v)
        check_enum(mode, retrieval_pb2.RetrievalMode.DESCRIPTOR, v, "mode")
        if v:
            await abort_invalid(context, v)
        await self._auth.authorize(context, caller, tenant)

    async def _retrieve(
        self,
        request: retrieval_pb2.RetrieveRequest,
        budget_seconds: float,
        metadata: tuple[tuple[str, str], ...],
    ) -> retrieval_pb2.RetrieveResponse:
        """Retrieve, tried again within ``budget_seconds`` after an UNAVAILABLE that did no work (a
        pod draining or restarting, or shedding): under round robin the next attempt goes to
        another pod, so one bad pod is not a run of ARMS_UNAVAILABLE refusals. Retrieval's
        own failures (both arms down) are not repeated. No retry budget: a gRPC retry policy's
        (10 tokens, 0.1 per success) switched retries off with one pod of three failing."""
        until = time.monotonic() + budget_seconds
        for attempt in range(RETRIEVE_ATTEMPTS):
            try:
                reply: retrieval_pb2.RetrieveResponse = await self._retrieval.Retrieve(
                    request, timeout=until - time.monotonic(), metadata=metadata
                )
                return reply
            except grpc.aio.AioRpcError as exc:
                pause = retry_pause(exc, attempt)
                last = attempt == RETRIEVE_ATTEMPTS - 1
                if pause is None or last or time.monotonic() + 2 * pause >= until:
                    raise
                log.info(
                    "retrying retrieval",
                    extra={"code": exc.code().name, "attempt": attempt + 2},
                )
                await asyncio.sleep(pause)
        raise AssertionError("unreachable")

    async def _decide(
        self,
        tenant: str,
        query: str,
        language: str,
        mode: int,
        context: grpc.aio.ServicerContext,
    ) -> pb.Decision:
        started = time.perf_counter()
        active = self._policies.active.config
        # Read with the active one: a reload during the retrieval await paired an old active
        # version with a new shadow one in the decision and its metric labels.
        shadow = self._policies.shadow
        policy = active.for_tenant(tenant)
        # Overrides share the file's version: the log says when a tenant's own one decided.
        policy_tenant = tenant if policy is not active else ""
        arms: list[retrieval_pb2.ArmStatus] = []
        degraded = False
        bound = False
        try:
            timeout = downstream_timeout(context, self._s.retrieval_timeout_seconds)
            bound = caller_bound(timeout, self._s.retrieval_timeout_seconds)
            reply = await self._retrieve(
                retrieval_pb2.RetrieveRequest(tenant=tenant, query=query, mode=mode),  # type: ignore[arg-type]
                timeout,
                forwarded_metadata(context),
            )
        except DeadlineExhausted as exc:
            await abort_info(context, grpc.StatusCode.DEADLINE_EXCEEDED, "DEADLINE", str(exc))
        except grpc.aio.AioRpcError as exc:
            # Seen from the gate: a retrieval it cannot reach has no failing arms of its own.
            self._downstream_ended("retrieval", exc.code(), bound)
            if retry_delay_of(exc) is not None:
                # Retrieval shed the call before any work (server.max_in_flight): a retry may
                # be served, where an ARMS_UNAVAILABLE refusal would tell the caller that the
                # knowledge base has nothing, and count as one on the refusal-rate alerts.
                log.info("retrieval shed the gate's call", extra={"details": exc.details()})
                mark_shed()
                await abort_with(context, passed_on(exc))
            if exc.code() in (
                grpc.StatusCode.UNAVAILABLE,
                grpc.StatusCode.INTERNAL,
                grpc.StatusCode.UNKNOWN,
            ) or (
                # Past retrieval's own timeout it is slow, an outage; past the caller's
                # deadline the caller has left, and a refusal would be counted for nobody.
                exc.code() == grpc.StatusCode.DEADLINE_EXCEEDED and not bound
            ):
                log.warning(
                    "retrieval unavailable",
                    extra={"code": exc.code().name, "details": exc.details()},
                )
                # The decision is the caller's to read: the code, not the transport's text.
                decision = arms_unavailable(policy, f"retrieval: {exc.code().name}")
                out = self._finish(
                    decision, tenant, query, language, [], True, policy, policy_tenant
                )
                return await self._translate_refusal(out, query, language, policy, context)
            log.warning(
                "retrieval refused the gate's call",
                extra={"code": exc.code().name, "details": exc.details()},
            )
            # INVALID_ARGUMENT names what in the caller's request retrieval refused (kept, with
            # its code); any other refusal of the gate's own call is the server's fault.
            said = exc.details() if exc.code() == grpc.StatusCode.INVALID_ARGUMENT else ""
            code = exc.code() if said else _DOWNSTREAM_STATUS.get(exc.code(), exc.code())
            await abort_info(
                context,
                code,
                "RETRIEVAL_" + exc.code().name,
                said or f"retrieval refused the gate's call ({exc.code().name})",
            )
        self._downstream_ended("retrieval", grpc.StatusCode.OK)
        arms = list(reply.arms)
        degraded = reply.degraded
        candidates = [candidate_view(c) for c in reply.candidates]
        down = sum(
            1
            for a in arms
            if a.state in (retrieval_pb2.ARM_STATE_ERROR, retrieval_pb2.ARM_STATE_TIMEOUT)
        )
        # Failed, timed out or not asked for (mode): the policy cannot observe its signals.
        missing = tuple(
            _ARM_NAMES.get(a.arm, "unspecified")
            for a in arms
            if a.state != retrieval_pb2.ARM_STATE_OK
        )
        shadow_policy = shadow.config.for_tenant(tenant) if shadow is not None else None
        # An LLM call (and its latency, cost and failure modes) only where a policy reads it.
        rerank = (
            await self._rerank(query, candidates, context)
            if any(p is not None and uses_reranker(p) for p in (policy, shadow_policy))
            else None
        )
        reader = await self._read(
            query, candidates, (policy, shadow_policy), down, missing, rerank, context
        )

        def decide_with(p: PolicyConfig) -> Decision:
            # Only what this config reads: a shadow's reading or rerank showed in the signals
            # of an active decision whose policy never weighs them.
            return decide(
                candidates,
                p,
                query,
                down,
                rerank if uses_reranker(p) else None,
                reader if uses_reader(p) else None,
                missing,
            )

        t0 = time.perf_counter()
        decision = decide_with(policy)
        self._m.decide_seconds.observe(time.perf_counter() - t0)
        # A decision made without a reading or a rerank its policy weighs is as degraded as one
        # made with an arm down: a refusal for want of them is not the knowledge base's gap.
        degraded = (
            degraded
            or (uses_reader(policy) and reader is not None and bool(reader.error))
            or (
                uses_reranker(policy)
                and bool(candidates)
                and (rerank.fallback if rerank is not None else self._reranker is None)
            )
        )
        out = self._finish(decision, tenant, query, language, arms, degraded, policy, policy_tenant)
        out.rewritten_query = reply.rewritten_query
        out = await self._translate_refusal(out, query, language, policy, context)
        if shadow_policy is not None:
            self._shadow(out, decision, shadow_policy, decide_with)
        elapsed = time.perf_counter() - started
        out.elapsed.FromNanoseconds(int(elapsed * 1e9))
        self._m.evaluate_seconds.observe(elapsed)
        return out

    def _shadow(
        self,
        out: pb.Decision,
        decision: Decision,
        shadow_policy: PolicyConfig,
        decide_with: Callable[[PolicyConfig], Decision],
    ) -> None:
        """Decide with the shadow config too (``decide_with`` is the active decision's
        ``decide`` but for the policy), only to count and log how it compares."""
        try:
            s = decide_with(shadow_policy)
        except Exception:
            # A shadow is watched, never trusted: its failure must not fail the decision.
            log.exception("shadow decision failed", extra={"decision_id": out.decision_id})
            self._m.shadow.labels("error", decision.policy_version, shadow_policy.version).inc()
            return
        agrees = s.outcome == decision.outcome
        out.shadow.CopyFrom(
            pb.ShadowDecision(
                policy_version=s.policy_version,
                outcome=_OUTCOMES[s.outcome],
                reason=_REASONS[s.reason],
                confidence=s.confidence,
                agrees=agrees,
            )
        )
        self._m.shadow.labels(
            "agree" if agrees else "disagree", decision.policy_version, s.policy_version
        ).inc()
        if not agrees:
            log.info(
                "shadow disagrees",
                extra={
                    "decision_id": out.decision_id,
                    "outcome": decision.outcome,
                    "shadow_outcome": s.outcome,
                    "shadow_version": s.policy_version,
                },
            )

    def _downstream_ended(
        self, downstream: str, code: grpc.StatusCode, caller_bound: bool = False
    ) -> None:
        """Count one call to retrieval or the generator; one cut short by the caller's own
        deadline says nothing about the service called, and is counted apart: a generator
        that hangs while every caller sets a short deadline showed nowhere else."""
        if code == grpc.StatusCode.DEADLINE_EXCEEDED and caller_bound:
            self._m.downstream_caller_deadlines.labels(downstream).inc()
            return
        self._m.downstream.labels(downstream, code.name).inc()

    async def _rerank(
        self, query: str, candidates: list[CandidateView], context: grpc.aio.ServicerContext
    ) -> RerankView | None:
        if self._reranker is None or not candidates:
            return None
        r = self._s.reranker
        try:
            budget = downstream_timeout(context, r.timeout_seconds)
        except DeadlineExhausted as exc:
            self._m.rerank_fallbacks.labels(self._reranker.name, "DEADLINE").inc()
            return RerankView(fallback=True, error=str(exc), backend=self._reranker.name)
        result = await self._reranker.rerank(query, candidates[: r.max_candidates], budget)
        self._m.rerank_seconds.labels(result.backend).observe(result.latency_seconds)
        if result.fallback:
            self._m.rerank_fallbacks.labels(result.backend, result.error_reason or "ERROR").inc()
        return RerankView(
            scale={s.chunk_id: s.scale for s in result.scores},
            fallback=result.fallback,
            error=result.error,
            backend=result.backend,
        )

    async def _read(
        self,
        query: str,
        candidates: list[CandidateView],
        policies: tuple[PolicyConfig | None, ...],
        down: int,
        missing: tuple[str, ...],
        rerank: RerankView | None,
        context: grpc.aio.ServicerContext,
    ) -> ReaderView | None:
        """The reader's scores for the top chunks, when a policy in play weighs them and a
        reading could still let the decision pass."""
        weighing = [p for p in policies if p is not None and uses_reader(p)]
        if not candidates or not weighing:
            return None
        skips = [skip_reading(candidates, p, query, down, rerank, missing) for p in weighing]
        if all(skips):
            self._m.reader_skips.labels(skips[0]).inc()
            return ReaderView(skipped=True)
        if self._reader is None:
            self._m.reader_fallbacks.labels("DISABLED").inc()
            return ReaderView(error="the evidence reader is disabled (gate.reader.enabled)")
        try:
            budget = downstream_timeout(context, self._s.reader.timeout_seconds)
        except DeadlineExhausted as exc:
            self._m.reader_fallbacks.labels("DEADLINE").inc()
            return ReaderView(error=str(exc))
        texts = reader_texts(candidates, self._s.reader.top_k)
        t0 = time.perf_counter()
        read = partial(self._reader.score, query, texts, time.monotonic() + budget)
        self._m.reader_waiting.inc()
        try:
            # Off the event loop: a read is ~5-10 ms of CPU per chunk.
            scores = await asyncio.wait_for(
                asyncio.get_running_loop().run_in_executor(self._reader_pool, read), budget
            )
        except TimeoutError:  # ReadAbandoned is one
            self._m.reader_fallbacks.labels("TIMEOUT").inc()
            return ReaderView(error=f"evidence reader exceeded {budget:.3f}s")
        except Exception as exc:  # a broken reader degrades the decision, never the service
            log.exception("evidence reader failed")
            self._m.reader_fallbacks.labels("ERROR").inc()
            return ReaderView(error=f"evidence reader failed: {exc}")
        finally:
            # A read given up on may still run for one pair; it is no longer waited for.
            self._m.reader_waiting.dec()
            self._m.reader_seconds.observe(time.perf_counter() - t0)
        return ReaderView(tuple(scores))

    async def _translate_refusal(
        self,
        out: pb.Decision,
        query: str,
        language: str,
        policy: PolicyConfig,
        context: grpc.aio.ServicerContext,
    ) -> pb.Decision:
        """A refusal in a language the table lacks, translated when a translator is set."""
        if self._translator is None or out.outcome == pb.OUTCOME_PASS:
            return out
        try:
            budget = downstream_timeout(context, self._s.translation.timeout_seconds)
        except DeadlineExhausted:
            budget = 0.0
        refusal = await localized_refusal(
            query,
            language,
            policy.refusal_messages,
            policy.default_language,
            self._translator,
            budget,
        )
        out.refusal_message, out.refusal_language = refusal.message, refusal.language
        if refusal.translation:
            self._m.refusal_translations.labels(refusal.translation).inc()
        return out

    def _finish(
        self,
        d: Decision,
        tenant: str,
        query: str,
        language: str,
        arms: list[retrieval_pb2.ArmStatus],
        degraded: bool,
        policy: PolicyConfig,
        policy_tenant: str,
    ) -> pb.Decision:
        out = pb.Decision(
            decision_id=uuid.uuid4().hex,
            outcome=_OUTCOMES[d.outcome],
            tier=_TIERS[d.tier],
            confidence=d.confidence,
            display_confidence=d.display_confidence,
            reason=_REASONS[d.reason],
            reason_detail=d.detail,
            policy_version=d.policy_version,
            policy_name=d.policy_name,
            signals=[pb.Signal(name=k, value=v) for k, v in sorted(d.signals.items())],
            thresholds=[pb.Threshold(name=k, value=v) for k, v in sorted(d.thresholds.items())],
            arms=arms,
            degraded=degraded,
            missing_facets=list(d.missing_facets),
        )
        if d.outcome == PASS:
            out.evidence.extend(
                evidence_pb2.Evidence(
                    chunk_id=c.chunk_id,
                    document_id=c.document_id,
                    parent_id=c.parent_id,
                    title=c.title,
                    text=c.text,
                    source_kind=c.source_kind,  # type: ignore[arg-type]
                    rank=i,
                    score=c.fused_score,
                )
                for i, c in enumerate(d.evidence, start=1)
            )
        else:
            message, lang = refusal_message(
                query, language, policy.refusal_messages, policy.default_language
            )
            out.refusal_message, out.refusal_language = message, lang
        if d.outcome in (PASS, CLARIFY):
            # On CLARIFY (seed 001: nothing matched) Ask has the generator ask one clarifying
            # question: the token admits no evidence and allows nothing but that question.
            mint = partial(
                self._signer.mint,
                tenant=tenant,
                query=query,
                policy_version=d.policy_version,
                tier=d.tier,
                confidence=d.confidence,
                clarify_only=d.outcome == CLARIFY,
            )
            token, expires = mint(
                evidence=[(e.chunk_id, e.text) for e in out.evidence],
                titles=[e.title for e in out.evidence],
            )
            self._m.tokens.labels(d.policy_version).inc()  # CLARIFY's too: it is a token
            # Up to max_evidence curated answers can outgrow the message limit: keep the best
            # that fit beside the token (which only shrinks when re-signed over fewer chunks).
            room = self._max_message_bytes - len(token) - DECISION_RESERVE_BYTES
            out.evidence_trimmed = trim_to_fit(out, "evidence", room)
            if out.evidence_trimmed:
                log.warning(
                    "evidence trimmed to fit the message limit",
                    extra={"trimmed": out.evidence_trimmed, "kept": len(out.evidence)},
                )
                token, expires = mint(
                    evidence=[(e.chunk_id, e.text) for e in out.evidence],
                    titles=[e.title for e in out.evidence],
                )
            out.pass_token = token
            out.pass_token_expires_at.CopyFrom(Timestamp(seconds=expires))
        self._m.decisions.labels(d.outcome, d.reason, d.tier, d.policy_version).inc()
        self._m.confidence.labels(d.outcome).observe(d.confidence)
        log.info(
            "decision",
            extra={
                "decision_id": out.decision_id,
                # In the log, not the metric: tenants are unbounded, log lines are not series.
                "tenant": tenant,
                "outcome": d.outcome,
                "reason": d.reason,
                "tier": d.tier,
                "confidence": round(d.confidence, 4),
                "policy_version": d.policy_version,
                "policy_tenant": policy_tenant,
                "evidence": len(out.evidence),
                "degraded": degraded,
            },
        )
        return out

    async def Evaluate(
        self, request: pb.EvaluateRequest, context: grpc.aio.ServicerContext
    ) -> pb.EvaluateResponse:
        await self._validate(request.tenant, request.query, request.language, request.mode, context)
        async with self._tenants.slot(request.tenant, context):
            decision = await self._decide(
                request.tenant, request.query, request.language, request.mode, context
            )
        return pb.EvaluateResponse(decision=decision)

    async def Ask(
        self, request: pb.AskRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.AskResponse]:
        await self._validate(request.tenant, request.query, request.language, request.mode, context)
        async with self._tenants.slot(request.tenant, context):
            decision = await self._decide(
                request.tenant, request.query, request.language, request.mode, context
            )
        # The CPU work is done; the rest relays the generator. server.max_in_flight bounds
        # decisions being made, not answers an LLM takes seconds to write.
        release_slot()
        yield pb.AskResponse(decision=decision)
        if decision.outcome not in (pb.OUTCOME_PASS, pb.OUTCOME_CLARIFY):
            return
        try:
            timeout = downstream_timeout(context, self._s.generation_timeout_seconds)
            bound = caller_bound(timeout, self._s.generation_timeout_seconds)
        except DeadlineExhausted as exc:
            await abort_info(context, grpc.StatusCode.DEADLINE_EXCEEDED, "DEADLINE", str(exc))
        call = self._generator.Generate(
            generator_pb2.GenerateRequest(
                pass_token=decision.pass_token,
                query=request.query,
                evidence=decision.evidence,
                language=request.language,
                clarify_only=decision.outcome == pb.OUTCOME_CLARIFY,
            ),
            timeout=timeout,
            metadata=forwarded_metadata(context),
        )
        try:
            async for event in call:
                if event.HasField("delta"):
                    yield pb.AskResponse(delta=event.delta)
                else:
                    yield pb.AskResponse(final=event.final)
            self._downstream_ended("generator", grpc.StatusCode.OK)
        except grpc.aio.AioRpcError as exc:
            self._downstream_ended("generator", exc.code(), bound)
            if retry_delay_of(exc) is not None:
                # The generator shed the call before reading it, so its pass token is unspent
                # and asking again is safe: said so, with the generator's own retry hint.
                log.info("the generator shed the gate's call", extra={"details": exc.details()})
                await abort_with(context, passed_on(exc))
            cause = error_reason_of(exc)
            log.warning(
                "generation failed",
                extra={"code": exc.code().name, "cause": cause, "details": exc.details()},
            )
            code = _DOWNSTREAM_STATUS.get(exc.code(), exc.code())
            if exc.code() == grpc.StatusCode.DEADLINE_EXCEEDED and not deadline_spent(context):
                # The caller still has time: the gate's own generation timeout (or the
                # generator's) ran out, not the caller's deadline. A slow generator is an
                # outage to the caller, as a slow retrieval is (an answer-path probe: a caller
                # with 30 s left was told its deadline ran out).
                code = grpc.StatusCode.UNAVAILABLE
            await abort_info(
                context,
                code,
                "GENERATION_FAILED",
                f"the answer could not be generated ({cause or exc.code().name})",
                {"generator_reason": cause} if cause else None,
            )

    async def GetPolicy(
        self, request: pb.GetPolicyRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetPolicyResponse:
        caller = await self._auth.authenticate(context)
        if request.tenant:
            v = FieldViolations()
            check_tenant(request.tenant, v)
            if v:
                await abort_invalid(context, v)
        # Without a tenant the reply is the global config: still only for a valid key.
        await self._auth.authorize(context, caller, request.tenant or None)
        active = self._policies.active
        reply = pb.GetPolicyResponse(
            active=_policy_info(active, request.tenant),
            evidence_reader=self._reader.digest if self._reader is not None else "",
        )
        if self._policies.shadow is not None:
            reply.shadow.CopyFrom(_policy_info(self._policies.shadow, request.tenant))
        return reply


def _policy_info(loaded: Loaded, tenant: str) -> pb.PolicyInfo:
    config = loaded.config.for_tenant(tenant) if tenant else loaded.config
    return pb.PolicyInfo(
        version=config.version,
        policy_name=config.policy,
        loaded_at=Timestamp(seconds=int(loaded.loaded_at)),
        sha256=config.sha256,
        thresholds=[pb.Threshold(name=k, value=v) for k, v in policy_thresholds(config).items()],
        reader_model=config.calibrated.reader_model if uses_reader(config) else "",
    )


_DOWNSTREAM_STATUS = {
    # A transport failure may pass on retry; a downstream's own INTERNAL (the LLM rejected
    # the request: a key, a model name) will not, so it stays INTERNAL.
    grpc.StatusCode.UNKNOWN: grpc.StatusCode.UNAVAILABLE,
    # The gate built the call and the caller passed the gate's own checks: a downstream that
    # refuses it (a pass token signed by a key it lacks, clocks apart, keys that differ between
    # services, a request the gate got wrong) is the server's fault, not "your credentials".
    grpc.StatusCode.PERMISSION_DENIED: grpc.StatusCode.INTERNAL,
    grpc.StatusCode.UNAUTHENTICATED: grpc.StatusCode.INTERNAL,
    grpc.StatusCode.INVALID_ARGUMENT: grpc.StatusCode.INTERNAL,
    grpc.StatusCode.FAILED_PRECONDITION: grpc.StatusCode.INTERNAL,
}
"""The status an Ask caller sees for a downstream's (its ErrorInfo keeps the downstream's)."""


def signing_key(settings: Settings) -> Ed25519PrivateKey:
    """The gate's signing key. Embedded default: created under data_dir/keys on first start,
    with its public half beside it where the generator looks."""
    g = settings.gate
    if g.signing_key_path:
        configured = Path(g.signing_key_path)
        if not configured.exists():
            # A typo here used to create a fresh key whose public half no generator has:
            # every answer then failed TOKEN_SIGNATURE. Only the embedded default is created.
            raise SigningKeyError(
                f"the signing key {configured} (gate.signing_key_path) does not exist: mount "
                "it (scripts/k8s_token_keys.py makes a pair), or leave gate.signing_key_path "
                "empty to use the embedded default under data_dir/keys"
            )
        return load_or_create_signing_key(configured)
    key_path = settings.path("keys", f"{g.key_id}.pem")
    key = load_or_create_signing_key(key_path)
    write_public_key(key, key_path.parent, g.key_id)
    return key


def build_gate(settings: Settings) -> ServiceSpec:
    g = settings.gate
    key = signing_key(settings)
    signer = TokenSigner(key, g.key_id, g.issuer, g.audience, g.token_ttl_seconds)
    metrics = ServiceMetrics()
    gate_metrics = GateMetrics(metrics)

    def on_reload(role: str, result: str, version: str) -> None:
        gate_metrics.reloads.labels(role, result).inc()
        publish_versions()

    reader = _load_reader(settings)
    digest = reader.digest if reader is not None else None
    if reader is not None:
        r = settings.gate.reader
        gate_metrics.reader_info.labels("file" if r.model_path else r.model, reader.digest).set(1)
    policies = PolicyStore(
        g.policy_path or None,
        g.shadow_policy_path or None,
        on_reload,
        check=lambda config: reader_mismatch(config, digest),
    )

    if settings.gate.reranker.backend != "none":
        loaded = [policies.active, policies.shadow]
        configs = [
            c
            for held in loaded
            if held is not None
            for c in (held.config, *held.config.tenants.values())
        ]
        if not any(uses_reranker(c) for c in configs):
            # Configured, then silently never called: say so once (README: only seed 004, or a
            # calibrated model weighing a rerank signal, reads it).
            log.warning(
                "gate.reranker is configured but no threshold config reads it: it is never "
                "called (only policy seed004, or a calibrated model weighing a rerank signal)",
                extra={"backend": settings.gate.reranker.backend},
            )

    for role in ("active", "shadow"):
        gate_metrics.config_rejected.labels(role).set_function(partial(_flag, policies, role))

    def publish_versions() -> None:
        gate_metrics.policy_info.clear()
        gate_metrics.policy_info.labels("active", policies.active.config.version).set(1)
        if policies.shadow is not None:
            gate_metrics.policy_info.labels("shadow", policies.shadow.config.version).set(1)

    publish_versions()
    log.info(
        "threshold config loaded",
        extra={
            "policy_version": policies.active.config.version,
            "policy": policies.active.config.policy,
            "shadow_version": policies.shadow.config.version if policies.shadow else "",
        },
    )
    detect_language("warm up the language model")  # loads py3langid before SERVING
    servicer = GateServicer(
        settings,
        policies,
        signer,
        Authenticator(settings.auth, SERVICE_NAME, metrics.registry),
        gate_metrics,
        reader,
    )

    async def on_start() -> None:
        policies.start(g.policy_poll_seconds)

    async def on_stop() -> None:
        await policies.stop()
        await servicer.close()

    return ServiceSpec(
        name=SERVICE_NAME,
        register=lambda server: pb_grpc.add_GateServiceServicer_to_server(servicer, server),
        settings=g.server,
        metrics=metrics,
        on_start=on_start,
        on_stop=on_stop,
    )


def _flag(policies: PolicyStore, role: str) -> float:
    return 1.0 if policies.rejected(role) else 0.0


def _load_reader(settings: Settings) -> EvidenceReader | None:
    r = settings.gate.reader
    if not r.enabled:
        return None
    try:
        return shared_reader(reader_file(r.model, r.model_path), r.threads)
    except Exception as exc:  # an unreadable model file is a configuration error at start-up
        raise SettingsError(f"gate.reader: cannot load the evidence reader: {exc}") from exc
