"""``candor eval run --target``: a dataset against a running stack's gate, over real gRPC."""

from __future__ import annotations

import datetime
import ipaddress
import json
import tempfile
from collections import Counter
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from candor.cli import main as cli
from candor.cli.stack import start_stack
from candor.common.v1 import evidence_pb2
from candor.gate.v1 import gate_pb2, gate_pb2_grpc
from candor.runtime.auth import hash_key
from candor.settings import load_settings
from evals import calibrate, remote, report
from evals.datasets.format import Question, load_dataset, write_dataset
from evals.datasets.helpcentre import passages
from gate_svc.policy import parse_policy
from gate_svc.signals import CandidateView, compute_signals
from tests.helpers import Stack, stack_env

pytestmark = pytest.mark.e2e
KEY = "key-eval-123"
TENANT = "acme"
#: The e2e suite's known pass: its gold article is the first evidence on the default policy.
REFUND = "How long do I have to get a refund for a label I didn't use?"
ROW_FIELDS = {
    "id",
    "question",
    "answerable",
    "kind",
    "split",
    "gold_ids",
    "signals",
    "missing_facets",
    "ranked",
    "policies",
}
SAMPLE_QUESTIONS = Path(__file__).resolve().parents[2] / "samples" / "helpcentre"


def _questions() -> list[Question]:
    rows = [
        json.loads(line)
        for line in (SAMPLE_QUESTIONS / "questions.jsonl").read_text().splitlines()
        if line.strip()
    ]
    picked = [r for r in rows if r["id"] in {f"q{n:02d}" for n in (*range(1, 11), 21, 22, 23, 24)}]
    picked += [r for r in rows if r["id"] in {"q31", "q32", "q33"}]
    out = [
        Question(
            "refund",
            REFUND,
            True,
            ("05-refunds-for-unused-labels",),
            "answerable",
            split="train",
        )
    ]
    for i, r in enumerate(picked):
        out.append(
            Question(
                r["id"],
                r["question"],
                r["answerable"],
                tuple(r["gold_ids"]),
                r["kind"],
                split="train" if i % 2 else "test",
            )
        )
    return out


@pytest.fixture(scope="module")
def env() -> Iterator[tuple[Stack, Path]]:
    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "candor.yaml"
        config.write_text(
            json.dumps(
                {
                    "auth": {
                        "enabled": True,
                        "keys": [{"name": "eval", "sha256": hash_key(KEY), "tenants": [TENANT]}],
                    }
                }
            )
        )
        settings = load_settings(config, env=stack_env(str(Path(tmp) / "data")))
        stack = Stack(lambda: start_stack(settings))
        (Path(tmp) / "key").write_text(KEY + "\n")
        write_dataset(Path(tmp) / "dataset", passages(), _questions())
        try:
            yield stack, Path(tmp)
        finally:
            stack.stop()


def _run(stack: Stack, tmp: Path, out: Path, *extra: str, dataset: str = "dataset") -> int:
    argv = [
        "eval",
        "run",
        str(tmp / dataset),
        "--out",
        str(out),
        "--target",
        stack.address("GateService"),
        *extra,
    ]
    return cli.main(argv)


def _rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.fixture(scope="module")
def ingested(env: tuple[Stack, Path]) -> tuple[int, Path]:
    stack, tmp = env
    out = tmp / "rows.jsonl"
    code = _run(
        stack,
        tmp,
        out,
        "--api-key-file",
        str(tmp / "key"),
        "--tenant",
        TENANT,
        "--ingest",
        "--retrieval-target",
        stack.address("RetrievalService"),
        "--concurrency",
        "4",
    )
    return code, out


def test_every_question_gets_a_row_in_the_in_process_schema(
    env: tuple[Stack, Path], ingested: tuple[int, Path]
) -> None:
    _, tmp = env
    code, out = ingested
    assert code == 0
    rows = _rows(out)
    questions = load_dataset(tmp / "dataset").questions
    assert [r["id"] for r in rows] == [q.id for q in questions]
    active = rows[0]["deployment"]["policy_name"]
    for row in rows:
        assert set(row) >= ROW_FIELDS and "error" not in row
        # A deployed gate skips the read when even a certain reading would refuse.
        assert set(calibrate.FEATURES) - {calibrate.READER_FEATURE} <= set(row["signals"])
        assert ("reader" in row["signals"]) != (row["signals"].get("reader_skipped") == 1.0)
        assert set(row["ranked"]) == {"hybrid"}
        assert set(row["policies"]) >= {active, "always_answer", "top1_cosine", "seed001"}
        assert set(row["policies"]) >= {"seed003", "seed004"}
        decided = row["policies"][active]
        assert decided["outcome"] in {"pass", "refuse", "clarify"}
        assert decided["reason"] == decided["reason"].lower() and decided["reason"]
        assert decided["tier"] in {"confident", "uncertain", "no_match"}
        assert decided["evidence"] == sorted(set(row["ranked"]["hybrid"]))
        assert row["policies"]["always_answer"]["confidence"] == 1.0
        assert row["policies"]["top1_cosine"]["confidence"] == row["signals"]["top_cosine"]


def test_passed_answerable_questions_carry_their_gold_document(
    ingested: tuple[int, Path],
) -> None:
    rows = _rows(ingested[1])
    active = rows[0]["deployment"]["policy_name"]
    passed = [r for r in rows if r["answerable"] and r["policies"][active]["outcome"] == "pass"]
    by_id = {r["id"]: r for r in rows}
    # The corpus was ingested by the run itself: without it nothing could pass.
    assert by_id["refund"] in passed
    for r in passed:
        assert set(r["gold_ids"]) & set(r["policies"][active]["evidence"]), r["id"]
    assert by_id["q22"]["policies"][active]["outcome"] == "refuse"


def test_signal_only_baselines_decide_refused_questions_from_their_signals(
    ingested: tuple[int, Path],
) -> None:
    rows = _rows(ingested[1])
    active = rows[0]["deployment"]["policy_name"]
    refused = [r for r in rows if r["policies"][active]["outcome"] == "refuse"]
    assert refused
    for r in refused:
        assert r["signals"]["hits"] > 0 and r["ranked"]["hybrid"] == []
        # Not "no_hits": the deployment did retrieve, it just admitted nothing.
        for name in ("seed001", "seed003", "seed004"):
            assert r["policies"][name]["reason"] != "no_hits", (r["id"], name)
        assert r["policies"]["always_answer"]["outcome"] == "pass"


def test_report_and_calibrate_accept_the_rows(
    env: tuple[Stack, Path], ingested: tuple[int, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    _, tmp = env
    out = ingested[1]
    summary_path = tmp / "summary.json"
    assert report.main([str(out), "--split", "all", "--json", str(summary_path)]) == 0
    summary = json.loads(summary_path.read_text())
    rows = _rows(out)
    assert summary["n"] == len(rows)
    assert set(summary["recall"]) == {"hybrid"}
    assert rows[0]["deployment"]["policy_name"] in summary["policies"]
    assert "| hybrid |" in capsys.readouterr().out
    policy = tmp / "calibrated.yaml"
    assert calibrate.main([str(out), "--out", str(policy), "--target-far", "0.2"]) == 0
    assert parse_policy(policy.read_text()).policy == "calibrated"
    # The fitted config is rescored from the saved rows, as for in-process ones.
    assert report.main([str(out), "--split", "test", "--policy", str(policy)]) == 0
    assert "| calibrated |" in capsys.readouterr().out


def test_a_tenant_the_key_may_not_use_fails_every_question_and_the_run(
    env: tuple[Stack, Path],
) -> None:
    stack, tmp = env
    out = tmp / "denied.jsonl"
    code = _run(stack, tmp, out, "--api-key", KEY, "--tenant", "someone-else")
    assert code == 1
    rows = _rows(out)
    assert len(rows) == len(load_dataset(tmp / "dataset").questions)
    for r in rows:
        assert r["error"].startswith("PERMISSION_DENIED: ")
        assert "policies" not in r and r["id"] and "answerable" in r


def test_one_failing_question_is_recorded_and_counted_not_fatal(
    env: tuple[Stack, Path], ingested: tuple[int, Path]
) -> None:
    stack, tmp = env
    data = load_dataset(tmp / "dataset")
    long = Question(
        "too-long", "Where is my parcel? " * 150, False, (), "unanswerable", split="test"
    )
    write_dataset(tmp / "mixed", data.corpus, [*data.questions[:5], long, *data.questions[5:8]])
    out = tmp / "mixed.jsonl"
    key = ("--api-key", KEY, "--tenant", TENANT)
    assert _run(stack, tmp, out, *key, dataset="mixed") == 1  # 1 of 9 > the default 1%
    rows = _rows(out)
    assert [r["id"] for r in rows][5] == "too-long"
    assert rows[5]["error"].startswith("INVALID_ARGUMENT: ")
    assert all("error" not in r and "policies" in r for i, r in enumerate(rows) if i != 5)
    assert _run(stack, tmp, out, *key, "--max-error-rate", "0.2", dataset="mixed") == 0
    # The readers leave the failed question out.
    assert len(calibrate.read_rows(out)) == 8
    assert report.main([str(out), "--split", "all"]) == 0


@pytest.mark.parametrize(
    "extra",
    [
        ["--target", "127.0.0.1:1", "--embedder", "minilm"],
        ["--target", "127.0.0.1:1", "--ingest"],
        ["--ingest", "--retrieval-target", "127.0.0.1:1"],
        ["--target", "127.0.0.1:1", "--api-key", "k", "--api-key-file", "f"],
    ],
)
def test_conflicting_flags_are_usage_errors(tmp_path: Path, extra: list[str]) -> None:
    with pytest.raises(SystemExit) as err:
        cli.main(["eval", "run", str(tmp_path), "--out", str(tmp_path / "o.jsonl"), *extra])
    assert err.value.code == 2


# --- A fake gate over TLS: retries, and decisions that do not measure the gate -----------------


class _FlakyGate(gate_pb2_grpc.GateServiceServicer):
    """Fails each query with ``codes`` in turn, then refuses it with real signals."""

    def __init__(self, codes: list[grpc.StatusCode]) -> None:
        self.codes = codes
        self.calls: Counter[str] = Counter()

    def Evaluate(
        self, request: gate_pb2.EvaluateRequest, context: grpc.ServicerContext
    ) -> gate_pb2.EvaluateResponse:
        n = self.calls[request.query]
        self.calls[request.query] += 1
        if n < len(self.codes):
            context.abort(self.codes[n], "try later")
        if request.query == "arms down":
            return gate_pb2.EvaluateResponse(
                decision=gate_pb2.Decision(
                    outcome=gate_pb2.OUTCOME_REFUSE,
                    reason=gate_pb2.REASON_ARMS_UNAVAILABLE,
                    reason_detail="retrieval: UNAVAILABLE",
                    policy_name="seed000",
                )
            )
        views = [
            CandidateView("d1#0", "d1#p", "d1", "T", "Refunds: 30 days.", 1, 0.6, 9, 0.03, 1, True),
            CandidateView(
                "d2#0", "d2#p", "d2", "T", "Labels cost money.", 1, 0.5, 4, 0.01, 2, False
            ),
        ]
        signals = compute_signals(views, request.query).values
        return gate_pb2.EvaluateResponse(
            decision=gate_pb2.Decision(
                outcome=gate_pb2.OUTCOME_REFUSE,
                reason=gate_pb2.REASON_LOW_CONFIDENCE,
                tier=evidence_pb2.TIER_NO_MATCH,
                confidence=0.2,
                policy_name="calibrated",
                policy_version="v-test",
                signals=[gate_pb2.Signal(name=k, value=v) for k, v in signals.items()],
            )
        )


def _self_signed(tmp: Path) -> tuple[bytes, bytes]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "candor-test")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    return key_pem, cert.public_bytes(serialization.Encoding.PEM)


@pytest.fixture
def flaky_gate(tmp_path: Path) -> Iterator[tuple[_FlakyGate, str, Path]]:
    key_pem, cert_pem = _self_signed(tmp_path)
    (tmp_path / "ca.pem").write_bytes(cert_pem)
    gate = _FlakyGate([grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.RESOURCE_EXHAUSTED])
    server = grpc.server(futures.ThreadPoolExecutor(4))
    gate_pb2_grpc.add_GateServiceServicer_to_server(gate, server)
    port = server.add_secure_port("127.0.0.1:0", grpc.ssl_server_credentials([(key_pem, cert_pem)]))
    server.start()
    try:
        yield gate, f"127.0.0.1:{port}", tmp_path / "ca.pem"
    finally:
        server.stop(0)


def _tiny_dataset(directory: Path) -> Path:
    return write_dataset(
        directory,
        passages()[:2],
        [
            Question("a", "How long do refunds take?", False, (), "near_miss", split="train"),
            Question("b", "arms down", False, (), "topic_absent", split="test"),
        ],
    )


def test_transient_errors_are_retried_over_tls(
    flaky_gate: tuple[_FlakyGate, str, Path], tmp_path: Path
) -> None:
    gate, target, ca = flaky_gate
    dataset = _tiny_dataset(tmp_path / "ds")
    options = remote.Options(target=target, tls_ca=ca, retries=2, backoff=0.01)
    summary = remote.run(dataset, tmp_path / "rows.jsonl", options, progress=False)
    assert gate.calls == Counter({"How long do refunds take?": 3, "arms down": 3})
    a, b = _rows(tmp_path / "rows.jsonl")
    # The deployment's policy takes its own name; the signal-only baselines decide beside it.
    assert a["policies"]["calibrated"] == {
        "outcome": "refuse",
        "confidence": 0.2,
        "reason": "low_confidence",
        "tier": "no_match",
        "evidence": [],
    }
    assert a["policies"]["seed003"]["reason"] != "no_hits"
    assert a["policies"]["seed004"]["evidence"] == []
    # A refusal because retrieval was down says nothing about the gate: a failed question.
    assert b["error"] == "ARMS_UNAVAILABLE: retrieval: UNAVAILABLE"
    assert summary.failed == 1 and summary.errors == Counter({"ARMS_UNAVAILABLE": 1})


def test_retries_give_up_and_record_the_last_code(
    flaky_gate: tuple[_FlakyGate, str, Path], tmp_path: Path
) -> None:
    gate, target, ca = flaky_gate
    dataset = _tiny_dataset(tmp_path / "ds")
    options = remote.Options(target=target, tls=True, tls_ca=ca, retries=1, backoff=0.01)
    summary = remote.run(dataset, tmp_path / "rows.jsonl", options, progress=False)
    rows = _rows(tmp_path / "rows.jsonl")
    assert [r["error"] for r in rows] == ["RESOURCE_EXHAUSTED: try later"] * 2
    assert summary.errors == Counter({"RESOURCE_EXHAUSTED": 2})
    assert gate.calls == Counter({"How long do refunds take?": 2, "arms down": 2})
