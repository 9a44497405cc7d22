"""Every RPC in the proto descriptors has an implementation (temporal's contract test)."""

from __future__ import annotations

import pytest

from candor.gate.v1 import gate_pb2, gate_pb2_grpc
from candor.generator.v1 import generator_pb2, generator_pb2_grpc
from candor.retrieval.v1 import retrieval_pb2, retrieval_pb2_grpc
from gate_svc.service import GateServicer
from generator_svc.service import GeneratorServicer
from retrieval_svc.service import RetrievalServicer

CASES = [
    (
        retrieval_pb2,
        "RetrievalService",
        retrieval_pb2_grpc.RetrievalServiceServicer,
        RetrievalServicer,
    ),
    (gate_pb2, "GateService", gate_pb2_grpc.GateServiceServicer, GateServicer),
    (
        generator_pb2,
        "GeneratorService",
        generator_pb2_grpc.GeneratorServiceServicer,
        GeneratorServicer,
    ),
]


@pytest.mark.parametrize(("module", "service", "base", "impl"), CASES)
def test_every_rpc_is_implemented(module, service, base, impl):  # type: ignore[no-untyped-def]
    methods = module.DESCRIPTOR.services_by_name[service].methods
    assert methods, "descriptor lists no RPCs"
    missing = [m.name for m in methods if getattr(impl, m.name) is getattr(base, m.name)]
    assert missing == [], f"{impl.__name__} does not implement {missing}"


def test_streaming_shapes_match_the_design():
    gate = gate_pb2.DESCRIPTOR.services_by_name["GateService"].methods_by_name
    gen = generator_pb2.DESCRIPTOR.services_by_name["GeneratorService"].methods_by_name
    assert gate["Ask"].server_streaming and not gate["Evaluate"].server_streaming
    assert gen["Generate"].server_streaming
