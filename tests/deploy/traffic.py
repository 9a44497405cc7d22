"""Start the real stack, drive traffic that exercises every metric, scrape every /metrics.

Used by test_metrics_exported.py; ``python -m tests.deploy.traffic`` prints what is exported
(family, type, label names), which is handy when writing rules or dashboard panels.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import grpc
from prometheus_client.parser import text_string_to_metric_families

from candor.cli import client
from candor.cli.stack import start_stack
from candor.gate.v1 import gate_pb2, gate_pb2_grpc
from candor.generator.v1 import generator_pb2, generator_pb2_grpc
from candor.retrieval.v1 import retrieval_pb2, retrieval_pb2_grpc
from candor.settings import load_settings
from tests.helpers import Stack, metric_value, scrape, stack_env

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "samples" / "helpcentre"
TENANT = "acme"
ANSWERED = "How long do I have to get a refund for a label I didn't use?"
REFUSED = "Who won the 1998 football World Cup?"
SHORT = {"RetrievalService": "retrieval", "GateService": "gate", "GeneratorService": "generator"}


@dataclass
class Family:
    name: str
    type: str
    labels: set[str] = field(default_factory=set)
    values: dict[str, set[str]] = field(default_factory=dict)
    """Observed label values, by label name."""
    services: set[str] = field(default_factory=set)


def families(texts: dict[str, str]) -> dict[str, Family]:
    """Every series name Prometheus would store (``x_total``, ``x_bucket``, ``x_count`` …, never
    a counter's or histogram's bare family name), with its labels and the values seen."""
    out: dict[str, Family] = {}
    for service, text in texts.items():
        for fam in text_string_to_metric_families(text):
            for sample in fam.samples:
                f = out.setdefault(sample.name, Family(sample.name, fam.type))
                f.services.add(service)
                for k, v in sample.labels.items():
                    f.labels.add(k)
                    f.values.setdefault(k, set()).add(v)
    return out


@contextmanager
def running_stack() -> Iterator[tuple[Stack, Path]]:
    with tempfile.TemporaryDirectory() as tmp:
        policy = Path(tmp) / "policy.yaml"
        shadow = Path(tmp) / "shadow.yaml"
        policy.write_text((ROOT / "gate_svc" / "policy_default.yaml").read_text())
        shadow.write_text(
            'version: "traffic-shadow-1"\npolicy: seed000\n'
            "seed000: {chunk_floor: 0, answer_gate: 0}\n"
        )
        env = stack_env(
            str(Path(tmp) / "data"),
            CANDOR_GATE__POLICY_PATH=str(policy),
            CANDOR_GATE__SHADOW_POLICY_PATH=str(shadow),
            CANDOR_GATE__POLICY_POLL_SECONDS="0.1",
        )
        stack = Stack(lambda: start_stack(load_settings(env=env)))
        try:
            yield stack, policy
        finally:
            stack.stop()


def drive(stack: Stack, policy: Path) -> None:
    """Ingest, Retrieve, Evaluate, Ask (answered and refused), a token rejection, a delete,
    and a rejected threshold-config reload: every labelled counter gets a sample."""
    docs = [p for p in sorted(SAMPLES.glob("*.md"))[:8]]
    with grpc.insecure_channel(stack.address("RetrievalService")) as ch:
        stub = retrieval_pb2_grpc.RetrievalServiceStub(ch)
        stub.UpsertDocuments(
            retrieval_pb2.UpsertDocumentsRequest(
                tenant=TENANT,
                documents=[
                    retrieval_pb2.Document(document_id=p.stem, title=p.stem, text=p.read_text())
                    for p in docs
                ],
            ),
            timeout=120,
        )
        stub.Retrieve(retrieval_pb2.RetrieveRequest(tenant=TENANT, query="refund"), timeout=10)
        stub.Retrieve(retrieval_pb2.RetrieveRequest(tenant="nobody", query="refund"), timeout=10)
        stub.DeleteDocuments(
            retrieval_pb2.DeleteDocumentsRequest(tenant=TENANT, document_ids=["missing"]),
            timeout=10,
        )
    with grpc.insecure_channel(stack.address("GateService")) as ch:
        answered = client.ask(ch, ANSWERED, TENANT, None)
        assert answered.decision.outcome == gate_pb2.OUTCOME_PASS, answered.decision
        refused = client.ask(ch, REFUSED, TENANT, None)
        assert refused.decision.outcome == gate_pb2.OUTCOME_REFUSE, refused.decision
        gate = gate_pb2_grpc.GateServiceStub(ch)
        gate.Evaluate(gate_pb2.EvaluateRequest(tenant=TENANT, query=REFUSED), timeout=10)
        gate.GetPolicy(gate_pb2.GetPolicyRequest(), timeout=10)
    with grpc.insecure_channel(stack.address("GeneratorService")) as ch:
        gen = generator_pb2_grpc.GeneratorServiceStub(ch)
        try:
            list(
                gen.Generate(
                    generator_pb2.GenerateRequest(pass_token="not-a-token", query=ANSWERED),
                    timeout=10,
                )
            )
        except grpc.RpcError as exc:
            assert exc.code() == grpc.StatusCode.PERMISSION_DENIED
        else:
            raise AssertionError("a malformed pass token was accepted")
    # A config change that keeps its version is rejected and counted (result="failure").
    policy.write_text(policy.read_text() + "\nmax_evidence: 4\n")
    deadline = time.monotonic() + 10
    port = stack.metrics_port("GateService")
    while metric_value(scrape(port), "candor_gate_config_reloads_total", {"result": "failure"}) < 1:
        assert time.monotonic() < deadline, "the rejected config reload was never counted"
        time.sleep(0.1)


def scrape_all(stack: Stack) -> dict[str, str]:
    return {short: scrape(stack.metrics_port(service)) for service, short in SHORT.items()}


def main() -> None:
    with running_stack() as (stack, policy):
        drive(stack, policy)
        fams = families(scrape_all(stack))
    for name in sorted(fams):
        f = fams[name]
        print(f"{name:55} {f.type:10} {','.join(sorted(f.services)):10} {sorted(f.labels)}")


if __name__ == "__main__":
    main()
