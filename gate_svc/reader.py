"""The evidence reader: does this chunk *answer* the question, not merely share its topic.

A cross-encoder (the bundled MiniLM, fine-tuned on HaluEval-QA questions no report measures on;
see :mod:`evals.reader_train`) shipped as a per-channel int8 ONNX file inside this package, so
nothing is fetched at run time. Two ship: ``v4`` (6 layers, the default) and ``v5`` (12 layers,
opt-in via ``gate.reader.model``: better on near misses, about twice the cost per read). The
gate asks it about the top evidence chunks and uses the best probability as the ``reader``
signal; retrieval scores alone cannot tell a passage that answers from one on the same topic
with the answer missing (the "near miss").
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path
from typing import Final

import numpy as np

from candor.onnx_runtime import ort
from gate_svc.reader_files import (
    MODEL_PATH,
    bundled_readers,
    model_digest,
    reader_file,
)
from gate_svc.reader_view import ReaderView
from retrieval_svc.embed.wordpiece import TOKENIZER_PATH

__all__ = [
    "MODEL_PATH",
    "EvidenceReader",
    "ReaderView",
    "bundled_readers",
    "encode_pairs",
    "model_digest",
    "reader_file",
    "shared_reader",
]

log = logging.getLogger("candor.gate.reader")

MAX_QUESTION_TOKENS: Final = 48
MAX_TOKENS: Final = 160
"""Question + chunk + markers; an 80-token chunk with its heading fits whole."""


@lru_cache(maxsize=1)
def _tokenizer() -> object:
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(TOKENIZER_PATH))
    tok.no_padding()
    tok.no_truncation()
    return tok


_SENTENCE_END = re.compile(r"(?<=[.!?。？！])\s+")
_TOKEN = re.compile(r"\w+")
#: A copy must be this long to count as a repeat: "New York New York" is a name, not a resend.
MIN_REPEAT_TOKENS: Final = 3


def _tokens(text: str) -> list[re.Match[str]]:
    return list(_TOKEN.finditer(text))


def _key(tokens: Sequence[re.Match[str]]) -> tuple[str, ...]:
    # Words only: brackets, dashes, commas and a dropped "?" do not make a sentence new.
    return tuple(m.group().casefold() for m in tokens)


def _period(key: tuple[str, ...]) -> int:
    """The length of the copy ``key`` repeats end to end, or 0 when it is no repeat."""
    n = len(key)
    for p in range(MIN_REPEAT_TOKENS, n // 2 + 1):
        if n % p == 0 and key == key[:p] * (n // p):
            return p
    return 0


def reader_question(query: str) -> str:
    """The question as the reader reads it: each sentence once.

    Sent twice ("Is there a phone app? Is there a phone app?", a pasted duplicate or a chat
    client resending a turn), a near miss's reading rose from 0.40 to 0.91 and it passed; the
    retrieval and sentence signals already count each term once. Copies are compared by their
    words: the second copy without its "?", in brackets or after a comma or dash raised it as
    far (0.31 to 0.80-0.89, an outside review), and so does a sentence restated as the start of
    a longer one ("Is there an app? Is there an app for Android?" reads as the longer). Only as
    its start: "U.S. House of Representatives" ends a "sentence" at "U.S." whose next one is
    inside the first ("Minnesota House of Representatives").
    """
    text = " ".join(query.split())
    tokens = _tokens(text)
    if period := _period(_key(tokens)):
        # One copy, ended as a question if any copy was one (a "?" alone moves a reading).
        cut = tokens[period - 1].end()
        text = text[:cut] + ("?" if "?" in text else "")
    pieces = [p for p in _SENTENCE_END.split(text) if p]
    keys = [_key(_tokens(p)) for p in pieces]
    kept = []
    for i, (piece, key) in enumerate(zip(pieces, keys, strict=True)):
        if not key:
            kept.append(piece)
            continue
        if key in keys[:i]:
            continue
        if len(key) >= MIN_REPEAT_TOKENS and any(
            len(other) > len(key) and other[: len(key)] == key for other in keys
        ):
            continue
        kept.append(piece)
    return " ".join(kept)


def encode_pairs(questions: Sequence[str], evidence: Sequence[str]) -> dict[str, np.ndarray]:
    """``[CLS] question [SEP] evidence [SEP]`` for each pair, padded to the longest (int64);
    each question as :func:`reader_question` reads it."""
    tok = _tokenizer()
    q_enc = tok.encode_batch(  # type: ignore[attr-defined]
        [reader_question(q) for q in questions], add_special_tokens=False
    )
    e_enc = tok.encode_batch(list(evidence), add_special_tokens=False)  # type: ignore[attr-defined]
    cls, sep = 101, 102
    rows: list[tuple[list[int], int]] = []
    for q, e in zip(q_enc, e_enc, strict=True):
        q_ids = list(q.ids[:MAX_QUESTION_TOKENS])
        e_ids = list(e.ids[: max(0, MAX_TOKENS - 3 - len(q_ids))])
        rows.append(([cls, *q_ids, sep, *e_ids, sep], len(q_ids) + 2))
    width = max((len(ids) for ids, _ in rows), default=0)
    input_ids = np.zeros((len(rows), width), dtype=np.int64)
    mask = np.zeros_like(input_ids)
    types = np.zeros_like(input_ids)
    for r, (ids, first) in enumerate(rows):
        input_ids[r, : len(ids)] = ids
        mask[r, : len(ids)] = 1
        types[r, first : len(ids)] = 1
    return {"input_ids": input_ids, "attention_mask": mask, "token_type_ids": types}


class ReadAbandoned(TimeoutError):
    """A read not run because its deadline had passed (:meth:`EvidenceReader.score`)."""


class EvidenceReader:
    """Scores (question, chunk) pairs with the shipped reader; thread-safe."""

    def __init__(self, path: Path = MODEL_PATH, threads: int = 1) -> None:
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        # ONNX Runtime 1.31 fuses each residual Add + LayerNormalization into one
        # SkipLayerNormalization, whose CPU kernel is the slower of the two at one pair of
        # 40-160 tokens: unfused, a read of 83 tokens took 5.3 ms instead of 6.3 (2026-11-25).
        # Logits move by ~0.02 on average (max 0.3 over 300 pairs); `candor eval` scores with
        # this same session, so the rows a policy is fitted on match what the gate reads.
        self._session = ort.InferenceSession(
            str(path),
            options,
            providers=["CPUExecutionProvider"],
            disabled_optimizers=["SkipLayerNormFusion"],
        )
        self._lock = threading.Lock()
        self.path = path
        self.digest = model_digest(path)
        # A graph that loads but is not a reader (an embedder's file in gate.reader.model_path)
        # would otherwise fail every read and silently refuse every decision it was weighed
        # in; probing here makes it a start-up error. It also pays the first run's set-up cost
        # (~8x a warm read) before the service reports SERVING.
        try:
            probe = self.score("what is this?", ["a probe read at start-up"])[0]
        except Exception as exc:
            why = f"{path} is not an evidence reader: a probe read failed: {exc}"
            raise ValueError(why) from exc
        if not 0.0 <= probe <= 1.0:
            raise ValueError(f"{path} is not an evidence reader: a probe read gave {probe}")

    def score(
        self, question: str, texts: Sequence[str], deadline: float | None = None
    ) -> list[float]:
        """Probability that each text answers ``question`` (empty ``texts`` → ``[]``).

        ``deadline`` (a ``time.monotonic()`` value): past it, raise :class:`ReadAbandoned`
        instead of starting another run; nobody is waiting for the answer any more."""
        if not texts:
            return []
        # One pair per run: the int8 graph quantises activations with one scale per run, so a
        # batched pair's score would depend on the others (and their padding).
        feeds = [encode_pairs([question], [text]) for text in texts]
        logits = []
        # One run at a time: concurrent runs on 2 cores only fight over the same threads.
        with self._lock:
            for feed in feeds:
                # Under overload, reads whose caller already gave up would otherwise still run
                # and make every later read late too (`candor bench overload`, docs/benchmarks.md).
                if deadline is not None and time.monotonic() >= deadline:
                    raise ReadAbandoned("the read's deadline passed before it ran")
                logits.append(self._session.run(["logit"], feed)[0])
        z = np.concatenate([np.asarray(x, dtype=np.float64).reshape(-1) for x in logits])
        return [float(p) for p in 1.0 / (1.0 + np.exp(-z))]


@lru_cache(maxsize=4)
def shared_reader(path: Path = MODEL_PATH, threads: int = 1) -> EvidenceReader:
    """One session per (file, threads) per process: the graph is loaded once."""
    log.info("loading the evidence reader", extra={"path": str(path)})
    return EvidenceReader(path, threads)
