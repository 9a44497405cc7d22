"""Run a labelled dataset through retrieval and every gate policy; save one row per question.

    candor eval run DATASET_DIR --out RESULTS.jsonl [--limit N]

DATASET_DIR holds ``corpus.jsonl`` and ``questions.jsonl`` (docs/datasets.md). The corpus is
indexed into fresh embedded stores (the same code the retrieval service runs); each question is
retrieved once in hybrid mode (plus dense-only and keyword-only for recall), every signal is
computed once, and every policy decides on the same candidates. ``calibrate`` and ``report``
read the rows, so a dataset is retrieved once however many policies are compared.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from candor.cli.client import status_line
from candor.settings import Settings
from evals.answers import AnswerCheck, check
from evals.datasets.format import Dataset, Question, check_tenants, load_dataset
from gate_svc.policy import (
    DEFAULT_POLICY_PATH,
    Decision,
    PolicyConfig,
    decide,
    parse_policy,
    reader_mismatch,
    uses_reader,
)
from gate_svc.reader import EvidenceReader, reader_file, shared_reader
from gate_svc.reader_files import model_digest
from gate_svc.reader_view import ReaderView, reader_texts
from gate_svc.signals import CandidateView, compute_signals
from generator_svc.llm.base import EvidenceItem, LLMBackend
from retrieval_svc.embed.factory import open_embedders
from retrieval_svc.ingest import SourceDocument
from retrieval_svc.knowledge_base import KnowledgeBase, RetrievalResult, RetrieveParams
from retrieval_svc.stores.base import best_first
from retrieval_svc.stores.edge import EdgeDenseStore
from retrieval_svc.stores.tantivy_store import TantivyKeywordStore

TENANT = "eval"

#: The baselines every report carries, as threshold configs (the calibrated one is added by
#: ``candor calibrate``). ``top1_cosine`` is a plain score floor, what peers offer.
BASELINES: dict[str, str] = {
    "always_answer": 'version: "baseline-always"\npolicy: seed000\n'
    "seed000: {chunk_floor: 0, answer_gate: 0, max_distance: 2}\n",
    "seed000": 'version: "baseline-seed000"\npolicy: seed000\n',
    "seed001": 'version: "baseline-seed001"\npolicy: seed001\n',
    "seed003": 'version: "baseline-seed003"\npolicy: seed003\n',
    "seed004": 'version: "baseline-seed004"\npolicy: seed004\n',
}


def load_corpus(dataset: Dataset) -> list[SourceDocument]:
    return [SourceDocument(p.tenant or TENANT, p.id, p.title, p.text, 1) for p in dataset.corpus]


#: The baselines' column names: every other column is a threshold config, named by config_label.
BASELINE_COLUMNS = frozenset({*BASELINES, "seed001_refit", "top1_cosine"})

UNSPLIT = "all"
"""The split written for a question of an unsplit dataset (no ``split`` field)."""


def config_label(config: PolicyConfig) -> str:
    """A threshold config's column name: ``policy@version``. Versions are immutable, so two
    configs never share a column, and the label says which config the numbers are for."""
    return f"{config.policy}@{config.version}"


def config_columns(
    paths: Sequence[Path], taken: Mapping[str, PolicyConfig] | None = None
) -> dict[str, PolicyConfig]:
    """``paths``' configs by label. A label already in ``taken`` or given twice is the same
    config (versions are immutable) and kept once; two files with one version but different
    content are an error, not a silent overwrite."""
    out: dict[str, PolicyConfig] = {}
    for path in paths:
        try:
            config = parse_policy(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError) as exc:  # PolicyError is a ValueError
            raise SystemExit(f"{path}: not a usable threshold config: {exc}") from exc
        label = config_label(config)
        seen = out.get(label) or (taken or {}).get(label)
        if seen is not None and seen != config:
            raise SystemExit(f"{path}: version {config.version!r} names another config already")
        out.setdefault(label, config)
    return out


#: Policies that read only the signals (not per-chunk scores), so a saved row can be re-decided.
RESCORABLE = frozenset({"seed001", "seed003", "seed004", "calibrated"})


def row_head(q: Question) -> dict[str, Any]:
    """The question's own fields, first in every row (in-process and ``--target``)."""
    return {
        "id": q.id,
        "question": q.question,
        "answerable": q.answerable,
        "kind": q.kind,
        "split": q.split or UNSPLIT,
        "gold_ids": list(q.gold_ids),
    }


def decision_entry(d: Decision) -> dict[str, Any]:
    """One policy's decision as a row stores it."""
    return {
        "outcome": d.outcome,
        "confidence": d.confidence,
        "reason": d.reason,
        "tier": d.tier,
        "evidence": sorted({e.document_id for e in d.evidence}),
    }


def rescore(rows: Sequence[dict[str, Any]], config: PolicyConfig, name: str) -> None:
    """Add ``name``'s decision to each row from its saved signals, without re-retrieving.

    The candidates are rebuilt from the saved hybrid ranking (document ids only), which is all
    these policies read besides the signals; the decision comes from the policy code itself.
    """
    from evals.calibrate import reader_model
    from gate_svc.policy import POLICIES
    from gate_svc.signals import Signals

    if config.policy not in RESCORABLE:
        raise SystemExit(f"{config.policy} needs per-chunk scores: use `candor eval run --policy`")
    # Another reader's probabilities under this config's coefficients would report numbers no
    # gate can produce: the gate refuses that pairing, so the report does too.
    scored_by = reader_model(rows)
    if scored_by and (why := reader_mismatch(config, scored_by, "these rows were scored by")):
        raise SystemExit(f"{name} ({config.version}): {why}")
    for row in rows:
        candidates = [
            CandidateView(f"{doc}#0", f"{doc}#p", doc, "", "", 1, None, None, 0.0, i, False)
            for i, doc in enumerate(row["ranked"]["hybrid"], start=1)
        ]
        signals = Signals(dict(row["signals"]), tuple(row.get("missing_facets", ())), "")
        d = POLICIES[config.policy](candidates, signals, config, None)
        row["policies"][name] = decision_entry(d)


def _views(result: RetrievalResult) -> list[CandidateView]:
    return [
        CandidateView(
            chunk_id=c.chunk.chunk_id,
            parent_id=c.chunk.parent_id,
            document_id=c.chunk.document_id,
            title=c.chunk.title,
            text=c.chunk.text,
            source_kind=c.chunk.source_kind,
            cosine=c.dense.score if c.dense else None,
            bm25=c.keyword.score if c.keyword else None,
            fused_score=c.fused_score,
            fused_rank=c.fused_rank,
            in_both=c.in_both,
        )
        for c in result.candidates
    ]


def _ranked_documents(result: RetrievalResult, arm: str) -> list[str]:
    hits = next(a.hits for a in result.arms if a.arm == arm)
    seen: dict[str, None] = {}
    for h in best_first(hits):
        seen.setdefault(h.chunk.document_id, None)
    return list(seen)


def evaluate_row(
    q: Question,
    candidates: Sequence[CandidateView],
    policies: dict[str, PolicyConfig],
    recall: dict[str, list[str]],
    answer: AnswerCheck | None = None,
    reader: ReaderView | None = None,
) -> dict[str, Any]:
    """One question's signals and every policy's decision, as a JSON-ready row."""
    signals = compute_signals(candidates, q.question)
    if reader is not None:
        signals.values.update(reader.signal_values())
    row: dict[str, Any] = row_head(q) | {
        "signals": signals.values,
        "missing_facets": list(signals.missing_facets),
        "ranked": recall,
        "policies": {},
    }
    for name, config in policies.items():
        # As the gate decides: with the config's override for the question's tenant, if any.
        tenant_config = config.for_tenant(q.tenant or TENANT)
        row["policies"][name] = decision_entry(
            decide(candidates, tenant_config, q.question, reader=reader)
        )
    if reader is not None:
        row["reader_scores"] = list(reader.scores)
    # "Always answer" has no opinion: one constant score, so its AUROC is 0.5 by construction.
    if "always_answer" in row["policies"]:
        row["policies"]["always_answer"]["confidence"] = 1.0
    row["policies"]["top1_cosine"] = {"confidence": signals.values["top_cosine"]}
    if answer is not None:
        row["generated"] = {"text": answer.text, "correct": answer.correct}
    return row


async def _answer(
    backend: LLMBackend | None, q: Question, views: Sequence[CandidateView], max_evidence: int
) -> AnswerCheck | None:
    """The generator's answer from the evidence a pass would admit, for answerable questions
    with a reference; the same evidence for every policy, so accuracy compares gates only."""
    if backend is None or not q.answerable or not q.answer:
        return None
    evidence = [EvidenceItem(v.chunk_id, v.title, v.text) for v in views[:max_evidence]]
    return await check(backend, q.question, q.answer, evidence)


async def _run(
    questions: Sequence[Question],
    kb: KnowledgeBase,
    policies: dict[str, PolicyConfig],
    out: Path,
    progress: bool,
    backend: LLMBackend | None = None,
    max_evidence: int = 5,
    reader: tuple[EvidenceReader, int] | None = None,
    keep_top_text: bool = False,
) -> None:
    with out.open("w", encoding="utf-8") as f:
        for i, q in enumerate(questions, start=1):
            params = RetrieveParams(tenant=q.tenant or TENANT, query=q.question)
            result = await kb.retrieve(params, 10.0)
            recall = {
                "hybrid": list(dict.fromkeys(c.chunk.document_id for c in result.candidates)),
                "dense": _ranked_documents(result, "dense"),
                "keyword": _ranked_documents(result, "keyword"),
            }
            views = _views(result)
            answer = await _answer(backend, q, views, max_evidence)
            read = None
            if reader is not None and views:
                model, top_k = reader
                read = ReaderView(tuple(model.score(q.question, reader_texts(views, top_k))))
            row = evaluate_row(q, views, policies, recall, answer, read)
            if reader is not None:
                row["reader_model"] = reader[0].digest
            if keep_top_text and views:
                # What a reader reads of the top candidate, for training one on retrieval's
                # own output (evals.reader_data.retrieval_pairs).
                row["top_text"] = reader_texts(views, 1)[0]
            f.write(json.dumps(row) + "\n")
            if progress and (i % 100 == 0 or i == len(questions)):
                status_line(f"  questions {i}/{len(questions)}", i == len(questions))


def run(
    dataset: Path,
    out: Path,
    policy_files: Sequence[Path] = (),
    limit: int = 0,
    embedder: str = "minilm",
    progress: bool = True,
    answers: bool = True,
    keep_top_text: bool = False,
    read: bool = True,
    reader: str = "",
) -> Path:
    """Index the corpus, decide every question with every policy, write rows to ``out``.

    With ``answers``, the configured generator (``generator.backend``, extractive by default)
    also answers each answerable question that has a reference answer. Without ``read`` the
    evidence reader stays off whatever ``gate.reader.enabled`` says (rows without its signal).
    ``reader`` names a bundled reader (``gate.reader.model``) over the settings' choice.
    """
    from candor.settings import load_settings

    data = load_dataset(dataset)
    check_tenants(data, TENANT)
    questions = list(data.questions[:limit] if limit else data.questions)
    out.parent.mkdir(parents=True, exist_ok=True)
    corpus = load_corpus(data)
    policies = {name: parse_policy(text) for name, text in BASELINES.items()}
    env = {**os.environ, "CANDOR_RETRIEVAL__EMBEDDER": embedder}
    if reader:
        env["CANDOR_GATE__READER__MODEL"] = reader
    settings = load_settings(env=env)
    shipped = _default_column(settings, read)
    policies |= shipped | config_columns(policy_files, taken=shipped)
    scorer = _reader(settings, policies) if read else None
    docs_embedder, query_embedder = open_embedders(settings.retrieval)
    with tempfile.TemporaryDirectory() as tmp:
        kb = KnowledgeBase(
            docs_embedder,
            EdgeDenseStore(Path(tmp) / "dense", docs_embedder.dim),
            TantivyKeywordStore(Path(tmp) / "keyword"),
            settings.retrieval.chunk_tokens,
            settings.retrieval.chunk_overlap_tokens,
            query_embedder=query_embedder,
        )
        start = time.perf_counter()
        for i in range(0, len(corpus), 256):
            results = kb.upsert(corpus[i : i + 256])
            failed = [r for r in results if r.outcome != "written"]
            if failed:
                raise SystemExit(f"indexing failed: {failed[0]}")
            done = min(i + 256, len(corpus))
            if progress and done < len(corpus):
                status_line(f"  index {done}/{len(corpus)} passages", False)
        if progress:
            took = time.perf_counter() - start
            status_line(f"  index {len(corpus)}/{len(corpus)} passages ({took:.0f} s)", True)
        backend = _generator(settings) if answers else None
        asyncio.run(
            _run(
                questions,
                kb,
                policies,
                out,
                progress,
                backend,
                reader=scorer,
                keep_top_text=keep_top_text,
            )
        )
        kb.close()
    return out


def _default_column(settings: Settings, read: bool) -> dict[str, PolicyConfig]:
    """The shipped default, which every run reports beside the configs it is given, unless
    it weighs a reader this run does not read with (the gate would refuse that pairing)."""
    config = parse_policy(DEFAULT_POLICY_PATH.read_text())
    r = settings.gate.reader
    if uses_reader(config) and read and r.enabled:
        try:
            digest = model_digest(reader_file(r.model, r.model_path))
        except ValueError:
            digest = ""
        if reader_mismatch(config, digest, "this run reads with"):
            print(
                f"candor: the shipped default ({config.version}) is left out: it was fitted "
                "on another reader than this run's",
                file=sys.stderr,
            )
            return {}
    return {config_label(config): config}


def _reader(
    settings: Settings, policies: dict[str, PolicyConfig]
) -> tuple[EvidenceReader, int] | None:
    """The reader settings name and its ``top_k``, checked against every config before any
    indexing: a config fitted on another reader stops the run (as it stops the gate)."""
    r = settings.gate.reader
    if not r.enabled:
        return None
    try:
        path = reader_file(r.model, r.model_path)
    except ValueError as exc:
        raise SystemExit(str(exc)) from exc
    model = shared_reader(path, r.threads)
    for config in policies.values():
        if why := reader_mismatch(config, model.digest, "this run reads with"):
            raise SystemExit(f"{config.version}: {why}")
    return model, r.top_k


def _generator(settings: Settings) -> LLMBackend:
    from generator_svc.options import GeneratorOptions
    from generator_svc.prompts import load_templates
    from generator_svc.service import build_backend

    options = GeneratorOptions.from_settings(settings.generator)
    return build_backend(options, load_templates(options.prompts_path or None))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="candor eval run")
    ap.add_argument("dataset", type=Path)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument(
        "--policy",
        type=Path,
        action="append",
        default=[],
        help="extra threshold config(s) to evaluate (e.g. a calibrated one)",
    )
    ap.add_argument("--limit", type=int, default=0, help="the first N questions; 0: all")
    source = ap.add_mutually_exclusive_group()
    # No default here: argparse only sees a conflict with --target for a non-default value.
    source.add_argument("--embedder", default=None, help="default minilm")
    source.add_argument(
        "--target",
        default=None,
        help="gate HOST:PORT: evaluate a running deployment instead (docs/evaluation.md)",
    )
    ap.add_argument(
        "--reader",
        default="",
        metavar="NAME",
        help="bundled evidence reader to score with (v4, v5; default gate.reader.model); "
        "a config fitted on another reader is refused",
    )
    ap.add_argument(
        "--no-answers",
        action="store_true",
        help="skip generating answers (answer accuracy is then not reported)",
    )
    from evals import remote  # it imports this module

    remote.add_arguments(ap)
    args = ap.parse_args(argv)
    if args.limit < 0:
        ap.error("--limit must be >= 0 (0: every question)")
    if args.out.is_dir():
        ap.error(
            f"--out {args.out} is a directory: name the rows file (e.g. {args.out}/rows.jsonl)"
        )
    if args.reader and args.target:
        ap.error("--reader applies in process: a deployment reads with its own reader")
    code = remote.main(ap, args)
    if code is not None:
        return code
    embedder = args.embedder or "minilm"
    run(
        args.dataset,
        args.out,
        args.policy,
        args.limit,
        embedder,
        answers=not args.no_answers,
        reader=args.reader,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
