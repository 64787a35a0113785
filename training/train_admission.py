"""Train the admission classifier (MemRouter) on LoCoMo's train split::

    python -m training.train_admission [--exit-layer K] [--out DIR] [--epochs N] [--max-minutes M] [--limit N]

Labels (docs/admission.md):
- operation: a train turn whose ``dia_id`` is in some question's ``evidence`` -> ADD, else NOOP
  (LoCoMo evidence annotations; ~24% ADD over all 10 conversations);
- content type (ADD turns only): ``training.admission.type_labels`` — by default the teacher's labels committed in
  ``bench/labels/content_types_teacher.jsonl`` (``python -m training.content_teacher``: Qwen2.5-Coder-1.5B
  restricted to the six types), or ``rule``: :func:`inference.admission.content_type_rule`, a keyword rule.

Conversations 1–7 are the train split; ``training.admission.holdout_conversation`` (default conv-47) is held out for
early stopping and for the decision threshold (the one with the best held-out F1). The test split is never
read here. Every turn is embedded once (cached under ``<cache_dir>/embeddings``); chunks are index lists into
that matrix, so an epoch costs only projector + frozen backbone passes. Only projector and heads train.
Output: ``<cache_dir>/admission/admission.pt`` (projector + heads) and ``admission.json`` (settings,
threshold, held-out metrics, the commit and data hash trained from); ``--out DIR`` writes elsewhere (the
service reads ``admission.weights``: 'packaged' = the committed ``inference/admission_heads/``, or a folder).
``--exit-layer K`` trains heads on the hidden state after K backbone layers (the rest never run).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn
from tqdm import tqdm

from cluster.embedding_cache import embed_cached
from core.config import AdmissionTrainingConfig, EngramConfig, load_config
from inference.admission import (
    CONTENT_TYPES,
    OPS,
    SETTINGS_FILE,
    WEIGHTS_FILE,
    AdmissionModel,
    chunk_rows,
    content_type_rule,
    load_backbone,
    pad_chunks,
    weights_dir,
)
from training.content_teacher import PACKAGED_LABELS, load_labels

log = logging.getLogger(__name__)
IGNORE = -100  # a turn without a content-type label (cross-entropy's ignore_index)


def label_source(type_labels: str) -> str:
    """The label provenance written into the trained settings."""
    types = ("inference.admission.content_type_rule" if type_labels == "rule"
             else f"teacher labels {teacher_labels_path(type_labels).name} (training.content_teacher)")
    return f"op: dia_id in some question's evidence -> ADD (LoCoMo); content type: {types}"


def teacher_labels_path(type_labels: str) -> Path:
    return PACKAGED_LABELS if type_labels == "teacher" else Path(type_labels)


def type_labeller(type_labels: str) -> Callable[[str, Any], int]:
    """``(sample_id, turn) -> content-type index`` (``IGNORE`` for a turn the teacher file does not label)."""
    if type_labels == "rule":
        return lambda _sample_id, turn: CONTENT_TYPES.index(content_type_rule(turn.text))
    path = teacher_labels_path(type_labels)
    if not path.exists():
        raise FileNotFoundError(f"training.admission.type_labels={type_labels!r}: no label file at {path} "
                                "(write it with python -m training.content_teacher, or use 'rule')")
    labels = load_labels(path)
    return lambda sample_id, turn: (CONTENT_TYPES.index(labels[(sample_id, turn.dia_id)])
                                    if (sample_id, turn.dia_id) in labels else IGNORE)


def evidence_labels(conversation: Any) -> np.ndarray:
    """1 (ADD) for each turn whose ``dia_id`` is cited as evidence by a question of its conversation, else 0."""
    cited = {d for q in conversation.questions for d in q.evidence}
    return np.array([int(t.dia_id in cited) for t in conversation.turns], dtype=np.int64)


def prf(pred: Sequence[int] | np.ndarray, gold: Sequence[int] | np.ndarray) -> dict[str, float]:
    """Precision / recall / F1 of the positive class: ``prf([1, 0, 1], [1, 1, 0])["f1"] == 0.5``."""
    pred, gold = np.asarray(pred, dtype=bool), np.asarray(gold, dtype=bool)
    tp = float((pred & gold).sum())
    precision = tp / pred.sum() if pred.sum() else 0.0
    recall = tp / gold.sum() if gold.sum() else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"precision": precision, "recall": recall, "f1": f1}


def best_threshold(p_add: np.ndarray, gold: np.ndarray) -> tuple[float, float]:
    """(threshold, F1) maximising F1 of ``p_add >= threshold``.

    ``best_threshold([.9, .2, .6], [1, 0, 1]) == (0.6, 1.0)``
    """
    p_add, gold = np.asarray(p_add, dtype=np.float64), np.asarray(gold, dtype=np.int64)
    order = np.argsort(-p_add, kind="stable")
    tp = np.cumsum(gold[order])
    k = np.arange(1, len(order) + 1)
    f1 = 2 * tp / (k + max(int(gold.sum()), 1))
    best = int(np.argmax(f1))
    return float(p_add[order[best]]), float(f1[best])


@dataclass
class ChunkSet:
    """Chunks as row lists into ``vectors`` (one embedding per turn) with their op and content-type labels."""

    vectors: np.ndarray
    rows: list[list[int]]
    op: np.ndarray
    ctype: np.ndarray

    def chunks(self, idx: Sequence[int]) -> list[np.ndarray]:
        return [self.vectors[self.rows[i]] for i in idx]


def build_chunkset(conversations: Sequence[Any], vectors: np.ndarray, max_turns: int,
                   type_of: Callable[[str, Any], int] | None = None) -> ChunkSet:
    """Chunks of every turn of ``conversations``; ``vectors`` holds their turns' embeddings in the same order.
    ``type_of(sample_id, turn)`` gives a turn's content-type index (default: the keyword rule)."""
    type_of = type_of or type_labeller("rule")
    rows: list[list[int]] = []
    op, ctype = [], []
    offset = 0
    for conv in conversations:
        rows += [[offset + r for r in chunk] for chunk in chunk_rows(len(conv.turns), max_turns)]
        op.append(evidence_labels(conv))
        ctype += [type_of(conv.sample_id, t) for t in conv.turns]
        offset += len(conv.turns)
    if offset != len(vectors):
        raise ValueError(f"{len(vectors)} vectors for {offset} turns")
    return ChunkSet(vectors, rows, np.concatenate(op), np.array(ctype, dtype=np.int64))


def class_weights(op: np.ndarray) -> torch.Tensor:
    """Weighted cross-entropy from class balance, ``N / (K * N_c)``: ``class_weights([0, 0, 0, 1]) == [2/3, 2]``."""
    counts = np.bincount(np.asarray(op), minlength=len(OPS)).astype(np.float64)
    return torch.tensor(len(op) / (len(OPS) * np.maximum(counts, 1)), dtype=torch.float32)


def train_step(
    model: AdmissionModel,
    optimizer: torch.optim.Optimizer,
    chunks: Sequence[np.ndarray],
    op: np.ndarray,
    ctype: np.ndarray,
    op_weight: torch.Tensor,
    content_weight: float,
) -> float:
    """One optimiser step on a batch; the content-type loss counts labelled ADD chunks only. Returns the loss."""
    device = next(model.projector.parameters()).device
    embeds, mask = pad_chunks(chunks)
    op_t, type_t = torch.as_tensor(op, device=device), torch.as_tensor(ctype, device=device)
    op_logits, type_logits = model(embeds.to(device), mask.to(device))
    loss = nn.functional.cross_entropy(op_logits, op_t, weight=op_weight.to(device))
    add = (op_t == 1) & (type_t != IGNORE)
    if content_weight > 0 and bool(add.any()):
        loss = loss + content_weight * nn.functional.cross_entropy(type_logits[add], type_t[add])
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    return float(loss.detach())


@torch.no_grad()
def predict_p_add(model: AdmissionModel, data: ChunkSet, batch: int = 128) -> np.ndarray:
    model.eval()
    device = next(model.projector.parameters()).device
    out = []
    for start in range(0, len(data.rows), batch):
        embeds, mask = pad_chunks(data.chunks(range(start, min(start + batch, len(data.rows)))))
        out.append(model(embeds.to(device), mask.to(device))[0].softmax(-1)[:, 1].cpu().numpy())
    return np.concatenate(out) if out else np.zeros(0)


@dataclass
class FitResult:
    state: dict[str, torch.Tensor]
    threshold: float
    holdout_f1: float
    history: list[dict[str, float]] = field(default_factory=list)
    seconds: float = 0.0


def fit(
    model: AdmissionModel, train: ChunkSet, holdout: ChunkSet, cfg: AdmissionTrainingConfig, progress: bool = True
) -> FitResult:
    """Train projector + heads; keep the epoch with the best held-out F1 (its threshold chosen on held-out)."""
    torch.manual_seed(cfg.seed)
    rng = np.random.default_rng(cfg.seed)
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
    weight = class_weights(train.op)
    start, best, stale = time.perf_counter(), None, 0
    history: list[dict[str, float]] = []
    for epoch in range(1, cfg.epochs + 1):
        model.train()
        order = rng.permutation(len(train.rows))
        batches = [order[i : i + cfg.batch_size] for i in range(0, len(order), cfg.batch_size)]
        losses = []
        for idx in tqdm(batches, desc=f"epoch {epoch}", disable=not progress, file=sys.stderr):
            losses.append(
                train_step(model, optimizer, train.chunks(idx), train.op[idx], train.ctype[idx], weight,
                           cfg.content_loss_weight)
            )
            if time.perf_counter() - start > cfg.max_train_minutes * 60:
                log.info("time budget of %.1f min reached after %d steps of epoch %d", cfg.max_train_minutes,
                         len(losses), epoch)
                break
        p_add = predict_p_add(model, holdout)
        threshold, f1 = best_threshold(p_add, holdout.op)
        history.append({"epoch": epoch, "steps": len(losses), "train_loss": float(np.mean(losses)), "holdout_f1": f1,
                        "threshold": threshold, "seconds": time.perf_counter() - start})
        log.info("epoch %d: train loss %.4f, held-out F1 %.3f at threshold %.3f", epoch, history[-1]["train_loss"],
                 f1, threshold)
        if best is None or f1 > best.holdout_f1:
            state = {k: v.detach().clone() for k, v in model.trainable_state().items()}
            best, stale = FitResult(state, threshold, f1), 0
        else:
            stale += 1
        if stale > cfg.patience or time.perf_counter() - start > cfg.max_train_minutes * 60:
            break
    assert best is not None  # epochs >= 1
    best.history, best.seconds = history, time.perf_counter() - start
    model.load_state_dict(best.state, strict=False)
    return best


def save(out_dir: Path, model: AdmissionModel, result: FitResult, settings: dict[str, Any]) -> None:
    """Write weights, then settings (written last: a folder without them is unfinished)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    tmp = out_dir / (WEIGHTS_FILE + ".tmp")
    torch.save(result.state, tmp)
    tmp.replace(out_dir / WEIGHTS_FILE)
    (out_dir / SETTINGS_FILE).write_text(json.dumps(settings, indent=2))


def provenance(data_path: Path) -> dict[str, Any]:
    """What trained weights came from: the code's commit (None outside a git checkout; ``dirty`` when the
    tree had changes) and the SHA-256 of the data file."""
    import subprocess

    from core.config import REPO_ROOT

    def git(*args: str) -> str | None:
        try:
            return subprocess.run(["git", *args], cwd=REPO_ROOT, capture_output=True, text=True, check=True,
                                  timeout=10).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return None

    status = git("status", "--porcelain", "--untracked-files=no")
    return {"commit": git("rev-parse", "HEAD"), "dirty": bool(status) if status is not None else None,
            "data_file": data_path.name, "data_sha256": hashlib.sha256(data_path.read_bytes()).hexdigest()}


def run(cfg: EngramConfig, *, limit: int | None = None, progress: bool = True,
        out_dir: Path | None = None) -> dict[str, Any]:
    """Embed the train split, train, save to ``out_dir`` (default ``<cache_dir>/admission``); returns the
    saved settings."""
    from corpora.locomo import load_locomo, split
    from memory.segmenter import render_turn
    from serve.embedder import Embedder

    acfg, tcfg = cfg.admission, cfg.training.admission
    convs = split(load_locomo(cfg.data.locomo_path), "train")
    if tcfg.holdout_conversation not in {c.sample_id for c in convs}:
        raise ValueError(f"training.admission.holdout_conversation={tcfg.holdout_conversation!r} is not a train "
                         "conversation")
    if limit:  # smoke runs: the first `limit` turns of each conversation
        convs = [type(c)(c.sample_id, c.speakers, c.turns[:limit], c.questions) for c in convs]
    train_convs = [c for c in convs if c.sample_id != tcfg.holdout_conversation]
    hold_convs = [c for c in convs if c.sample_id == tcfg.holdout_conversation]
    type_of = type_labeller(tcfg.type_labels)
    embedder = Embedder(cfg.embedder)
    sets = []
    for name, group in (("train", train_convs), ("holdout", hold_convs)):
        texts = [render_turn(t) for c in group for t in c.turns]
        vectors, _ = embed_cached(embedder, texts, Path(cfg.paths.cache_dir), label=f"admission-{name}")
        sets.append(build_chunkset(group, vectors, acfg.max_turns, type_of))
    train, holdout = sets
    unlabelled = int(((train.op == 1) & (train.ctype == IGNORE)).sum())
    if unlabelled:
        log.warning("%d train ADD turns have no content-type label in %s (left out of the type loss)", unlabelled,
                    tcfg.type_labels)
    torch.manual_seed(tcfg.seed)
    model = AdmissionModel(load_backbone(acfg.backbone, cfg.paths.cache_dir, acfg.device), embedder.dim,
                           acfg.projector_hidden, exit_layer=tcfg.exit_layer).to(acfg.device)
    trainable = model.trainable_parameters()
    total = sum(p.numel() for p in model.parameters())
    print(f"trainable parameters: {trainable:,} of {total:,} ({100 * trainable / total:.2f}%); "
          f"train chunks {len(train.rows)} ({int(train.op.sum())} ADD), held-out {len(holdout.rows)} "
          f"({int(holdout.op.sum())} ADD, {tcfg.holdout_conversation}); exit after {model.exit_layer} layers",
          flush=True)
    result = fit(model, train, holdout, tcfg, progress=progress)
    settings = {
        "backbone": acfg.backbone, "exit_layer": model.exit_layer, "embedder": embedder.name,
        "embed_dim": embedder.dim, "projector_hidden": acfg.projector_hidden, "max_turns": acfg.max_turns,
        "ops": list(OPS), "content_types": list(CONTENT_TYPES),
        "label_source": label_source(tcfg.type_labels),
        "threshold": result.threshold, "holdout_conversation": tcfg.holdout_conversation,
        "holdout_f1": result.holdout_f1, "history": result.history, "train_seconds": round(result.seconds, 1),
        "trainable_params": trainable, "total_params": total, "class_weights": class_weights(train.op).tolist(),
        "train_chunks": len(train.rows), "train_add": int(train.op.sum()), "limit": limit,
        "config": acfg.model_dump(), "training": tcfg.model_dump(),
        "trained_from": provenance(Path(cfg.data.locomo_path)),
        "type_labels_sha256": None if tcfg.type_labels == "rule" else hashlib.sha256(
            teacher_labels_path(tcfg.type_labels).read_bytes()).hexdigest(),
    }
    out_dir = out_dir or weights_dir(cfg.paths.cache_dir)
    save(out_dir, model, result, settings)
    print(f"wrote {out_dir / WEIGHTS_FILE} (held-out F1 {result.holdout_f1:.3f} at threshold "
          f"{result.threshold:.3f}, {result.seconds:.0f} s)", flush=True)
    return settings


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m training.train_admission", description=__doc__.split("\n\n")[0])
    parser.add_argument("--profile", default=None, help="config profile (default: $ENGRAM_PROFILE or cpu)")
    parser.add_argument("--epochs", type=int, default=None, help="override training.admission.epochs")
    parser.add_argument("--max-minutes", type=float, default=None, help="override training.admission.max_train_minutes")
    parser.add_argument("--limit", type=int, default=None, help="smoke run: first N turns of each conversation")
    parser.add_argument("--exit-layer", type=int, default=None,
                        help="heads read the hidden state after K backbone layers "
                        "(override training.admission.exit_layer)")
    parser.add_argument("--out", type=Path, default=None, help="output folder (default <cache_dir>/admission)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(name)s: %(message)s")
    cfg = load_config(args.profile)
    if args.epochs is not None:
        cfg.training.admission.epochs = args.epochs
    if args.max_minutes is not None:
        cfg.training.admission.max_train_minutes = args.max_minutes
    if args.exit_layer is not None:
        cfg.training.admission.exit_layer = args.exit_layer
    settings = run(cfg, limit=args.limit, out_dir=args.out)
    print(json.dumps({k: settings[k] for k in ("exit_layer", "trainable_params", "threshold", "holdout_f1",
                                               "train_seconds")}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
