"""What the rendered manifests promise: probes, ports and settings agree; pods are locked down;
the signing key reaches the gate only; NetworkPolicies admit only the intended callers; a new
threshold config rolls the gate (and nothing else)."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from typing import Any

import pytest
import yaml

from candor.settings import Settings, load_settings
from gate_svc.policy import parse_policy
from tests.deploy.conftest import VARIANTS, Docs
from tests.deploy.tools import K8S, kustomize

SERVICES = {
    "retrieval": "candor.retrieval.v1.RetrievalService",
    "gate": "candor.gate.v1.GateService",
    "generator": "candor.generator.v1.GeneratorService",
}
CANDOR_IMAGES = {"dev": "candor:dev", "prod": "registry.example.com/platform/candor:0.1.0"}


# --- helpers ------------------------------------------------------------------------------------


def one(docs: Docs, kind: str, name: str) -> dict[str, Any]:
    found = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    assert len(found) == 1, f"{kind}/{name}: {len(found)} found"
    return found[0]


def by_prefix(docs: Docs, kind: str, prefix: str) -> dict[str, Any]:
    found = [d for d in docs if d["kind"] == kind and d["metadata"]["name"].startswith(prefix)]
    assert len(found) == 1, f"{kind}/{prefix}*: {[d['metadata']['name'] for d in found]}"
    return found[0]


def pod_spec(docs: Docs, service: str) -> dict[str, Any]:
    return one(docs, "Deployment", f"candor-{service}")["spec"]["template"]["spec"]


def container(docs: Docs, service: str) -> dict[str, Any]:
    containers = pod_spec(docs, service)["containers"]
    assert len(containers) == 1
    return containers[0]


def mounts(docs: Docs, service: str) -> dict[str, dict[str, Any]]:
    """mountPath -> the volume mounted there."""
    spec = pod_spec(docs, service)
    volumes = {v["name"]: v for v in spec["volumes"]}
    return {m["mountPath"]: volumes[m["name"]] for m in container(docs, service)["volumeMounts"]}


def volume_for(docs: Docs, service: str, path: str) -> tuple[str, dict[str, Any]]:
    """The volume holding a file path, and the path inside it."""
    for mount, volume in mounts(docs, service).items():
        if PurePosixPath(path).is_relative_to(mount):
            return str(PurePosixPath(path).relative_to(mount)), volume
    raise AssertionError(f"{service}: nothing mounted at {path}")


def service_links(docs: Docs) -> dict[str, str]:
    """What the kubelet injects for every Service in the namespace when a pod leaves
    ``enableServiceLinks`` at its default (``true``)."""
    env: dict[str, str] = {}
    for svc in (d for d in docs if d["kind"] == "Service"):
        prefix = svc["metadata"]["name"].upper().replace("-", "_")
        ports = svc["spec"].get("ports", [])
        env[f"{prefix}_SERVICE_HOST"] = "10.0.0.5"
        for i, port in enumerate(ports):
            number, proto = port["port"], port.get("protocol", "TCP")
            url = f"{proto.lower()}://10.0.0.5:{number}"
            if i == 0:
                env[f"{prefix}_SERVICE_PORT"] = str(number)
                env[f"{prefix}_PORT"] = url
            if "name" in port:
                env[f"{prefix}_SERVICE_PORT_{port['name'].upper().replace('-', '_')}"] = str(number)
            base = f"{prefix}_PORT_{number}_{proto}"
            env |= {base: url, f"{base}_PROTO": proto.lower(), f"{base}_PORT": str(number)}
            env[f"{base}_ADDR"] = "10.0.0.5"
    return env


def settings_for(docs: Docs, service: str, tmp: Path) -> Settings:
    """The settings the container would load: its CANDOR_CONFIG file + its CANDOR_* env, and
    the service-link variables a cluster adds if a manifest ever re-enables them."""
    c = container(docs, service)
    env: dict[str, str] = service_links(docs)
    assert any(k.startswith("CANDOR_GATE_") for k in env), "the Services should give candor ones"
    for e in c.get("env", []):
        if "value" in e:
            env[e["name"]] = e["value"]
        else:  # from a Secret: any well-formed value
            env[e["name"]] = "from-secret"
    config = env["CANDOR_CONFIG"]
    rel, volume = volume_for(docs, service, config)
    cm = one(docs, "ConfigMap", volume["configMap"]["name"])
    path = tmp / f"{service}.yaml"
    path.write_text(cm["data"][rel])
    env["CANDOR_CONFIG"] = str(path)
    return load_settings(env=env)


def server_settings(s: Settings, service: str) -> Any:
    return getattr(s, service).server


@pytest.fixture(params=VARIANTS)
def variant(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def docs(rendered: dict[str, Docs], variant: str) -> Docs:
    return rendered[variant]


# --- probes, ports, settings ---------------------------------------------------------------------


@pytest.mark.parametrize("service", SERVICES)
def test_container_ports_probes_and_settings_agree(
    docs: Docs, service: str, tmp_path: Path
) -> None:
    s = settings_for(docs, service, tmp_path)
    server = server_settings(s, service)
    c = container(docs, service)
    assert c["args"] == ["--service", service]
    assert server.host == "0.0.0.0", "a pod must listen beyond loopback"
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert ports == {"grpc": server.port, "metrics": server.metrics_port}
    full_name = SERVICES[service]
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        grpc = c[probe]["grpc"]
        assert grpc["port"] == server.port, probe
    assert c["readinessProbe"]["grpc"]["service"] == full_name
    assert c["startupProbe"]["grpc"]["service"] == full_name
    grace = pod_spec(docs, service)["terminationGracePeriodSeconds"]
    assert grace > server.drain_delay_seconds + server.grace_seconds, (
        "Kubernetes would SIGKILL before the drain delay and the grace for in-flight calls end"
    )
    assert server.drain_delay_seconds >= 2, "endpoints need a moment to drop a NOT_SERVING pod"
    if service == "gate":
        assert s.gate.generation_timeout_seconds <= server.grace_seconds


def test_every_meshed_pod_keeps_its_proxy_until_it_has_drained(
    docs: Docs, variant: str, tmp_path: Path
) -> None:
    meshed = 0
    for d in (d for d in docs if d["kind"] == "Deployment"):
        annotations = d["spec"]["template"]["metadata"].get("annotations") or {}
        if annotations.get("linkerd.io/inject") != "enabled":
            continue
        meshed += 1
        name = d["metadata"]["name"]
        wait = annotations.get("config.alpha.linkerd.io/proxy-wait-before-exit-seconds")
        assert wait is not None, f"{name}: its proxy would exit while calls are still draining"
        service = d["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/component"]
        # The pod's own container settings (the writer's are the reading pods', under its name).
        c = d["spec"]["template"]["spec"]["containers"][0]
        env = {e["name"]: e.get("value", "from-secret") for e in c.get("env", [])}
        rel, volume = volume_for(docs, service, env["CANDOR_CONFIG"])
        config = tmp_path / f"{name}.yaml"
        config.write_text(one(docs, "ConfigMap", volume["configMap"]["name"])["data"][rel])
        server = server_settings(load_settings(env=env | {"CANDOR_CONFIG": str(config)}), service)
        grace = d["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
        assert server.drain_delay_seconds + server.grace_seconds + 3 <= int(wait) < grace, name
    # prod+components has the linkerd component: every candor Deployment, the writer among them.
    assert meshed == (4 if variant == "prod+components" else 0)


@pytest.mark.parametrize("service", SERVICES)
def test_pods_get_no_service_link_variables(docs: Docs, service: str) -> None:
    assert pod_spec(docs, service).get("enableServiceLinks") is False


@pytest.mark.parametrize("service", SERVICES)
def test_service_exposes_grpc_and_metrics_ports(docs: Docs, service: str) -> None:
    svc = one(docs, "Service", f"candor-{service}")
    ports = {p["name"]: p for p in svc["spec"]["ports"]}
    assert set(ports) == {"grpc", "metrics"}
    assert ports["grpc"]["appProtocol"] == "grpc"
    assert ports["grpc"]["targetPort"] == "grpc" and ports["metrics"]["targetPort"] == "metrics"
    assert svc["spec"]["selector"] == {"app.kubernetes.io/name": f"candor-{service}"}
    if service in ("retrieval", "generator"):
        assert svc["spec"]["clusterIP"] == "None", "headless: DNS lists every ready pod"


@pytest.mark.parametrize("service", ["retrieval", "generator"])
def test_gate_targets_resolve_to_services_on_the_right_ports(
    docs: Docs, service: str, tmp_path: Path
) -> None:
    gate = settings_for(docs, "gate", tmp_path).gate
    target = gate.retrieval_target if service == "retrieval" else gate.generator_target
    host, _, port = target.removeprefix("dns:///").rpartition(":")
    svc = one(docs, "Service", host)
    assert int(port) in {p["port"] for p in svc["spec"]["ports"] if p["name"] == "grpc"}
    assert svc["spec"]["selector"] == {"app.kubernetes.io/name": f"candor-{service}"}


def test_every_service_reads_the_same_settings(docs: Docs) -> None:
    names = {
        volume_for(docs, s, container(docs, s)["env"][0]["value"])[1]["configMap"]["name"]
        for s in SERVICES
    }
    assert len(names) == 1 and next(iter(names)).startswith("candor-settings-")


# --- security -----------------------------------------------------------------------------------


def workloads(docs: Docs) -> Iterator[tuple[str, dict[str, Any]]]:
    for d in docs:
        if d["kind"] in ("Deployment", "StatefulSet"):
            yield d["metadata"]["name"], d["spec"]["template"]["spec"]


def test_every_pod_runs_locked_down(docs: Docs) -> None:
    for name, spec in workloads(docs):
        assert spec["securityContext"]["runAsNonRoot"] is True, name
        assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}, name
        assert spec["automountServiceAccountToken"] is False, name
        for c in spec["containers"]:
            sc = c["securityContext"]
            assert sc["allowPrivilegeEscalation"] is False, name
            assert sc["capabilities"]["drop"] == ["ALL"], name
            assert "add" not in sc["capabilities"], name
            assert c["resources"]["requests"] and c["resources"]["limits"], name
            assert set(c["resources"]["limits"]) >= {"cpu", "memory"}, name


@pytest.mark.parametrize("service", SERVICES)
def test_candor_pods_have_a_read_only_root_and_writable_data_and_tmp(
    docs: Docs, variant: str, service: str, tmp_path: Path
) -> None:
    c = container(docs, service)
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    assert c["image"] == CANDOR_IMAGES[variant.split("+")[0]]
    m = mounts(docs, service)
    data_dir = settings_for(docs, service, tmp_path).data_dir
    for writable in (data_dir, "/tmp"):
        assert "emptyDir" in m[writable] or "persistentVolumeClaim" in m[writable], writable
    assert pod_spec(docs, service)["securityContext"]["runAsUser"] == 10001  # the image's user


def referenced(spec: dict[str, Any]) -> set[tuple[str, str]]:
    """(kind, name) of every Secret and ConfigMap a pod spec uses (volumes, env, envFrom)."""
    out: set[tuple[str, str]] = set()
    for v in spec.get("volumes", []):
        if "secret" in v:
            out.add(("Secret", v["secret"]["secretName"]))
        if "configMap" in v:
            out.add(("ConfigMap", v["configMap"]["name"]))
        for src in v.get("projected", {}).get("sources", []):
            if "secret" in src:
                out.add(("Secret", src["secret"]["name"]))
    for c in spec["containers"] + spec.get("initContainers", []):
        for e in c.get("env", []):
            ref = e.get("valueFrom", {})
            if "secretKeyRef" in ref:
                out.add(("Secret", ref["secretKeyRef"]["name"]))
            if "configMapKeyRef" in ref:
                out.add(("ConfigMap", ref["configMapKeyRef"]["name"]))
        for e in c.get("envFrom", []):
            if "secretRef" in e:
                out.add(("Secret", e["secretRef"]["name"]))
            if "configMapRef" in e:
                out.add(("ConfigMap", e["configMapRef"]["name"]))
    return out


def test_private_key_reaches_the_gate_only_and_public_keys_the_generator_only(
    docs: Docs, tmp_path: Path
) -> None:
    users: dict[tuple[str, str], set[str]] = {}
    for name, spec in workloads(docs):
        for ref in referenced(spec):
            users.setdefault(ref, set()).add(name)
    assert users[("Secret", "candor-signing-key")] == {"candor-gate"}
    assert users[("ConfigMap", "candor-token-public-keys")] == {"candor-generator"}
    policy_cm = next(r for r in users if r[1].startswith("candor-policy-"))
    assert users[policy_cm] == {"candor-gate"}
    # The settings point where those volumes are mounted.
    gate = settings_for(docs, "gate", tmp_path).gate
    rel, volume = volume_for(docs, "gate", gate.signing_key_path)
    assert volume["secret"]["secretName"] == "candor-signing-key"
    assert {"key": "signing-key.pem", "path": rel} in volume["secret"]["items"]
    assert volume["secret"]["defaultMode"] & 0o007 == 0, "the key must not be world-readable"
    keys_dir = settings_for(docs, "generator", tmp_path).generator.public_keys_dir
    assert mounts(docs, "generator")[keys_dir]["configMap"]["name"] == "candor-token-public-keys"
    # Nothing else holds a Secret: there is no key material in the manifests.
    assert not [d for d in docs if d["kind"] == "Secret"]


def test_store_credentials_reach_retrieval_only(rendered: dict[str, Docs], tmp_path: Path) -> None:
    docs = rendered["prod"]
    users: dict[tuple[str, str], set[str]] = {}
    for name, spec in workloads(docs):
        for ref in referenced(spec):
            users.setdefault(ref, set()).add(name)
    for secret in ("candor-qdrant", "candor-opensearch"):
        assert users[("Secret", secret)] == {"candor-retrieval", "candor-retrieval-writer"}
    r = settings_for(docs, "retrieval", tmp_path).retrieval
    assert (r.dense_backend, r.keyword_backend) == ("qdrant", "opensearch")
    assert r.qdrant.https and r.qdrant.url.startswith("https://")
    assert all(h.startswith("https://") for h in r.opensearch.hosts)
    assert r.opensearch.verify_certs
    for path, secret in (
        (r.qdrant.api_key_file, "candor-qdrant"),
        (r.opensearch.password_file, "candor-opensearch"),
    ):
        _, volume = volume_for(docs, "retrieval", path)
        assert volume["secret"]["secretName"] == secret
    _, ca = volume_for(docs, "retrieval", r.opensearch.ca_certs)
    assert ca["configMap"]["name"] == "candor-opensearch-ca"


def test_dev_points_retrieval_at_the_in_cluster_stores(
    rendered: dict[str, Docs], tmp_path: Path
) -> None:
    docs = rendered["dev"]
    r = settings_for(docs, "retrieval", tmp_path).retrieval
    qdrant = one(docs, "Service", "candor-qdrant")
    opensearch = one(docs, "Service", "candor-opensearch")
    assert r.qdrant.url == f"http://{qdrant['metadata']['name']}:6333"
    assert r.opensearch.hosts == (f"http://{opensearch['metadata']['name']}:9200",)
    for name in ("candor-qdrant", "candor-opensearch"):
        sts = one(docs, "StatefulSet", name)
        assert sts["spec"]["volumeClaimTemplates"], name
        assert sts["spec"]["replicas"] == 1


# --- scaling --------------------------------------------------------------------------------------


@pytest.mark.parametrize("service", SERVICES)
def test_hpa_and_pdb_cover_each_service(docs: Docs, service: str) -> None:
    deployment = one(docs, "Deployment", f"candor-{service}")
    assert "replicas" not in deployment["spec"], "the HPA owns the replica count"
    assert deployment["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    hpa = one(docs, "HorizontalPodAutoscaler", f"candor-{service}")
    assert hpa["apiVersion"] == "autoscaling/v2"
    assert hpa["spec"]["scaleTargetRef"] == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "name": f"candor-{service}",
    }
    assert 1 <= hpa["spec"]["minReplicas"] <= hpa["spec"]["maxReplicas"]
    pdb = one(docs, "PodDisruptionBudget", f"candor-{service}")
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert pdb["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert pdb["spec"]["maxUnavailable"] == 1


def test_prod_keeps_at_least_three_of_each(rendered: dict[str, Docs]) -> None:
    for service in SERVICES:
        assert (
            one(rendered["prod"], "HorizontalPodAutoscaler", f"candor-{service}")["spec"][
                "minReplicas"
            ]
            >= 3
        )


# --- threshold config --------------------------------------------------------------------------


def test_the_packaged_threshold_configs_parse_with_distinct_versions(docs: Docs) -> None:
    cm = by_prefix(docs, "ConfigMap", "candor-policy-")
    versions = {key: parse_policy(text).version for key, text in cm["data"].items()}
    assert "policy.yaml" in versions
    assert len(set(versions.values())) == len(versions), versions


def test_shadow_component_mounts_a_shadow_config_the_gate_loads(
    rendered: dict[str, Docs], tmp_path: Path
) -> None:
    docs = rendered["prod+components"]
    gate = settings_for(docs, "gate", tmp_path).gate
    for path in (gate.policy_path, gate.shadow_policy_path):
        rel, volume = volume_for(docs, "gate", path)
        cm = one(docs, "ConfigMap", volume["configMap"]["name"])
        parse_policy(cm["data"][rel])
    assert not settings_for(rendered["prod"], "gate", tmp_path).gate.shadow_policy_path


def test_a_new_threshold_version_rolls_the_gate_and_only_the_gate(
    rendered: dict[str, Docs], tmp_path: Path
) -> None:
    """The policy ConfigMap's name carries a content hash, so new content = new gate pods."""
    base = K8S / "overlays" / "prod"
    (tmp_path / "policy.yaml").write_text(
        re.sub(
            r"(?m)^version: .*$",
            "version: 2099-01-01.test.1",
            (K8S / "base" / "policy" / "policy.yaml").read_text(),
        )
    )
    (tmp_path / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "kustomize.config.k8s.io/v1beta1",
                "kind": "Kustomization",
                "resources": [os.path.relpath(base, tmp_path)],
                "configMapGenerator": [
                    {"name": "candor-policy", "behavior": "replace", "files": ["policy.yaml"]}
                ],
            }
        )
    )
    before, after = rendered["prod"], kustomize(tmp_path)
    for service in SERVICES:
        old = one(before, "Deployment", f"candor-{service}")["spec"]["template"]
        new = one(after, "Deployment", f"candor-{service}")["spec"]["template"]
        assert (old != new) == (service == "gate"), service


# --- network policy ----------------------------------------------------------------------------


def _matches(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    for key, value in selector.get("matchLabels", {}).items():
        if labels.get(key) != value:
            return False
    for expr in selector.get("matchExpressions", []):
        present, value = expr["key"] in labels, labels.get(expr["key"])
        op = expr["operator"]
        if (
            (op == "In" and value not in expr["values"])
            or (op == "NotIn" and value in expr["values"])
            or (op == "Exists" and not present)
            or (op == "DoesNotExist" and present)
        ):
            return False
    return True


def admits(
    docs: Docs,
    dst: dict[str, str],
    port: int,
    src: dict[str, str],
    src_namespace: dict[str, str] | None = None,
) -> bool:
    """Kubernetes NetworkPolicy ingress semantics for pod labels in this namespace; a source in
    another namespace passes its namespace's labels."""
    policies = [
        p
        for p in docs
        if p["kind"] == "NetworkPolicy"
        and "Ingress" in p["spec"].get("policyTypes", ["Ingress"])
        and _matches(p["spec"]["podSelector"], dst)
    ]
    if not policies:
        return True  # not isolated
    for policy in policies:
        for rule in policy["spec"].get("ingress", []):
            if rule.get("ports") and not any(p.get("port") == port for p in rule["ports"]):
                continue
            if "from" not in rule:
                return True
            for peer in rule["from"]:
                if "ipBlock" in peer:
                    continue
                ns_ok = (
                    src_namespace is None
                    if "namespaceSelector" not in peer
                    else src_namespace is not None
                    and _matches(peer["namespaceSelector"], src_namespace)
                )
                pod_ok = "podSelector" not in peer or _matches(peer["podSelector"], src)
                if ns_ok and pod_ok:
                    return True
    return False


POD = {
    name: {"app.kubernetes.io/name": f"candor-{name}", "app.kubernetes.io/component": name}
    for name in SERVICES
}
WRITER = {
    "app.kubernetes.io/name": "candor-retrieval-writer",
    "app.kubernetes.io/component": "retrieval",
}
STRANGER = {"app": "billing-api"}
CLIENT = {"app": "ingest-job", "candor.dev/retrieval-client": "true"}
PROMETHEUS = {"app.kubernetes.io/name": "prometheus"}
MONITORING = {"kubernetes.io/metadata.name": "monitoring"}
ELSEWHERE = {"kubernetes.io/metadata.name": "billing"}


def test_the_pod_labels_here_are_the_pods_own(docs: Docs) -> None:
    for name, labels in [
        *((f"candor-{n}", POD[n]) for n in SERVICES),
        ("candor-retrieval-writer", WRITER),
    ]:
        template = one(docs, "Deployment", name)["spec"]["template"]["metadata"]["labels"]
        assert labels.items() <= template.items(), name


def test_only_the_gate_reaches_the_generator(docs: Docs) -> None:
    gen = POD["generator"]
    assert admits(docs, gen, 50053, POD["gate"])
    for src, ns in (
        (POD["retrieval"], None),
        (STRANGER, None),
        (CLIENT, None),
        (POD["gate"], ELSEWHERE),  # a "gate" label in another namespace is not our gate
        (PROMETHEUS, MONITORING),
    ):
        assert not admits(docs, gen, 50053, src, ns), (src, ns)
    assert admits(docs, gen, 9103, PROMETHEUS, MONITORING)
    assert not admits(docs, gen, 9103, STRANGER)


def test_retrieval_admits_the_gate_and_labelled_callers_only(docs: Docs) -> None:
    for r in (POD["retrieval"], WRITER):
        assert admits(docs, r, 50051, POD["gate"])
        assert admits(docs, r, 50051, CLIENT)
        for src, ns in ((STRANGER, None), (POD["generator"], None), (CLIENT, ELSEWHERE)):
            assert not admits(docs, r, 50051, src, ns), (src, ns)
        assert admits(docs, r, 9101, PROMETHEUS, MONITORING)
    # A reading pod sends its writes to the writer.
    assert admits(docs, WRITER, 50051, POD["retrieval"])


def test_gate_admits_callers_on_grpc_but_metrics_only_to_prometheus(docs: Docs) -> None:
    g = POD["gate"]
    assert admits(docs, g, 50052, STRANGER) and admits(docs, g, 50052, STRANGER, ELSEWHERE)
    assert not admits(docs, g, 9102, STRANGER)
    assert admits(docs, g, 9102, PROMETHEUS, MONITORING)


def test_dev_stores_admit_retrieval_only(rendered: dict[str, Docs]) -> None:
    docs = rendered["dev"]
    for store, port in (
        ("candor-qdrant", 6334),
        ("candor-qdrant", 6333),
        ("candor-opensearch", 9200),
    ):
        dst = {"app.kubernetes.io/name": store}
        assert admits(docs, dst, port, POD["retrieval"]), store
        assert admits(docs, dst, port, WRITER), store
        assert not admits(docs, dst, port, POD["gate"]), store
        assert not admits(docs, dst, port, STRANGER), store


# --- monitoring objects -----------------------------------------------------------------------


@pytest.mark.parametrize("service", SERVICES)
def test_service_monitor_scrapes_the_metrics_port(docs: Docs, service: str) -> None:
    monitor = one(docs, "ServiceMonitor", f"candor-{service}")
    svc = one(docs, "Service", f"candor-{service}")
    assert _matches(monitor["spec"]["selector"], svc["metadata"]["labels"])
    # exactly one Service per ServiceMonitor (no double scrapes through mesh twins)
    services = [d for d in docs if d["kind"] == "Service"]
    assert [
        s["metadata"]["name"]
        for s in services
        if _matches(monitor["spec"]["selector"], s["metadata"]["labels"])
    ] == [f"candor-{service}"]
    assert [e["port"] for e in monitor["spec"]["endpoints"]] == ["metrics"]
    assert monitor["spec"]["endpoints"][0]["path"] == "/metrics"


def test_dashboard_configmap_is_labelled_for_the_grafana_sidecar(docs: Docs) -> None:
    cm = one(docs, "ConfigMap", "candor-grafana-dashboard")
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert cm["data"]["candor.json"] == (K8S.parent / "grafana" / "candor.json").read_text()


def test_the_base_policy_is_the_shipped_default() -> None:
    """The ConfigMap ships the same calibrated config the gate falls back to."""
    from gate_svc.policy import DEFAULT_POLICY_PATH

    assert (K8S / "base" / "policy" / "policy.yaml").read_text() == DEFAULT_POLICY_PATH.read_text()


def test_the_reader_v5_component_pairs_the_reader_with_the_config_fitted_on_it(
    rendered: dict[str, Docs], tmp_path: Path
) -> None:
    from gate_svc.policy import reader_mismatch
    from gate_svc.reader import model_digest, reader_file

    component = K8S / "components" / "reader-v5" / "policy.yaml"
    packaged = Path(__file__).parents[2] / "gate_svc" / "policies" / "reader-v5-pooled.yaml"
    assert component.read_text() == packaged.read_text()
    docs = rendered["prod+components"]
    gate = settings_for(docs, "gate", tmp_path).gate
    assert gate.reader.model == "v5"
    rel, volume = volume_for(docs, "gate", gate.policy_path)
    live = parse_policy(one(docs, "ConfigMap", volume["configMap"]["name"])["data"][rel])
    digest = model_digest(reader_file(gate.reader.model))
    assert live.calibrated.reader_model == digest
    assert reader_mismatch(live, digest) is None
    assert settings_for(rendered["prod"], "gate", tmp_path).gate.reader.model == "v4"


# --- the one retrieval writer -----------------------------------------------------------------


def test_one_retrieval_pod_writes_and_the_reading_pods_send_it_their_writes(
    docs: Docs, tmp_path: Path
) -> None:
    writer = one(docs, "Deployment", "candor-retrieval-writer")
    # One replica, and no second one beside it during a rollout or under an autoscaler.
    assert writer["spec"]["replicas"] == 1
    assert writer["spec"]["strategy"] == {"type": "Recreate"}
    autoscaled = [
        h["spec"]["scaleTargetRef"]["name"] for h in docs if h["kind"] == "HorizontalPodAutoscaler"
    ]
    assert "candor-retrieval-writer" not in autoscaled
    # Its pods are not behind the reading pods' Service, nor theirs behind its.
    labels = writer["spec"]["template"]["metadata"]["labels"]
    reader_service = one(docs, "Service", "candor-retrieval")
    assert not reader_service["spec"]["selector"].items() <= labels.items()
    service = one(docs, "Service", "candor-retrieval-writer")
    assert service["spec"]["selector"].items() <= labels.items()
    reader_labels = one(docs, "Deployment", "candor-retrieval")["spec"]["template"]["metadata"][
        "labels"
    ]
    assert not service["spec"]["selector"].items() <= reader_labels.items()
    # The reading pods' target is the writer's Service and gRPC port, and they share the stores.
    r = settings_for(docs, "retrieval", tmp_path).retrieval
    assert r.writer_target == f"dns:///{service['metadata']['name']}:50051"
    assert any(p["name"] == "grpc" and p["port"] == 50051 for p in service["spec"]["ports"])
    # The same pod as the reading pods, apart from the writer target and its own labels.
    reader_pod = pod_spec(docs, "retrieval")
    writer_pod = writer["spec"]["template"]["spec"]

    def without_writer_target(spec: dict[str, Any]) -> str:
        text = yaml.safe_dump(spec, sort_keys=True)
        return text.replace("candor-retrieval-writer", "candor-retrieval")

    reader_env = reader_pod["containers"][0]["env"]
    target = [e for e in reader_env if e["name"] == "CANDOR_RETRIEVAL__WRITER_TARGET"]
    assert len(target) == 1
    stripped = {
        **reader_pod,
        "containers": [
            {**reader_pod["containers"][0], "env": [e for e in reader_env if e not in target]}
        ],
    }
    assert without_writer_target(writer_pod) == without_writer_target(stripped)
