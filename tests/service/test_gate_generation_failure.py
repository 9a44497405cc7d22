"""An LLM that rejects the generator's request (a bad key) reaches the Ask caller as a failure
that will not pass on retry, with the generator's reason, not as UNAVAILABLE."""

from __future__ import annotations

from pathlib import Path

import grpc
import httpx

from candor.cli import client
from candor.cli.stack import start_stack
from candor.gate.v1 import gate_pb2, gate_pb2_grpc
from candor.runtime.errors import error_info_of
from candor.settings import load_settings
from tests.helpers import Stack, stack_env
from tests.llm.server import fake_llm

SAMPLES = Path(__file__).resolve().parents[2] / "samples" / "helpcentre"
PASSED = "How do I turn on two-factor authentication?"


def _generation_error(env: dict[str, str], why: str) -> grpc.RpcError:
    """The error an Ask for a passed question ends with, on a stack started from ``env``."""
    stack = Stack(lambda: start_stack(load_settings(env=env)))
    try:
        with grpc.insecure_channel(stack.address("RetrievalService")) as ch:
            assert client.ingest(ch, SAMPLES, "t", None).failed == 0
        with grpc.insecure_channel(stack.address("GateService")) as ch:
            stream = gate_pb2_grpc.GateServiceStub(ch).Ask(
                gate_pb2.AskRequest(tenant="t", query=PASSED), timeout=30
            )
            assert next(stream).decision.outcome == gate_pb2.OUTCOME_PASS
            try:
                list(stream)
            except grpc.RpcError as exc:
                return exc
            raise AssertionError(why)
    finally:
        stack.stop()


def _llm_env(tmp_path: Path, base_url: str, **extra: str) -> dict[str, str]:
    """A stack whose generator answers with the OpenAI-compatible LLM at ``base_url``."""
    return stack_env(
        str(tmp_path / "data"),
        CANDOR_GENERATOR__BACKEND="openai_compat",
        CANDOR_GENERATOR__OPENAI_COMPAT__BASE_URL=base_url,
        CANDOR_GENERATOR__OPENAI_COMPAT__MODEL="small",
        **extra,
    )


def test_a_rejected_llm_request_is_internal_with_the_generators_reason(tmp_path: Path) -> None:
    rejected = httpx.Response(401, json={"error": {"message": "invalid api key"}})
    with fake_llm(lambda body: rejected) as llm:
        error = _generation_error(
            _llm_env(tmp_path, llm.base_url), "the Ask succeeded against a rejecting LLM"
        )
    assert error.code() == grpc.StatusCode.INTERNAL
    info = error_info_of(error)
    assert info is not None and info.reason == "GENERATION_FAILED"
    assert info.metadata["generator_reason"] == "LLM_UPSTREAM_REJECTED"


def test_a_generator_refusing_the_gates_own_token_is_internal_not_permission_denied(
    tmp_path: Path,
) -> None:
    # A rotation done in the wrong order: the generator lacks the gate's public key. The
    # caller's credentials are fine, so PERMISSION_DENIED ("do not retry, fix your key") lied.
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from candor.token import write_public_key

    foreign = tmp_path / "generator-keys"
    foreign.mkdir()
    write_public_key(Ed25519PrivateKey.generate(), foreign, "candor-1")
    env = stack_env(str(tmp_path / "data"), CANDOR_GENERATOR__PUBLIC_KEYS_DIR=str(foreign))
    error = _generation_error(env, "the generator took a token signed by a key it lacks")
    assert error.code() == grpc.StatusCode.INTERNAL
    info = error_info_of(error)
    assert info is not None and info.reason == "GENERATION_FAILED"
    assert info.metadata["generator_reason"] == "TOKEN_SIGNATURE"
    assert "127.0.0.1" not in (error.details() or "")


def test_the_gates_own_generation_timeout_is_unavailable_not_the_callers_deadline(
    tmp_path: Path,
) -> None:
    # The caller had 30 s; the gate's 1 s generation timeout cut the answer off. It was
    # reported DEADLINE_EXCEEDED, which tells a caller its own deadline was too short.
    with fake_llm(lambda body: 5.0) as llm:  # stalls past the gate's timeout
        env = _llm_env(tmp_path, llm.base_url, CANDOR_GATE__GENERATION_TIMEOUT_SECONDS="1")
        error = _generation_error(env, "the Ask succeeded against a stalled LLM")
    assert error.code() == grpc.StatusCode.UNAVAILABLE
    info = error_info_of(error)
    assert info is not None and info.reason == "GENERATION_FAILED"
