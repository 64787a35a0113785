"""The ingress's query encoders compared: latency, agreement with the float model, recall of LoCoMo evidence.

    python -m bench.query_encoder [--data PATH] [--split train] [--runtimes torch,onnx,onnx-int8] [--k 10] [--timed 200]

Stored turns are embedded once by the float model (``serve.embedder.Embedder``, as the write path does: the
rendered line ``[date] speaker: text``; cached). Each runtime of ``embedder.query_runtime``
(``serve.query_encoder.build_query_encoder``) then embeds every question of the split that has evidence, and:

- ``recall_at_k``: per question, the share of its evidence turns among the ``--k`` turns of its conversation
  most similar to the question (exact inner product: what the tiers' search approximates), averaged;
- ``recall_ratio``: that recall over the torch model's (the issue's bar: ≥ 0.99);
- ``cosine_min`` / ``cosine_mean``: each question's vector against the torch model's;
- ``p50_ms`` / ``p95_ms``: one question per call (``--timed`` calls after a warm-up), as a search embeds it;
  ``batch8_ms``: eight questions in one call (what the ingress's batcher runs under load).

LoCoMo's test split is never read unless asked for (``--split test``). Writes ``results/query_encoder/``.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from bench.common import emit_json, percentiles_ms, setup_logging, warm_up
from cluster.embedding_cache import embed_cached
from core.config import load_config
from corpora.locomo import Conversation, load_locomo, split
from memory.segmenter import render_turn


def evidence_recall(conversations: Sequence[Conversation], turn_vectors: np.ndarray,
                    question_vectors: np.ndarray, k: int) -> float:
    """Mean share of each question's evidence turns among its conversation's top-``k`` turns by inner product."""
    recalls, row, q = [], 0, 0
    for conv in conversations:
        ids = [t.turn_id for t in conv.turns]
        vectors = turn_vectors[row:row + len(ids)]
        row += len(ids)
        for question in conv.questions:
            if not question.evidence:
                continue
            scores = vectors @ question_vectors[q]
            q += 1
            top = {ids[i] for i in np.argsort(-scores, kind="stable")[:k]}
            recalls.append(sum(e in top for e in question.evidence) / len(question.evidence))
    return float(np.mean(recalls)) if recalls else 0.0


def questions_with_evidence(conversations: Sequence[Conversation]) -> list[str]:
    return [q.question for c in conversations for q in c.questions if q.evidence]


def measure(encoder: Any, questions: list[str], *, timed: int) -> dict[str, float]:
    warm_up(encoder)
    singles = []
    for question in questions[:timed]:
        start = time.perf_counter()
        encoder.encode([question], is_query=True)
        singles.append(time.perf_counter() - start)
    batches = []
    for i in range(0, min(timed, len(questions)) - 7, 8):
        start = time.perf_counter()
        encoder.encode(questions[i:i + 8], is_query=True)
        batches.append(time.perf_counter() - start)
    single = percentiles_ms(singles)
    return {"p50_ms": single["p50"], "p95_ms": single["p95"], "batch8_ms": percentiles_ms(batches)["p50"]}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.query_encoder", description=__doc__.split("\n")[0])
    parser.add_argument("--data", type=Path, default=None, help="LoCoMo JSON (default: config data.locomo_path)")
    parser.add_argument("--split", choices=("train", "test", "all"), default="train")
    parser.add_argument("--runtimes", default="torch,onnx,onnx-int8", help="embedder.query_runtime values; torch first")
    parser.add_argument("--k", type=int, default=10, help="turns retrieved per question")
    parser.add_argument("--timed", type=int, default=200, help="questions timed one per call")
    args = parser.parse_args(argv)
    setup_logging()
    runtimes = [r.strip() for r in args.runtimes.split(",") if r.strip()]
    if runtimes[0] != "torch":
        parser.error("--runtimes must start with torch (the reference)")

    from serve.embedder import Embedder
    from serve.query_encoder import build_query_encoder

    cfg = load_config()
    conversations = split(load_locomo(args.data or cfg.data.locomo_path), args.split)
    embedder = Embedder(cfg.embedder)
    turns = [render_turn(t) for c in conversations for t in c.turns]
    turn_vectors, _ = embed_cached(embedder, turns, cfg.paths.cache_dir, label=f"locomo-{args.split}-turns")
    questions = questions_with_evidence(conversations)

    rows: dict[str, dict[str, float]] = {}
    reference: np.ndarray | None = None
    for runtime in tqdm(runtimes, desc="query runtimes"):
        encoder = embedder if runtime == "torch" else build_query_encoder(
            cfg.embedder.model_copy(update={"query_runtime": runtime}), cfg.paths.cache_dir)
        vectors = encoder.encode(questions, is_query=True)
        reference = vectors if reference is None else reference
        cosine = (vectors * reference).sum(axis=1)
        recall = evidence_recall(conversations, turn_vectors, vectors, args.k)
        rows[runtime] = {"recall_at_k": recall, "recall_ratio": recall / rows["torch"]["recall_at_k"]
                         if rows else 1.0, "cosine_min": float(cosine.min()), "cosine_mean": float(cosine.mean()),
                         **measure(encoder, questions, timed=args.timed)}
        del encoder

    out = cfg.paths.results_dir / "query_encoder"
    out.mkdir(parents=True, exist_ok=True)
    lines = [f"recall@{args.k} of LoCoMo {args.split}-split evidence ({len(questions)} questions), "
             f"{cfg.embedder.model}", "",
             "| runtime | recall@k | ratio to torch | cosine min / mean | p50 / p95 (ms) | 8 in one call (ms) |",
             "|---|---|---|---|---|---|"]
    lines += [f"| {name} | {r['recall_at_k']:.4f} | {r['recall_ratio']:.4f} | {r['cosine_min']:.4f} / "
              f"{r['cosine_mean']:.4f} | {r['p50_ms']:.2f} / {r['p95_ms']:.2f} | {r['batch8_ms']:.2f} |"
              for name, r in rows.items()]
    (out / "results.md").write_text("\n".join(lines) + "\n")
    emit_json({"split": args.split, "k": args.k, "questions": len(questions), "model": cfg.embedder.model,
               "runtimes": rows})


if __name__ == "__main__":
    main()
