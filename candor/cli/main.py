"""The ``candor`` command: serve, ingest, ask, search."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
import time
from pathlib import Path

import grpc

from candor.cli import client
from candor.gate.v1 import gate_pb2
from candor.runtime.logs import configure_logging
from candor.settings import Settings, SettingsError, load_settings

DEFAULT_GATE_TARGET = "127.0.0.1:50052"
SAMPLES = Path(__file__).resolve().parents[2] / "samples" / "helpcentre"
DEMO_ANSWERED = "How long do I have to get a refund for a label I didn't use?"
DEMO_REFUSED = "Who won the 1998 football World Cup?"
log = logging.getLogger("candor.cli")


def _api_key(value: str) -> str:
    # gRPC metadata is printable ASCII: anything else failed as "INTERNAL: Invalid metadata".
    key = value.strip()
    if not key or not all(" " < c < "\x7f" for c in key):
        raise argparse.ArgumentTypeError("an API key is printable ASCII without spaces")
    return key


def _top_k(value: str) -> int:
    n = int(value)
    if not 1 <= n <= 200:
        raise argparse.ArgumentTypeError("must be from 1 to 200")
    return n


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--target", default=DEFAULT_GATE_TARGET, help="service address")
    p.add_argument("--tenant", default="default")
    p.add_argument("--api-key", type=_api_key, default=None, help="sent as x-api-key metadata")


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="candor", description=__doc__)
    sub = ap.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="run the services (all three by default)")
    serve.add_argument("--config", default=None, help="settings YAML (else $CANDOR_CONFIG)")
    serve.add_argument(
        "--service", choices=["all", "retrieval", "gate", "generator"], default="all"
    )
    serve.add_argument(
        "--demo",
        action="store_true",
        help="ingest the sample KB and print an answered and a refused question",
    )
    ingest = sub.add_parser("ingest", help="ingest markdown/text files or a JSONL file")
    ingest.add_argument("path", type=Path)
    ingest.add_argument(
        "--hypothetical-questions",
        action="store_true",
        help="also index LLM-written questions per passage (retrieval.hypothetical must be set)",
    )
    _common(ingest)
    ingest.set_defaults(target="127.0.0.1:50051")
    ask = sub.add_parser("ask", help="ask a question through the gate")
    ask.add_argument("question")
    ask.add_argument(
        "--debug", action="store_true", help="print signals, thresholds, policy version and reason"
    )
    _common(ask)
    search = sub.add_parser("search", help="show the fused retrieval candidates")
    search.add_argument("query")
    search.add_argument("--top-k", type=_top_k, default=10)
    _common(search)
    search.set_defaults(target="127.0.0.1:50051")
    verify = sub.add_parser(
        "verify",
        help="find drift between the dense and keyword stores (stop the server first "
        "when they are the embedded ones; stop writes before --repair: it acts on what it "
        "read, and a write landing meanwhile can be undone)",
    )
    verify.add_argument("--config", default=None)
    verify.add_argument("--repair", action="store_true", help="fix publish-state drift")
    verify.add_argument(
        "--drop-partial",
        action="store_true",
        help="with --repair: delete documents present in only one store (not one the dense "
        "store holds at an older version: re-ingest those)",
    )
    reindex = sub.add_parser(
        "reindex",
        help="re-ingest a source tree: replaces every document "
        "it holds in both stores, repairing any drift for them (documents no longer in the "
        "tree stay: candor delete ID)",
    )
    reindex.add_argument("path", type=Path)
    reindex.add_argument(
        "--hypothetical-questions",
        action="store_true",
        help="regenerate the questions too (without it, a reindex drops them)",
    )
    _common(reindex)
    reindex.set_defaults(target="127.0.0.1:50051")
    delete = sub.add_parser(
        "delete",
        help="delete documents by id from both stores (reindex never removes a document "
        "that left the source tree)",
    )
    delete.add_argument("document_ids", nargs="+", metavar="ID")
    _common(delete)
    delete.set_defaults(target="127.0.0.1:50051")
    ev = sub.add_parser("eval", help="evaluation: prepare a dataset, run it, report (docs/)")
    ev_sub = ev.add_subparsers(dest="eval_command", required=True)
    from evals.datasets.prepare import add_builders

    add_builders(ev_sub.add_parser("prepare", help="build a public dataset in the generic format"))
    for name, text in (
        ("run", "index a dataset and decide every question with every policy"),
        ("report", "metrics, tables and plots from `eval run` rows"),
    ):
        p = ev_sub.add_parser(name, help=text, add_help=False)
        p.add_argument("rest", nargs=argparse.REMAINDER)
    cal = sub.add_parser(
        "calibrate", help="fit the calibrated gate on a train split", add_help=False
    )
    cal.add_argument("rest", nargs=argparse.REMAINDER)
    bench = sub.add_parser("bench", help="benchmarks (see docs/benchmarks.md)")
    bench.add_argument("what", choices=["retrieval", "stack", "overload", "keyword"])
    bench.add_argument("rest", nargs=argparse.REMAINDER)
    return ap


class StartUpStopped(BaseException):
    """SIGTERM arrived before the services were up (not an Exception: nothing may catch it as
    a start-up failure)."""


def _stop_starting(signum: int, frame: object) -> None:
    raise StartUpStopped


async def _serve(args: argparse.Namespace) -> int:
    from candor.cli.stack import start_stack
    from candor.runtime.event_loop import install_exception_handler
    from candor.runtime.server import serve_until_signal
    from candor.secrets import SecretError
    from candor.token import SigningKeyError
    from retrieval_svc.stores.data_dir import DataDirError

    install_exception_handler()
    # Everything serve writes to stderr is a JSON log line: `kubectl logs | jq` reads it all.
    try:
        settings = load_settings(args.config)
    except SettingsError as exc:
        configure_logging()
        log.error("invalid settings", extra={"error": str(exc)})
        return 2
    configure_logging(settings.log_level)
    if args.demo and (args.service != "all" or settings.auth.enabled):
        # It ingests and asks through all three services, without an API key.
        log.error("--demo runs all three services with auth off: drop --service or auth")
        return 2
    started = time.perf_counter()
    # As a container's PID 1, a process without a SIGTERM handler ignores SIGTERM, and the
    # graceful handler comes with serving: a pod deleted while loading models or building its
    # index waited out terminationGracePeriodSeconds for its SIGKILL. Until then SIGTERM stops
    # start-up as an exception would, releasing what was opened.
    previous = signal.signal(signal.SIGTERM, _stop_starting)
    try:
        services = await start_stack(settings, args.service)
    except StartUpStopped:
        log.info("stopped by SIGTERM during start-up")
        return 128 + signal.SIGTERM
    except Exception as exc:
        # Any start-up failure (a port taken, a key file missing, an LLM backend without its
        # model) is one JSON line: a crash-looping pod's log says why in `kubectl logs`.
        said = (SettingsError, DataDirError, SigningKeyError, SecretError, OSError)
        error = str(exc) if isinstance(exc, said) else f"{type(exc).__name__}: {exc}"
        log.debug("cannot start", exc_info=exc)  # the traceback, for whoever asks for it
        log.error("cannot start", extra={"error": error})
        return 2
    finally:
        signal.signal(signal.SIGTERM, previous)
    if args.demo:
        # `make run` is read by a person: the addresses in plain words, beside the JSON logs.
        for svc in services:
            print(f"candor: {svc.spec.name} on {svc.address}", file=sys.stderr)
        try:
            await asyncio.to_thread(_demo, services, started)
        except grpc.RpcError as exc:
            # The stack is up; the demo's calls failed. Say so and keep serving.
            print(f"candor: the demo failed: {exc.code().name}: {exc.details()}", file=sys.stderr)  # type: ignore[attr-defined]
    await serve_until_signal(services)
    return 0


def _demo(services: list, started: float) -> None:  # type: ignore[type-arg]
    by_name = {svc.spec.name.rsplit(".", 1)[-1]: svc.address for svc in services}
    with grpc.insecure_channel(by_name["RetrievalService"]) as ch:
        report = client.ingest(ch, SAMPLES, "default", None, progress=client.print_progress)
    print(
        f"candor: ingested {client.n_documents(report.written)} ({report.chunks} chunks), "
        f"{report.failed} failed",
        file=sys.stderr,
    )
    with grpc.insecure_channel(by_name["GateService"]) as ch:
        for question in (DEMO_ANSWERED, DEMO_REFUSED):
            result = client.ask(ch, question, "default", None)
            print(f"\n> {question}\n{client.format_ask(result, debug=False)}", flush=True)
    gate = by_name["GateService"]
    # The hint must reach this stack's gate, wherever its port was moved.
    target = "" if gate == DEFAULT_GATE_TARGET else f" --target {gate}"
    print(
        f"\ncandor: ready in {time.perf_counter() - started:.1f}s; try:\n"
        f'  .venv/bin/candor ask "How do I set up two-factor authentication?" --debug{target}\n'
        "Ctrl-C to stop.",
        flush=True,
    )


def _verify(args: argparse.Namespace) -> int:
    from retrieval_svc.stores.data_dir import DataDirError, lock_embedded, opening_data_dir

    settings = load_settings(args.config)
    data_dir = Path(settings.retrieval.data_dir)
    embedded = (settings.retrieval.dense_backend, settings.retrieval.keyword_backend) != (
        "qdrant",
        "opensearch",
    )
    # Taking the lock creates the directory, and checking stores made for the check reported
    # an empty index as "0 document(s) drifted": a run from the wrong directory must fail.
    if embedded and not data_dir.is_dir():
        print(
            f"candor: no data directory at {data_dir.resolve()} (data_dir): "
            "nothing to verify; pass the service's --config",
            file=sys.stderr,
        )
        return 2
    try:
        with opening_data_dir(settings.retrieval):
            lock = lock_embedded(settings.retrieval)
        code = 2
        try:
            code = _verify_stores(args, settings)
            return code
        finally:
            if lock is not None:
                # Only a verify that found the stores in step clears an unclean run's mark.
                lock.release(clean=code == 0)
    except DataDirError as exc:
        print(f"candor: {exc}", file=sys.stderr)
        return 2


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0] if lines else ''}"


def _verify_stores(args: argparse.Namespace, settings: Settings) -> int:
    from retrieval_svc.embed.minilm import MiniLMEmbedder
    from retrieval_svc.knowledge_base import collection_dim
    from retrieval_svc.reconcile import find_drift, repair
    from retrieval_svc.stores.base import StoreMissing, StoreUnlistable
    from retrieval_svc.stores.data_dir import check_start_space, opening_data_dir
    from retrieval_svc.stores.deferred import unreachable
    from retrieval_svc.stores.factory import open_dense, open_keyword

    try:
        # Opening Qdrant Edge writes; on a full disk it would die by SIGBUS.
        with opening_data_dir(settings.retrieval):
            check_start_space(settings.retrieval)
            # The size the collection was built with (recorded beside it), not the default
            # embedder's: a collection built by Cohere or the multilingual model has others.
            dim = collection_dim(Path(settings.retrieval.data_dir)) or MiniLMEmbedder.dim
            dense = open_dense(settings.retrieval, dim, create=False)
    except StoreMissing as exc:
        print(f"candor: {exc}: nothing to verify; pass the service's --config", file=sys.stderr)
        return 2
    except Exception as exc:
        if not unreachable(exc):
            raise
        print(f"candor: cannot reach the dense store: {_first_line(exc)}", file=sys.stderr)
        return 2
    try:
        with opening_data_dir(settings.retrieval):
            keyword = open_keyword(settings.retrieval, create=False)
    except BaseException as exc:
        dense.close()
        if isinstance(exc, Exception) and unreachable(exc):
            print(f"candor: cannot reach the keyword store: {_first_line(exc)}", file=sys.stderr)
            return 2
        if isinstance(exc, StoreUnlistable):
            print(f"candor: {exc}", file=sys.stderr)
            return 2
        if not isinstance(exc, StoreMissing):
            raise
        print(f"candor: {exc}: nothing to verify; pass the service's --config", file=sys.stderr)
        return 2
    try:
        try:
            drifts = find_drift(dense.inventory(), keyword.inventory())
        except StoreUnlistable as exc:
            print(f"candor: {exc}", file=sys.stderr)
            return 2
        for d in drifts:
            print(f"{d.kind:<16} tenant={d.tenant} document={d.document_id}: {d.detail}")
        print(f"{len(drifts)} document(s) drifted")
        if args.repair and drifts:
            left = repair(drifts, dense, keyword, drop_partial=args.drop_partial)
            print(
                f"repaired {len(drifts) - len(left)}; {len(left)} need re-ingesting "
                "(candor reindex PATH)"
            )
            return 1 if left else 0
        return 1 if drifts else 0
    finally:
        dense.close()
        keyword.close()


def _delegate(argv: list[str]) -> int | None:
    """Commands whose own parsers take every argument (including --help)."""
    if argv[:2] == ["eval", "run"]:
        from evals import harness

        return harness.main(argv[2:])
    if argv[:2] == ["eval", "report"]:
        from evals import report as eval_report

        return eval_report.main(argv[2:])
    if argv[:1] == ["calibrate"]:
        from evals import calibrate

        return calibrate.main(argv[1:])
    if argv[:1] == ["bench"] and len(argv) > 1:
        if argv[1] == "stack":
            from evals import bench_stack

            return bench_stack.main(argv[2:])
        if argv[1] == "retrieval":
            from evals import bench_retrieval

            return bench_retrieval.main(argv[2:])
        if argv[1] == "overload":
            from evals import bench_overload

            return bench_overload.main(argv[2:])
        if argv[1] == "keyword":
            from evals import bench_keyword

            return bench_keyword.main(argv[2:])
    return None


def main(argv: list[str] | None = None) -> int:
    from evals.datasets.format import DatasetFormatError

    try:
        return _main(argv)
    except BrokenPipeError:
        # `candor search ... | head` closed our stdout: not an error of ours.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except KeyboardInterrupt:
        print("\ncandor: interrupted", file=sys.stderr)
        return 130
    except DatasetFormatError as exc:
        # Every problem is already "path:line: message"; a traceback would bury them.
        print(f"candor: {exc}", file=sys.stderr)
        return 2
    except SettingsError as exc:
        # Any command that reads settings (verify, eval run, bench): the key is named.
        print(f"candor: invalid settings: {exc}", file=sys.stderr)
        return 2


def _main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    delegated = _delegate(argv)
    if delegated is not None:
        return delegated
    args = parser().parse_args(argv)
    if args.command == "serve":
        try:
            return asyncio.run(_serve(args))
        except StartUpStopped:
            # SIGTERM while start-up awaited: raised in the event loop's wait, it left _serve
            # from outside (asyncio.run cancelled it, which released what it had opened).
            log.info("stopped by SIGTERM during start-up")
            return 128 + signal.SIGTERM
    if args.command == "eval":
        return int(args.run_builder(args))
    if args.command == "verify":
        if args.drop_partial and not args.repair:
            print("candor: --drop-partial works with --repair", file=sys.stderr)
            return 2
        return _verify(args)
    if args.command in ("ingest", "reindex") and not args.path.exists():
        # A mistyped path ingested nothing and exited 0.
        print(f"candor: {args.path}: no such file or directory", file=sys.stderr)
        return 2
    try:
        with grpc.insecure_channel(args.target) as channel:
            if args.command in ("ingest", "reindex"):
                report = client.ingest(
                    channel,
                    args.path,
                    args.tenant,
                    args.api_key,
                    progress=client.print_progress,
                    hypothetical_questions=args.hypothetical_questions,
                )
                print(
                    f"ingested {client.n_documents(report.written)} ({report.chunks} chunks), "
                    f"{report.failed} failed, {report.skipped} files skipped"
                )
                return 1 if report.failed else 0
            if args.command == "delete":
                deleted, failed = client.delete(
                    channel, args.document_ids, args.tenant, args.api_key
                )
                print(f"deleted {deleted} of {len(args.document_ids)} documents, {failed} failed")
                return 1 if failed else 0
            if args.command == "ask":
                result = client.ask(channel, args.question, args.tenant, args.api_key)
                print(client.format_ask(result, args.debug))
                if result.decision.reason == gate_pb2.REASON_ARMS_UNAVAILABLE:
                    # A refusal, but from an outage: scripts must be able to tell.
                    print("candor: retrieval is unavailable (both arms)", file=sys.stderr)
                    return 1
                return 1 if result.error else 0
            reply = client.search(channel, args.query, args.tenant, args.api_key, args.top_k)
            print(client.format_search(reply))
            return 0
    except grpc.RpcError as exc:
        print(f"candor: {exc.code().name}: {exc.details()}", file=sys.stderr)  # type: ignore[attr-defined]
        if exc.code() == grpc.StatusCode.UNIMPLEMENTED:  # type: ignore[attr-defined]
            print(
                f"candor: is {args.target} the right service? retrieval listens on 50051, the "
                "gate on 50052 (ask), the generator on 50053 by default",
                file=sys.stderr,
            )
        return 1


if __name__ == "__main__":
    sys.exit(main())
