"""Test helpers: run services in a background event loop and talk to them with sync stubs."""

from __future__ import annotations

import asyncio
import os
import random
import socket
import subprocess
import sys
import textwrap
import threading
import time
import urllib.request
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

import grpc

from candor.runtime.server import RunningService, shutdown

T = TypeVar("T")


def free_port() -> int:
    return free_ports(1)[0]


def _below_ephemeral_range() -> range:
    """Ports the kernel never hands out by itself (below its ephemeral range)."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    return range(max(1024, low - 12000), low)


def free_ports(n: int) -> list[int]:
    """``n`` distinct free ports. The sockets stay bound until all are picked: two services
    given one port fail to start. The ports are drawn from below the kernel's ephemeral range:
    a port picked there and released was taken, before the service bound it, by an outgoing
    connection's local port or another server's port 0 (CI failed with EADDRINUSE on a
    metrics port that way)."""
    candidates = list(_below_ephemeral_range())
    random.shuffle(candidates)
    socks: list[socket.socket] = []
    try:
        for port in candidates:
            if len(socks) == n:
                break
            s = socket.socket()
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                s.close()
                continue
            socks.append(s)
        if len(socks) < n:
            raise RuntimeError(f"no {n} free ports below the ephemeral range")
        return [int(s.getsockname()[1]) for s in socks]
    finally:
        for s in socks:
            s.close()


def outputs_under_hash_seeds(code: str, seeds: int) -> set[str]:
    """What ``code`` prints in a fresh interpreter under each of ``seeds`` hash seeds: one
    output means nothing it computes follows a set's or a dict-of-str's iteration order."""
    return {
        subprocess.run(
            [sys.executable, "-c", code],
            env={**os.environ, "PYTHONHASHSEED": str(seed)},
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for seed in range(seeds)
    }


def run_with_file_size_limit(code: str, limit_bytes: int) -> subprocess.CompletedProcess[str]:
    """Run Python ``code`` in a child process whose writes past ``limit_bytes`` in any one file
    fail (EFBIG), as they would on a full disk, without needing a small filesystem or root."""
    prelude = (
        "import resource, signal\n"
        "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
        "_, hard = resource.getrlimit(resource.RLIMIT_FSIZE)\n"
        f"resource.setrlimit(resource.RLIMIT_FSIZE, ({limit_bytes}, hard))\n"
    )
    return subprocess.run(
        [sys.executable, "-c", prelude + textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


class LoopThread:
    """An asyncio loop in a daemon thread, so sync tests can drive aio servers."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()

    def run(self, coro: Awaitable[T], timeout: float = 120) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)  # type: ignore[arg-type]

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(5)


class Stack:
    """Services started in a LoopThread; ``address(name)`` by short service name."""

    def __init__(self, start: Callable[[], Awaitable[list[RunningService]]]) -> None:
        self.loop = LoopThread()
        self.services = self.loop.run(start())

    def address(self, short_name: str) -> str:
        for svc in self.services:
            if svc.spec.name.endswith("." + short_name):
                return svc.address
        raise KeyError(short_name)

    def metrics_port(self, short_name: str) -> int:
        for svc in self.services:
            if svc.spec.name.endswith("." + short_name):
                return svc.spec.settings.metrics_port
        raise KeyError(short_name)

    def stop(self) -> None:
        self.loop.run(shutdown(self.services))
        self.loop.close()


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        return str(r.read().decode())


def metric_value(text: str, name: str, labels: Mapping[str, str] | None = None) -> float:
    """Sum of a metric's samples whose labels include ``labels``."""
    total = 0.0
    for line in text.splitlines():
        if not line.startswith(name + "{") and not line.startswith(name + " "):
            continue
        head, _, value = line.rpartition(" ")
        if all(f'{k}="{v}"' in head for k, v in (labels or {}).items()):
            total += float(value)
    return total


def settled_metric(
    port: int, name: str, labels: Mapping[str, str], want: float, timeout: float = 5.0
) -> float:
    """The metric's value once it reads ``want`` (or its last value after ``timeout``): a call
    is counted in the handler's ``finally``, which can run after its caller saw the status."""
    deadline = time.monotonic() + timeout
    while True:
        value = metric_value(scrape(port), name, labels)
        if value == want or time.monotonic() > deadline:
            return value
        time.sleep(0.05)


def stack_env(data_dir: str, **extra: Any) -> dict[str, str]:
    env = {"CANDOR_DATA_DIR": data_dir}
    services = ("RETRIEVAL", "GATE", "GENERATOR")
    for svc, port in zip(services, free_ports(len(services)), strict=True):
        env[f"CANDOR_{svc}__SERVER__PORT"] = "0"
        env[f"CANDOR_{svc}__SERVER__METRICS_PORT"] = str(port)
        env[f"CANDOR_{svc}__SERVER__DRAIN_DELAY_SECONDS"] = "0"
    env.update({k: str(v) for k, v in extra.items()})
    return env


BIKES = "Road bicycle tyres run at 80 to 100 psi."
"""One on-topic passage for gate tests: anything about, say, tax law is out of the KB."""


def seed_bikes(stack: Stack, tenant: str = "t") -> None:
    """Ingest the one-passage bicycle KB the gate tests ask against."""
    from candor.retrieval.v1 import retrieval_pb2, retrieval_pb2_grpc

    doc = retrieval_pb2.Document(document_id="bikes", title="Bicycles", text=BIKES)
    with grpc.insecure_channel(stack.address("RetrievalService")) as ch:
        retrieval_pb2_grpc.RetrievalServiceStub(ch).UpsertDocuments(
            retrieval_pb2.UpsertDocumentsRequest(tenant=tenant, documents=[doc])
        )


def ask(stack: Stack, query: str, tenant: str = "t", timeout: float = 10.0) -> list[Any]:
    """Every message of the gate's Ask stream for ``query``."""
    from candor.gate.v1 import gate_pb2, gate_pb2_grpc

    with grpc.insecure_channel(stack.address("GateService")) as ch:
        stub = gate_pb2_grpc.GateServiceStub(ch)
        return list(stub.Ask(gate_pb2.AskRequest(tenant=tenant, query=query), timeout=timeout))


def evaluate(
    stack: Stack, query: str, language: str = "", tenant: str = "t", timeout: float = 10.0
) -> Any:
    """The gate's Evaluate decision for ``query``."""
    from candor.gate.v1 import gate_pb2, gate_pb2_grpc

    with grpc.insecure_channel(stack.address("GateService")) as ch:
        reply = gate_pb2_grpc.GateServiceStub(ch).Evaluate(
            gate_pb2.EvaluateRequest(tenant=tenant, query=query, language=language),
            timeout=timeout,
        )
    return reply.decision
