"""Start one service or all three in this process (the embedded default runs all three)."""

from __future__ import annotations

import dataclasses

from candor.runtime.server import RunningService, start_service
from candor.runtime.tracing import configure_tracing
from candor.settings import Settings
from gate_svc.service import build_gate, signing_key
from generator_svc.service import build_generator
from retrieval_svc.service import build_retrieval

SERVICES = ("retrieval", "gate", "generator")
ALL_IN_ONE = "candor"
"""service.name of a process that runs all three services (one alone keeps its own name)."""


async def start_stack(settings: Settings, which: str = "all") -> list[RunningService]:
    """Boot the requested services; the gate is built before the generator so the embedded
    default's signing key exists when the generator loads the public keys."""
    wanted = SERVICES if which == "all" else (which,)
    if len(wanted) > 1:
        # One tracer provider per process: named after the first service to start, every
        # span of the all-in-one process would claim to be retrieval's.
        configure_tracing(ALL_IN_ONE)
    running: list[RunningService] = []
    try:
        if "retrieval" in wanted:
            running.append(await start_service(build_retrieval(settings)))
            settings = _point_gate_at(settings, "retrieval_target", running[-1].address)
        if "gate" in wanted:
            signing_key(settings)  # the generator loads its public half at start-up
        if "generator" in wanted:
            running.append(await start_service(build_generator(settings)))
            settings = _point_gate_at(settings, "generator_target", running[-1].address)
        if "gate" in wanted:
            running.append(await start_service(build_gate(settings)))
    except BaseException:
        for svc in running:
            svc.spec.failed_start = True
            await svc.stop(0)
        raise
    return running


def _point_gate_at(settings: Settings, field: str, address: str) -> Settings:
    """When services share a process, the gate dials the ports they actually bound."""
    gate = dataclasses.replace(settings.gate, **{field: address})  # type: ignore[arg-type]
    return dataclasses.replace(settings, gate=gate)
