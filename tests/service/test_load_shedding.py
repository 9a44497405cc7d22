"""server.max_in_flight: calls past the limit are shed at once, health checks never are."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import grpc
import pytest
from google.rpc import error_details_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_status import rpc_status

from candor.cli.stack import start_stack
from candor.gate.v1 import gate_pb2, gate_pb2_grpc
from candor.generator.v1 import generator_pb2, generator_pb2_grpc
from candor.retrieval.v1 import retrieval_pb2, retrieval_pb2_grpc
from candor.runtime.admission import (
    REASON,
    RETRY_DELAY_SECONDS,
    TENANT_REASON,
    InFlightLimit,
    TenantLimit,
    retry_delay_of,
)
from candor.runtime.errors import abort_info, error_info_of
from candor.runtime.server import RunningService, ServiceSpec, start_service
from candor.settings import ServerSettings, load_settings
from tests.helpers import Stack, free_ports, metric_value, scrape, seed_bikes, stack_env

SERVICE = "candor.test.v1.HeldService"


class Held:
    """Handlers that run until the test lets them go."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.entered = 0

    async def hold(self, request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        self.entered += 1
        await self.release.wait()
        return b"done"

    async def stream(
        self, request: bytes, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[bytes]:
        self.entered += 1
        yield b"first"
        await self.release.wait()
        yield b"last"

    async def fail(self, request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        raise RuntimeError("a servicer bug")

    async def slow(self, request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        await asyncio.sleep(30)
        return b"late"

    def register(self, server: grpc.aio.Server) -> None:
        ident = (lambda b: b, lambda b: b)
        handler = grpc.method_handlers_generic_handler(
            SERVICE,
            {
                "Hold": grpc.unary_unary_rpc_method_handler(self.hold, *ident),
                "Stream": grpc.unary_stream_rpc_method_handler(self.stream, *ident),
                "Fail": grpc.unary_unary_rpc_method_handler(self.fail, *ident),
                "Slow": grpc.unary_unary_rpc_method_handler(self.slow, *ident),
            },
        )
        server.add_generic_rpc_handlers((handler,))


async def _start(held: Held, limit: int) -> RunningService:
    return await _serve(SERVICE, held.register, limit)


async def _serve(
    name: str, register: Callable[[grpc.aio.Server], None], limit: int = 0
) -> RunningService:
    """``register``'s handlers as service ``name`` on the real runtime, at ``limit``."""
    port, metrics_port = free_ports(2)
    settings = ServerSettings(
        port=port, metrics_port=metrics_port, drain_delay_seconds=0, max_in_flight=limit
    )
    return await start_service(ServiceSpec(name, register, settings))


RETRIEVAL = "candor.retrieval.v1.RetrievalService"
GENERATOR = "candor.generator.v1.GeneratorService"


def _as_retrieval(
    servicer: retrieval_pb2_grpc.RetrievalServiceServicer,
) -> Callable[[grpc.aio.Server], None]:
    return lambda server: retrieval_pb2_grpc.add_RetrievalServiceServicer_to_server(
        servicer, server
    )


async def _until(check: Callable[[], bool], seconds: float = 5.0) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + seconds
    while not check():
        if loop.time() > end:
            raise AssertionError("condition not reached")
        await asyncio.sleep(0.01)


async def test_a_call_past_the_limit_is_refused_unavailable_with_a_retry_hint() -> None:
    held = Held()
    svc = await _start(held, limit=2)
    try:
        async with grpc.aio.insecure_channel(svc.address) as ch:
            hold = ch.unary_unary(f"/{SERVICE}/Hold")
            running = [asyncio.ensure_future(hold(b"", timeout=10)) for _ in range(2)]
            await _until(lambda: held.entered == 2)

            with pytest.raises(grpc.aio.AioRpcError) as shed:
                await hold(b"", timeout=10)
            assert shed.value.code() == grpc.StatusCode.UNAVAILABLE
            assert "overloaded" in (shed.value.details() or "")
            assert held.entered == 2, "a shed call must not reach the handler"
            status = rpc_status.from_call(shed.value)  # type: ignore[arg-type]
            assert status is not None
            info = error_details_pb2.ErrorInfo()
            assert status.details[0].Unpack(info)
            assert info.reason == REASON and dict(info.metadata) == {"service": SERVICE}
            assert retry_delay_of(shed.value) == pytest.approx(RETRY_DELAY_SECONDS)
            # grpc's own hint too, for callers whose channel has a retry policy.
            trailers = dict(shed.value.trailing_metadata() or ())
            assert trailers["grpc-retry-pushback-ms"] == str(int(RETRY_DELAY_SECONDS * 1000))

            # Kubernetes' probes must not fail because the pod is busy.
            health = health_pb2_grpc.HealthStub(ch)
            reply = await health.Check(health_pb2.HealthCheckRequest(service=SERVICE), timeout=5)
            assert reply.status == health_pb2.HealthCheckResponse.SERVING

            text = scrape(svc.spec.settings.metrics_port)
            assert (
                metric_value(text, "candor_server_calls_in_flight", {"grpc_service": SERVICE}) == 2
            )
            assert metric_value(text, "candor_server_max_in_flight", {"grpc_service": SERVICE}) == 2
            assert metric_value(text, "candor_server_shed_total", {"grpc_service": SERVICE}) == 1
            unavailable = {"grpc_method": "Hold", "grpc_code": "UNAVAILABLE"}
            assert metric_value(text, "grpc_server_handled_total", unavailable) == 1
            # Not timed: a shed call's ~0 ms counted as a fast good call in the latency SLO.
            timed = {"grpc_method": "Hold"}
            assert metric_value(text, "grpc_server_handling_seconds_count", timed) == 0

            held.release.set()
            assert await asyncio.gather(*running) == [b"done", b"done"]
            # The slots came back: the next call runs.
            assert await hold(b"", timeout=10) == b"done"
            text = scrape(svc.spec.settings.metrics_port)
            assert (
                metric_value(text, "candor_server_calls_in_flight", {"grpc_service": SERVICE}) == 0
            )
    finally:
        await svc.stop(0)


async def test_a_stream_the_caller_cancels_gives_its_slot_back() -> None:
    held = Held()
    svc = await _start(held, limit=1)
    try:
        async with grpc.aio.insecure_channel(svc.address) as ch:
            stream = ch.unary_stream(f"/{SERVICE}/Stream")
            call = stream(b"", timeout=10)
            assert await call.read() == b"first"
            with pytest.raises(grpc.aio.AioRpcError) as shed:
                await ch.unary_unary(f"/{SERVICE}/Hold")(b"", timeout=10)
            assert shed.value.code() == grpc.StatusCode.UNAVAILABLE

            call.cancel()
            port = svc.spec.settings.metrics_port
            labels = {"grpc_service": SERVICE}
            await _until(
                lambda: metric_value(scrape(port), "candor_server_calls_in_flight", labels) == 0
            )
            held.release.set()
            replies = [r async for r in stream(b"", timeout=10)]
            assert replies == [b"first", b"last"]
    finally:
        await svc.stop(0)


async def test_no_limit_counts_calls_but_refuses_none() -> None:
    held = Held()
    svc = await _start(held, limit=0)
    try:
        async with grpc.aio.insecure_channel(svc.address) as ch:
            hold = ch.unary_unary(f"/{SERVICE}/Hold")
            running = [asyncio.ensure_future(hold(b"", timeout=10)) for _ in range(20)]
            await _until(lambda: held.entered == 20)
            text = scrape(svc.spec.settings.metrics_port)
            labels = {"grpc_service": SERVICE}
            assert metric_value(text, "candor_server_calls_in_flight", labels) == 20
            assert metric_value(text, "candor_server_shed_total", labels) == 0
            held.release.set()
            assert await asyncio.gather(*running) == [b"done"] * 20
    finally:
        await svc.stop(0)


def test_the_limit_counts_and_refuses_only_past_it() -> None:
    limit = InFlightLimit(2)
    assert limit.try_enter() and limit.try_enter()
    assert not limit.try_enter()
    assert limit.running == 2, "a refused call takes nothing"
    limit.leave()
    assert limit.try_enter()
    unlimited = InFlightLimit(0)
    assert all(unlimited.try_enter() for _ in range(1000))
    with pytest.raises(RuntimeError):
        InFlightLimit(1).leave()
    with pytest.raises(ValueError):
        InFlightLimit(-1)


async def test_an_unavailable_that_is_not_a_shed_has_no_retry_hint() -> None:
    (dead,) = free_ports(1)
    async with grpc.aio.insecure_channel(f"127.0.0.1:{dead}") as ch:
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await ch.unary_unary(f"/{SERVICE}/Hold")(b"", timeout=5)
    assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
    assert retry_delay_of(refused.value) is None


@pytest.mark.parametrize("ending", ["error", "deadline", "cancel"])
async def test_a_call_that_ends_badly_gives_its_slot_back(ending: str) -> None:
    svc = await _start(Held(), limit=1)
    metrics_port = svc.spec.settings.metrics_port
    labels = {"grpc_service": SERVICE}
    try:
        async with grpc.aio.insecure_channel(svc.address) as ch:
            for _ in range(3):  # with one slot, a leak sheds the second call
                if ending == "error":
                    with pytest.raises(grpc.aio.AioRpcError) as err:
                        await ch.unary_unary(f"/{SERVICE}/Fail")(b"", timeout=5)
                    assert err.value.code() == grpc.StatusCode.UNKNOWN
                elif ending == "deadline":
                    with pytest.raises(grpc.aio.AioRpcError) as err:
                        await ch.unary_unary(f"/{SERVICE}/Slow")(b"", timeout=0.2)
                    assert err.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
                else:
                    call = ch.unary_unary(f"/{SERVICE}/Slow")(b"", timeout=5)
                    await asyncio.sleep(0.2)
                    call.cancel()
                await _until(
                    lambda: (
                        metric_value(scrape(metrics_port), "candor_server_calls_in_flight", labels)
                        == 0
                    )
                )
        assert metric_value(scrape(metrics_port), "candor_server_shed_total", labels) == 0
    finally:
        await svc.stop(0)


class HeldRetrieval(retrieval_pb2_grpc.RetrievalServiceServicer):
    """Retrieval's API on the real runtime, with a Retrieve that waits to be let go: the
    runtime's own limit then sheds the next call, as a busy retrieval pod would."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.entered = 0

    async def Retrieve(
        self, request: retrieval_pb2.RetrieveRequest, context: grpc.aio.ServicerContext
    ) -> retrieval_pb2.RetrieveResponse:
        self.entered += 1
        await self.release.wait()
        return retrieval_pb2.RetrieveResponse()


async def test_a_gate_passes_retrievals_shed_on_instead_of_refusing(tmp_path: Path) -> None:
    # A shed retrieval call became an ARMS_UNAVAILABLE refusal: "the knowledge base has
    # nothing" to the caller and to the refusal-rate alerts, for a call a retry could serve.
    held = HeldRetrieval()
    retrieval = await _serve(RETRIEVAL, _as_retrieval(held), limit=1)
    env = stack_env(str(tmp_path / "data"), CANDOR_GATE__RETRIEVAL_TARGET=retrieval.address)
    gate = await asyncio.to_thread(Stack, lambda: start_stack(load_settings(env=env), "gate"))
    try:
        async with (
            grpc.aio.insecure_channel(retrieval.address) as rch,
            grpc.aio.insecure_channel(gate.address("GateService")) as gch,
        ):
            busy = asyncio.ensure_future(
                retrieval_pb2_grpc.RetrievalServiceStub(rch).Retrieve(
                    retrieval_pb2.RetrieveRequest(tenant="t", query="q"), timeout=10
                )
            )
            await _until(lambda: held.entered == 1)
            stub = gate_pb2_grpc.GateServiceStub(gch)
            request = gate_pb2.EvaluateRequest(tenant="t", query="What pressure for tyres?")
            with pytest.raises(grpc.aio.AioRpcError) as shed:
                await stub.Evaluate(request, timeout=10)
            assert shed.value.code() == grpc.StatusCode.UNAVAILABLE
            assert retry_delay_of(shed.value) == pytest.approx(RETRY_DELAY_SECONDS)
            info = error_info_of(shed.value)
            assert info is not None and info.reason == REASON
            assert info.metadata["service"] == "candor.retrieval.v1.RetrievalService"
            asked = stub.Ask(gate_pb2.AskRequest(tenant="t", query="What pressure?"), timeout=10)
            with pytest.raises(grpc.aio.AioRpcError) as shed_ask:
                await asyncio.wait_for(asyncio.ensure_future(_drain(asked)), 10)
            assert retry_delay_of(shed_ask.value) is not None

            text = await asyncio.to_thread(scrape, gate.metrics_port("GateService"))
            assert metric_value(text, "candor_gate_decisions_total") == 0, "no decision made"
            held.release.set()
            await busy
            # Retrieval free again: the gate decides (this stand-in finds nothing).
            decision = (await stub.Evaluate(request, timeout=10)).decision
            assert decision.outcome == gate_pb2.OUTCOME_REFUSE
            assert decision.reason == gate_pb2.REASON_NO_HITS
    finally:
        await asyncio.to_thread(gate.stop)
        await retrieval.stop(0)


class HeldWriter(retrieval_pb2_grpc.RetrievalServiceServicer):
    """The writing pod's API on the real runtime, with an upsert that waits to be let go."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.entered = 0

    async def UpsertDocuments(
        self, request: retrieval_pb2.UpsertDocumentsRequest, context: grpc.aio.ServicerContext
    ) -> retrieval_pb2.UpsertDocumentsResponse:
        self.entered += 1
        await self.release.wait()
        return retrieval_pb2.UpsertDocumentsResponse()


async def test_a_reading_pod_passes_the_writers_shed_on_untimed(tmp_path: Path) -> None:
    # Relayed as any error, the shed lost grpc's retry header and was timed on the reading
    # pod: a burst of them counted as fast good writes in the latency SLO.
    held = HeldWriter()
    writer = await _serve(RETRIEVAL, _as_retrieval(held), limit=1)
    settings = load_settings(env=stack_env(str(tmp_path / "reader")))
    # writer_target needs shared stores in settings; the forwarding does not.
    settings = dataclasses.replace(
        settings,
        retrieval=dataclasses.replace(settings.retrieval, writer_target=writer.address),
    )
    reader = await asyncio.to_thread(Stack, lambda: start_stack(settings, "retrieval"))
    document = retrieval_pb2.Document(document_id="d", text="some text")
    request = retrieval_pb2.UpsertDocumentsRequest(tenant="t", documents=[document])
    try:
        async with grpc.aio.insecure_channel(reader.address("RetrievalService")) as ch:
            stub = retrieval_pb2_grpc.RetrievalServiceStub(ch)
            busy = asyncio.ensure_future(stub.UpsertDocuments(request, timeout=10))
            await _until(lambda: held.entered == 1)
            with pytest.raises(grpc.aio.AioRpcError) as shed:
                await stub.UpsertDocuments(request, timeout=10)
            assert shed.value.code() == grpc.StatusCode.UNAVAILABLE
            info = error_info_of(shed.value)
            assert info is not None and info.reason == REASON
            assert info.metadata["service"] == RETRIEVAL
            assert retry_delay_of(shed.value) == pytest.approx(RETRY_DELAY_SECONDS)
            trailers = dict(shed.value.trailing_metadata() or ())
            assert trailers["grpc-retry-pushback-ms"] == str(int(RETRY_DELAY_SECONDS * 1000))

            held.release.set()
            await busy
            text = await asyncio.to_thread(scrape, reader.metrics_port("RetrievalService"))
            upserts = {"grpc_method": "UpsertDocuments"}
            unavailable = {**upserts, "grpc_code": "UNAVAILABLE"}
            assert metric_value(text, "grpc_server_handled_total", unavailable) == 1
            assert metric_value(text, "grpc_server_handling_seconds_count", upserts) == 1, (
                "only the write that was served is timed"
            )
    finally:
        await asyncio.to_thread(reader.stop)
        await writer.stop(0)


async def _drain(call: grpc.aio.UnaryStreamCall) -> None:  # type: ignore[type-arg]
    async for _ in call:
        pass


class FailsFirst(retrieval_pb2_grpc.RetrievalServiceServicer):
    """A Retrieve that fails its first ``failures`` calls UNAVAILABLE, then answers: bare, as
    a pod draining or restarting fails it, or with retrieval's own reason (both arms down)."""

    def __init__(self, failures: int, reason: str = "") -> None:
        self.failures = failures
        self.reason = reason
        self.calls = 0

    async def Retrieve(
        self, request: retrieval_pb2.RetrieveRequest, context: grpc.aio.ServicerContext
    ) -> retrieval_pb2.RetrieveResponse:
        self.calls += 1
        if self.calls <= self.failures:
            if self.reason:
                await abort_info(
                    context, grpc.StatusCode.UNAVAILABLE, self.reason, "no retrieval arm answered"
                )
            await context.abort(grpc.StatusCode.UNAVAILABLE, "the server is shutting down")
        return retrieval_pb2.RetrieveResponse()


@pytest.mark.parametrize(
    ("failures", "reason", "calls", "want"),
    [
        # Two bare failures absorbed; the third attempt decides.
        (2, "", 3, gate_pb2.REASON_NO_HITS),
        # Three: the gate's to handle, as an outage.
        (3, "", 3, gate_pb2.REASON_ARMS_UNAVAILABLE),
        # Retrieval did the work and both arms failed: not repeated (it doubled the load on the
        # failing stores and ran the refusal out to the whole retrieval timeout).
        (1, "ARMS_UNAVAILABLE", 1, gate_pb2.REASON_ARMS_UNAVAILABLE),
    ],
)
async def test_the_gate_retries_a_retrieve_that_did_no_work(
    tmp_path: Path, failures: int, reason: str, calls: int, want: int
) -> None:
    # Without retries one draining retrieval pod turned Evaluate into ARMS_UNAVAILABLE refusals.
    servicer = FailsFirst(failures, reason)
    retrieval = await _serve(RETRIEVAL, _as_retrieval(servicer))
    env = stack_env(str(tmp_path / "data"), CANDOR_GATE__RETRIEVAL_TARGET=retrieval.address)
    gate = await asyncio.to_thread(Stack, lambda: start_stack(load_settings(env=env), "gate"))
    try:
        async with grpc.aio.insecure_channel(gate.address("GateService")) as ch:
            reply = await gate_pb2_grpc.GateServiceStub(ch).Evaluate(
                gate_pb2.EvaluateRequest(tenant="t", query="What pressure for tyres?"), timeout=10
            )
        text = await asyncio.to_thread(scrape, gate.metrics_port("GateService"))
    finally:
        await asyncio.to_thread(gate.stop)
        await retrieval.stop(0)
    assert servicer.calls == calls
    assert reply.decision.reason == want
    # One logical call, counted once however many attempts it took.
    assert (
        metric_value(text, "candor_gate_downstream_calls_total", {"downstream": "retrieval"}) == 1
    )


class HeldGenerator(generator_pb2_grpc.GeneratorServiceServicer):
    """The generator's API on the real runtime, writing its answer only when let go: an LLM
    taking seconds. It checks no token (the gate's own handling is under test)."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.entered = 0

    async def Generate(
        self, request: generator_pb2.GenerateRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[generator_pb2.GenerateResponse]:
        self.entered += 1
        await self.release.wait()
        yield generator_pb2.GenerateResponse(
            final=generator_pb2.AnswerFinal(answer="80 to 100 psi")
        )


async def test_an_ask_waiting_on_its_answer_holds_no_gate_slot_and_a_generator_shed_is_passed_on(
    tmp_path: Path,
) -> None:
    # The gate's slot bounds decisions being made. Held while an LLM wrote the answer, 32
    # slow answers shed every call while the gate's CPU sat idle.
    held = HeldGenerator()
    generator = await _serve(
        GENERATOR,
        lambda s: generator_pb2_grpc.add_GeneratorServiceServicer_to_server(held, s),
        limit=1,
    )
    policy = tmp_path / "policy.yaml"
    policy.write_text('version: "cfg-1"\npolicy: seed000\n')
    data = str(tmp_path / "data")
    retrieval = await asyncio.to_thread(
        Stack, lambda: start_stack(load_settings(env=stack_env(data)), "retrieval")
    )
    await asyncio.to_thread(seed_bikes, retrieval)
    env = stack_env(
        data,
        CANDOR_GATE__RETRIEVAL_TARGET=retrieval.address("RetrievalService"),
        CANDOR_GATE__GENERATOR_TARGET=generator.address,
        CANDOR_GATE__POLICY_PATH=str(policy),
        CANDOR_GATE__SERVER__MAX_IN_FLIGHT=1,
        CANDOR_GATE__MAX_IN_FLIGHT_PER_TENANT=1,
    )
    gate = await asyncio.to_thread(Stack, lambda: start_stack(load_settings(env=env), "gate"))
    question = "What pressure do road tyres run at?"
    try:
        async with grpc.aio.insecure_channel(gate.address("GateService")) as ch:
            stub = gate_pb2_grpc.GateServiceStub(ch)
            first = stub.Ask(gate_pb2.AskRequest(tenant="t", query=question), timeout=20)
            reply = await first.read()
            assert reply.decision.outcome == gate_pb2.OUTCOME_PASS
            await _until(lambda: held.entered == 1)

            # The gate's one slot, and the tenant's, are free while the first answer is written.
            evaluated = await stub.Evaluate(
                gate_pb2.EvaluateRequest(tenant="t", query=question), timeout=10
            )
            assert evaluated.decision.outcome == gate_pb2.OUTCOME_PASS

            # The generator's one slot is not: it sheds the second answer before reading its
            # token, and the caller is told to retry, not that generation failed.
            second = stub.Ask(gate_pb2.AskRequest(tenant="t", query=question), timeout=20)
            assert (await second.read()).decision.outcome == gate_pb2.OUTCOME_PASS
            with pytest.raises(grpc.aio.AioRpcError) as shed:
                await second.read()
            assert shed.value.code() == grpc.StatusCode.UNAVAILABLE
            assert retry_delay_of(shed.value) is not None
            info = error_info_of(shed.value)
            assert info is not None
            assert info.metadata["service"] == "candor.generator.v1.GeneratorService"

            held.release.set()
            last = await first.read()
            assert last.final.answer == "80 to 100 psi"
    finally:
        await asyncio.to_thread(gate.stop)
        await asyncio.to_thread(retrieval.stop)
        await generator.stop(0)


async def test_one_tenants_burst_is_refused_past_its_share_and_others_still_get_in(
    tmp_path: Path,
) -> None:
    held = HeldRetrieval()
    retrieval = await _serve(RETRIEVAL, _as_retrieval(held))
    env = stack_env(
        str(tmp_path / "data"),
        CANDOR_GATE__RETRIEVAL_TARGET=retrieval.address,
        CANDOR_GATE__MAX_IN_FLIGHT_PER_TENANT=2,
    )
    gate = await asyncio.to_thread(Stack, lambda: start_stack(load_settings(env=env), "gate"))

    def request(tenant: str) -> gate_pb2.EvaluateRequest:
        return gate_pb2.EvaluateRequest(tenant=tenant, query="What pressure for tyres?")

    try:
        async with grpc.aio.insecure_channel(gate.address("GateService")) as ch:
            stub = gate_pb2_grpc.GateServiceStub(ch)
            noisy = [asyncio.ensure_future(stub.Evaluate(request("noisy"), timeout=10))]
            noisy.append(asyncio.ensure_future(stub.Evaluate(request("noisy"), timeout=10)))
            await _until(lambda: held.entered == 2)

            with pytest.raises(grpc.aio.AioRpcError) as limited:
                await stub.Evaluate(request("noisy"), timeout=10)
            assert limited.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            info = error_info_of(limited.value)
            assert info is not None and info.reason == TENANT_REASON
            assert dict(info.metadata) == {
                "tenant": "noisy",
                "max_in_flight_per_tenant": "2",
                "service": "gate",
            }
            assert "gate.max_in_flight_per_tenant" in limited.value.details()
            assert retry_delay_of(limited.value) == pytest.approx(RETRY_DELAY_SECONDS)
            assert held.entered == 2, "a limited call must not reach retrieval"

            # Another tenant is not held back by the noisy one.
            quiet = asyncio.ensure_future(stub.Evaluate(request("quiet"), timeout=10))
            await _until(lambda: held.entered == 3)

            held.release.set()
            replies = await asyncio.gather(*noisy, quiet)
            assert all(r.decision.reason == gate_pb2.REASON_NO_HITS for r in replies)
            # Its slots came back.
            again = await stub.Evaluate(request("noisy"), timeout=10)
            assert again.decision.reason == gate_pb2.REASON_NO_HITS
        text = await asyncio.to_thread(scrape, gate.metrics_port("GateService"))
        assert metric_value(text, "candor_gate_tenant_limited_total") == 1
        # The refusal is counted but not timed: fast refusals are not fast good calls.
        evaluate = {"grpc_method": "Evaluate"}
        assert metric_value(text, "grpc_server_handled_total", evaluate) == 5
        assert metric_value(text, "grpc_server_handling_seconds_count", evaluate) == 4
    finally:
        await asyncio.to_thread(gate.stop)
        await retrieval.stop(0)


def test_the_tenant_limit_counts_per_tenant_and_forgets_idle_ones() -> None:
    limit = TenantLimit(1)
    assert limit.try_enter("a") and limit.try_enter("b")
    assert not limit.try_enter("a")
    limit.leave("a")
    assert limit.running == {"b": 1}
    assert limit.try_enter("a")
    with pytest.raises(RuntimeError):
        limit.leave("c")
    unlimited = TenantLimit(0)
    assert all(unlimited.try_enter("a") for _ in range(100))


def test_candor_ask_asks_again_when_shed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:

    held = HeldRetrieval()

    async def start_retrieval() -> list[RunningService]:
        return [await _serve(RETRIEVAL, _as_retrieval(held))]

    retrieval = Stack(start_retrieval)
    env = stack_env(
        str(tmp_path / "data"),
        CANDOR_GATE__RETRIEVAL_TARGET=retrieval.address("RetrievalService"),
        CANDOR_GATE__MAX_IN_FLIGHT_PER_TENANT=1,
    )
    gate = Stack(lambda: start_stack(load_settings(env=env), "gate"))
    target = gate.address("GateService")

    def first_call() -> None:
        with grpc.insecure_channel(target) as ch:
            gate_pb2_grpc.GateServiceStub(ch).Evaluate(
                gate_pb2.EvaluateRequest(tenant="t", query="tyre pressure?"), timeout=20
            )

    try:
        question = "What pressure for tyres?"
        code, pauses = _cli_ask_while_held(
            first_call, held, retrieval, question, target, monkeypatch
        )
    finally:
        gate.stop()
        retrieval.stop()
    out = capsys.readouterr().out
    assert code == 0 and "REFUSE" in out
    assert len(pauses) == 1 and RETRY_DELAY_SECONDS / 2 <= pauses[0] <= RETRY_DELAY_SECONDS


def test_candor_ask_asks_again_when_the_generator_sheds_its_answer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # The decision came, then the generator shed the answer: the token is unspent, so the CLI
    # asks again rather than printing the shed as the answer's error.

    held = HeldGenerator()

    async def start_generator() -> list[RunningService]:
        register = lambda s: generator_pb2_grpc.add_GeneratorServiceServicer_to_server(held, s)  # noqa: E731
        return [await _serve(GENERATOR, register, limit=1)]

    generator = Stack(start_generator)
    data = str(tmp_path / "data")
    retrieval = Stack(lambda: start_stack(load_settings(env=stack_env(data)), "retrieval"))
    seed_bikes(retrieval)
    policy = tmp_path / "policy.yaml"
    policy.write_text('version: "cfg-1"\npolicy: seed000\n')
    env = stack_env(
        data,
        CANDOR_GATE__RETRIEVAL_TARGET=retrieval.address("RetrievalService"),
        CANDOR_GATE__GENERATOR_TARGET=generator.address("GeneratorService"),
        CANDOR_GATE__POLICY_PATH=str(policy),
    )
    gate = Stack(lambda: start_stack(load_settings(env=env), "gate"))
    target = gate.address("GateService")
    question = "What pressure do road tyres run at?"

    def first_ask() -> None:
        with grpc.insecure_channel(target) as ch:
            list(
                gate_pb2_grpc.GateServiceStub(ch).Ask(
                    gate_pb2.AskRequest(tenant="t", query=question), timeout=20
                )
            )

    try:
        code, pauses = _cli_ask_while_held(
            first_ask, held, generator, question, target, monkeypatch
        )
    finally:
        gate.stop()
        retrieval.stop()
        generator.stop()
    captured = capsys.readouterr()
    assert code == 0 and "80 to 100 psi" in captured.out
    assert "the generator is busy" in captured.err
    assert len(pauses) == 1


def _cli_ask_while_held(
    first_call: Callable[[], None],
    held: HeldRetrieval | HeldGenerator,
    where: Stack,
    question: str,
    target: str,
    monkeypatch: pytest.MonkeyPatch,
) -> tuple[int, list[float]]:
    """``candor ask`` while ``first_call`` (in a thread) holds ``held`` on ``where``'s loop:
    when the CLI is shed and waits its backoff, the held call is let go and finishes, so its
    next try gets in. Returns the CLI's exit code and the pauses it took."""
    import threading

    from candor.cli import client
    from candor.cli.main import main

    holder = threading.Thread(target=first_call)
    pauses: list[float] = []

    def pause(seconds: float) -> None:
        pauses.append(seconds)
        where.loop.loop.call_soon_threadsafe(held.release.set)
        holder.join(10)

    holder.start()
    deadline = time.monotonic() + 10
    while held.entered < 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    monkeypatch.setattr(client, "_pause", pause)
    return main(["ask", question, "--target", target, "--tenant", "t"]), pauses
