"""``candor eval run --target``: run a dataset against a running deployment's gate.

    candor eval run DATASET --out ROWS.jsonl --target HOST:PORT [--api-key KEY | --api-key-file F]
        [--tenant T] [--ingest --retrieval-target HOST:PORT] [--tls [--tls-ca PEM]]

Each question is sent to the gate's ``Evaluate`` as is; the rows have the in-process schema
(``evals.harness``), so ``candor eval report`` and ``candor calibrate`` read them unchanged. The
deployment returns only its own decision and the evidence it admitted, so a row holds:

- ``signals`` and ``missing_facets`` as the deployment computed them;
- ``policies``: the deployment's decision under its ``policy_name``, ``always_answer``,
  ``top1_cosine``, and the baselines that read only signals (``harness.RESCORABLE``);
- ``ranked``: ``{"hybrid": admitted evidence}`` only (no dense/keyword rankings).

A question whose call fails gets ``"error": "<code>: <details>"`` instead of those fields; the
readers skip such rows, and the command exits 1 when more than ``--max-error-rate`` failed.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import threading
import time
from collections import Counter
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from candor.cli import client
from candor.common.v1 import evidence_pb2
from candor.gate.v1 import gate_pb2, gate_pb2_grpc
from candor.retrieval.v1 import retrieval_pb2
from evals.datasets.format import CORPUS_FILE, Dataset, Question, check_tenants, load_dataset
from evals.harness import BASELINES, RESCORABLE, TENANT, config_columns, rescore, row_head
from gate_svc.policy import PolicyConfig, parse_policy

#: Transient: the deployment is restarting, overloaded or rate-limiting; worth another try.
RETRYABLE = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.RESOURCE_EXHAUSTED})
# Stands in for candidates the deployment retrieved but did not return (it refused), so the
# signal-only baselines see "there were hits" instead of deciding no_hits; never in evidence.
_UNSEEN = "\x00unseen"


@dataclass(frozen=True)
class Options:
    """Where and how to reach the deployment."""

    target: str
    tenant: str = TENANT
    api_key: str | None = None
    tls: bool = False
    tls_ca: Path | None = None
    ingest: bool = False
    retrieval_target: str | None = None
    concurrency: int = 8
    timeout: float = 30.0
    retries: int = 4
    backoff: float = 0.5


@dataclass
class Summary:
    """What a run did; ``errors`` counts failed questions by status code."""

    questions: int = 0
    errors: Counter[str] = field(default_factory=Counter)
    policy_versions: Counter[str] = field(default_factory=Counter)
    degraded: int = 0

    @property
    def failed(self) -> int:
        return sum(self.errors.values())


def channel(target: str, options: Options) -> grpc.Channel:
    if options.tls or options.tls_ca is not None:
        roots = options.tls_ca.read_bytes() if options.tls_ca is not None else None
        return grpc.secure_channel(target, grpc.ssl_channel_credentials(roots))
    return grpc.insecure_channel(target)


def ingest(dataset: Dataset, options: Options, progress: bool) -> None:
    """Upsert the corpus through the retrieval service, each passage under its own tenant."""
    assert dataset.path is not None and options.retrieval_target is not None
    # read_documents is what `candor ingest corpus.jsonl` sends (it keeps source_kind, question).
    docs = list(client.read_documents(dataset.path / CORPUS_FILE))
    tenant_of = {p.id: p.tenant or options.tenant for p in dataset.corpus}
    by_tenant: dict[str, list[retrieval_pb2.Document]] = {}
    for doc in docs:
        by_tenant.setdefault(tenant_of[doc.document_id], []).append(doc)
    show = client.print_progress if progress else None
    with channel(options.retrieval_target, options) as ch:
        for tenant, group in by_tenant.items():
            try:
                report = client.upsert(ch, group, tenant, options.api_key, progress=show)
            except grpc.RpcError as exc:
                raise SystemExit(f"ingest into {tenant!r} failed: {_describe(exc)}") from exc
            if report.failed:
                raise SystemExit(f"ingest into {tenant!r}: {report.failed} document(s) failed")


def _describe(exc: grpc.RpcError) -> str:
    return f"{exc.code().name}: {exc.details()}"  # type: ignore[attr-defined]


class Unusable(Exception):
    """A decision that measures nothing about the gate (it could not reach retrieval)."""

    def __init__(self, code: str, detail: str) -> None:
        super().__init__(f"{code}: {detail}")
        self.code = code


def _lower(name: str, prefix: str) -> str:
    return name.removeprefix(prefix).lower()


def evaluate(
    stub: gate_pb2_grpc.GateServiceStub, query: str, options: Options, tenant: str | None = None
) -> gate_pb2.Decision:
    """One Evaluate call (in ``tenant``, else the run's), retried with jittered exponential
    backoff on transient codes."""
    for attempt in range(options.retries + 1):
        try:
            reply: gate_pb2.EvaluateResponse = stub.Evaluate(
                gate_pb2.EvaluateRequest(tenant=tenant or options.tenant, query=query),
                metadata=client.metadata(options.api_key),
                timeout=options.timeout,
            )
            return reply.decision
        except grpc.RpcError as exc:
            if exc.code() not in RETRYABLE or attempt == options.retries:  # type: ignore[attr-defined]
                raise
            time.sleep(min(8.0, options.backoff * 2**attempt) * random.uniform(0.5, 1.0))
    raise AssertionError("unreachable")


@dataclass(frozen=True)
class Extra:
    """A config decided from the saved signals; ``alias`` is its name if the deployment's
    decision already holds ``name`` (``None``: then leave it out)."""

    name: str
    config: PolicyConfig
    alias: str | None = None


def row_for(q: Question, d: gate_pb2.Decision, extra: Sequence[Extra] = ()) -> dict[str, Any]:
    """The in-process row schema from the deployment's decision; ``extra`` are rescored."""
    if d.reason == gate_pb2.REASON_ARMS_UNAVAILABLE:
        # The gate refuses when retrieval is down; counting that as a refusal would flatter it.
        raise Unusable("ARMS_UNAVAILABLE", d.reason_detail)
    signals = {s.name: s.value for s in d.signals}
    hybrid = list(dict.fromkeys(e.document_id for e in d.evidence))
    evidence = sorted(set(hybrid))
    hits = signals.get("hits", 0.0) > 0
    row = row_head(q) | {
        "signals": signals,
        "missing_facets": list(d.missing_facets),
        "ranked": {"hybrid": hybrid},
        "policies": {
            d.policy_name: {
                "outcome": _lower(gate_pb2.Outcome.Name(d.outcome), "OUTCOME_"),
                "confidence": d.confidence,
                "reason": _lower(gate_pb2.Reason.Name(d.reason), "REASON_"),
                "tier": _lower(evidence_pb2.Tier.Name(d.tier), "TIER_"),
                "evidence": evidence,
            },
            # The in-process always-answer passes whenever retrieval found anything; only the
            # evidence the deployment admitted is known here, so a refused question has none.
            "always_answer": {
                "outcome": "pass" if hits else "refuse",
                "confidence": 1.0,
                "reason": "passed" if hits else "no_hits",
                "tier": "uncertain" if hits else "no_match",
                "evidence": evidence,
            },
            "top1_cosine": {"confidence": signals.get("top_cosine", 0.0)},
        },
        "deployment": {
            "policy_name": d.policy_name,
            "policy_version": d.policy_version,
            "degraded": d.degraded,
        },
    }
    view: dict[str, Any] = {
        "signals": signals,
        "missing_facets": row["missing_facets"],
        "ranked": {"hybrid": hybrid or ([_UNSEEN] if hits else [])},
        "policies": {},
    }
    for e in extra:
        name = e.alias if e.name in row["policies"] else e.name
        if name is not None:
            rescore([view], e.config, name)
            decided = view["policies"][name]
            decided["evidence"] = [doc for doc in decided["evidence"] if doc != _UNSEEN]
            row["policies"][name] = decided
    return row


def extra_policies(policy_files: Sequence[Path] = ()) -> list[Extra]:
    """The signal-only baselines, then ``--policy`` configs named as the in-process run does."""
    out = []
    for name, text in BASELINES.items():
        config = parse_policy(text)
        if config.policy in RESCORABLE:
            out.append(Extra(name, config))
    for label, config in config_columns(policy_files).items():
        if config.policy not in RESCORABLE:
            raise SystemExit(
                f"{label}: {config.policy} needs per-chunk scores the deployment does not return; "
                "evaluate it in-process (without --target)"
            )
        out.append(Extra(label, config))
    return out


def run(
    dataset: Path,
    out: Path,
    options: Options,
    policy_files: Sequence[Path] = (),
    limit: int = 0,
    progress: bool = True,
) -> Summary:
    """Optionally ingest the corpus, evaluate every question remotely, write rows to ``out``."""
    data = load_dataset(dataset)
    check_tenants(data, options.tenant)
    questions = list(data.questions[:limit] if limit else data.questions)
    extra = extra_policies(policy_files)
    if options.ingest:
        ingest(data, options, progress)
    summary = Summary(questions=len(questions))
    lock = threading.Lock()
    out.parent.mkdir(parents=True, exist_ok=True)
    with channel(options.target, options) as ch:
        stub = gate_pb2_grpc.GateServiceStub(ch)

        def one(q: Question) -> dict[str, Any]:
            try:
                row = row_for(q, evaluate(stub, q.question, options, q.tenant), extra)
            except grpc.RpcError as exc:
                with lock:
                    summary.errors[exc.code().name] += 1  # type: ignore[attr-defined]
                return row_head(q) | {"error": _describe(exc)}
            except Unusable as exc:
                with lock:
                    summary.errors[exc.code] += 1
                return row_head(q) | {"error": str(exc)}
            with lock:
                summary.policy_versions[row["deployment"]["policy_version"]] += 1
                summary.degraded += row["deployment"]["degraded"]
            return row

        # The pool bounds the calls in flight; map yields in question order.
        with (
            ThreadPoolExecutor(max(1, options.concurrency)) as pool,
            out.open("w", encoding="utf-8") as f,
        ):
            for i, row in enumerate(pool.map(one, questions), start=1):
                f.write(json.dumps(row) + "\n")
                if progress and (i % 100 == 0 or i == len(questions)):
                    client.status_line(f"  questions {i}/{len(questions)}", i == len(questions))
    return summary


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """The remote-only flags of ``candor eval run`` (``--target`` itself is the caller's)."""
    g = ap.add_argument_group("against a running deployment (with --target)")
    keys = g.add_mutually_exclusive_group()
    keys.add_argument("--api-key", default=None, help="sent as x-api-key metadata")
    keys.add_argument("--api-key-file", type=Path, default=None, help="file holding the key")
    g.add_argument("--tenant", default=None, help=f"tenant to evaluate (default {TENANT!r})")
    g.add_argument(
        "--ingest",
        action="store_true",
        help="upsert the dataset corpus first (needs --retrieval-target)",
    )
    g.add_argument("--retrieval-target", default=None, help="retrieval service HOST:PORT")
    g.add_argument("--tls", action="store_true", help="TLS with the system's root certificates")
    g.add_argument("--tls-ca", type=Path, default=None, help="PEM roots to trust (implies --tls)")
    g.add_argument("--concurrency", type=int, default=8, help="calls in flight (default 8)")
    g.add_argument("--timeout", type=float, default=30.0, help="per-call deadline, seconds")
    g.add_argument(
        "--retries", type=int, default=4, help="retries on UNAVAILABLE/RESOURCE_EXHAUSTED"
    )
    g.add_argument(
        "--max-error-rate",
        type=float,
        default=0.01,
        help="exit 1 when more than this share of questions failed (default 0.01)",
    )


_REMOTE_ONLY = (
    "api_key",
    "api_key_file",
    "tenant",
    "ingest",
    "retrieval_target",
    "tls",
    "tls_ca",
)


def main(ap: argparse.ArgumentParser, args: argparse.Namespace) -> int | None:
    """Run from parsed ``candor eval run`` arguments; ``None`` without ``--target`` (in-process)."""
    if not args.target:
        given = [n for n in _REMOTE_ONLY if getattr(args, n) not in (None, False)]
        if given:
            ap.error(f"--{given[0].replace('_', '-')} needs --target")
        return None
    if args.ingest and not args.retrieval_target:
        ap.error("--ingest needs --retrieval-target (the gate does not proxy ingestion)")
    if args.concurrency < 1 or args.retries < 0 or args.timeout <= 0:
        ap.error("--concurrency must be >= 1, --retries >= 0 and --timeout > 0")
    key = args.api_key
    if args.api_key_file is not None:
        key = args.api_key_file.read_text(encoding="utf-8").strip()
    options = Options(
        target=args.target,
        tenant=args.tenant or TENANT,
        api_key=key or None,
        tls=args.tls,
        tls_ca=args.tls_ca,
        ingest=args.ingest,
        retrieval_target=args.retrieval_target,
        concurrency=args.concurrency,
        timeout=args.timeout,
        retries=args.retries,
    )
    s = run(args.dataset, args.out, options, args.policy, args.limit)
    versions = ", ".join(f"{v} ({n})" for v, n in s.policy_versions.most_common()) or "none"
    print(
        f"candor: {s.questions} questions against {options.target}, policy version(s) {versions}; "
        f"{s.failed} failed" + (f" ({dict(s.errors)})" if s.failed else ""),
        file=sys.stderr,
    )
    if s.degraded:
        print(
            f"candor: {s.degraded} decision(s) were degraded (a retrieval arm down, or a "
            "reading or rerank the policy weighs missing)",
            file=sys.stderr,
        )
    if len(s.policy_versions) > 1:
        print("candor: the policy changed during the run; rows mix versions", file=sys.stderr)
    if s.questions and s.failed / s.questions > args.max_error_rate:
        print(
            f"candor: {s.failed}/{s.questions} questions failed "
            f"(more than --max-error-rate {args.max_error_rate:g})",
            file=sys.stderr,
        )
        return 1
    return 0
