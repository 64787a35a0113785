"""Write-side admission on LoCoMo: the learned classifier (MemRouter) against generative admission.

    python -m bench.admission --split test [--limit N] [--data PATH] [--latency-turns N] [--batch B]

Quality: every turn of the split (``--limit N``: the first N turns of each conversation) is decided by the
trained classifier (``python -m cluster.train_admission`` first); precision / recall / F1 of ADD against the
evidence labels (a turn cited as evidence by a question -> ADD) and the share of turns stored.

Latency, wall time per turn, embedding included:
- classifier, batched: turns arrive in stream order in batches of ``--batch``; each batch's new turns are
  embedded in one call (earlier turns' vectors are reused, never re-embedded), then one classifier pass;
  per-turn time = batch time / batch size.
- classifier, batch 1: ``--latency-turns`` turns spread evenly over the split; embed that one turn, build its
  chunk from the stored vectors of the turns before it, classify.
- generative, same model: SmolLM2-135M-Instruct through ``serve.engine.TransformersEngine`` (greedy, choice
  constrained to ADD / NOOP) reads the same ≤ 5 rendered turns as text and answers; batch 1 and batched
  (``--batch``) on the same sample turns. Its precision / recall on that sample are reported too.

``speedup_p50`` = generative p50 / classifier p50, both at batch 1. The JSON's last line follows
BENCH.md; tables go to ``<results_dir>/admission/``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from actors.admission import CONTENT_TYPES, AdmissionClassifier, ChunkStream
from actors.segmenter import render_turn
from bench.common import emit_json, percentiles_ms, setup_logging
from bench.locomo_data import load_locomo, split
from cluster.config import REPO_ROOT, load_config
from cluster.train_admission import evidence_labels, prf
from serve.engine import ChatMessage, GenerationRequest

SYSTEM_PROMPT = (
    "You manage the long-term memory of a chat assistant. Store a turn (ADD) when it holds a fact, plan, "
    "preference, feeling or event worth remembering later; otherwise skip it (NOOP)."
)


def generative_request(window: Sequence[Any]) -> GenerationRequest:
    """The LLM manager's prompt: the ≤ 5 rendered turns, the last one to decide; answer exactly ADD or NOOP."""
    lines = "\n".join(render_turn(t) for t in window)
    ask = f"Conversation:\n{lines}\n\nShould the LAST turn be stored in long-term memory? Answer ADD or NOOP."
    return GenerationRequest(
        messages=[ChatMessage(role="system", content=SYSTEM_PROMPT), ChatMessage(role="user", content=ask)],
        choice=["ADD", "NOOP"],
        temperature=0.0,
    )


def even_sample(n: int, k: int) -> list[int]:
    """``k`` indices spread evenly over ``range(n)``: ``even_sample(10, 3) == [0, 4, 9]``."""
    if k >= n:
        return list(range(n))
    return sorted({int(round(x)) for x in np.linspace(0, n - 1, k)})


def quality(pred: np.ndarray, gold: np.ndarray) -> dict[str, float]:
    return {**prf(pred, gold), "stored_share": float(np.mean(pred)) if len(pred) else 0.0}


def random_f1(base_rate: float, share: float) -> float:
    """Expected F1 of storing a random ``share`` of turns when ``base_rate`` of them are ADD.

    Precision = base rate, recall = share: ``random_f1(0.25, 1.0) == 0.4`` (store everything).
    """
    return 2 * base_rate * share / (base_rate + share) if base_rate + share else 0.0


def markdown(summary: dict[str, Any]) -> str:
    lat, p95, bat = summary["latency_p50_ms"], summary["latency_p95_ms"], summary["batched_per_turn_ms"]
    gq, cq = summary["generative_sample"], summary["classifier_sample"]
    rows = [
        "| system | precision | recall | F1 | stored | p50 ms (batch 1) | p95 ms (batch 1) | ms/turn batched |",
        "|---|---|---|---|---|---|---|---|",
        f"| classifier, all {summary['turns']} turns | {summary['precision']:.3f} | {summary['recall']:.3f} | "
        f"{summary['f1']:.3f} | {summary['stored_share']:.3f} | {lat['classifier']:.1f} | {p95['classifier']:.1f} | "
        f"{bat['classifier']:.1f} |",
        f"| classifier, latency sample ({summary['latency_turns']}) | {cq['precision']:.3f} | {cq['recall']:.3f} | "
        f"{cq['f1']:.3f} | {cq['stored_share']:.3f} | | | |",
        f"| generative SmolLM2 (choice ADD/NOOP), same sample | {gq['precision']:.3f} | {gq['recall']:.3f} | "
        f"{gq['f1']:.3f} | {gq['stored_share']:.3f} | {lat['generative']:.1f} | {p95['generative']:.1f} | "
        f"{bat['generative']:.1f} |",
    ]
    tail = (
        f"\nrandom admission at the same stored share: F1 {summary['random_f1_same_share']:.3f} (expected); "
        f"store everything: F1 {summary['store_all_f1']:.3f}."
        f"\nsplit {summary['split']}; ADD share of labels {summary['label_add_share']:.3f}; threshold "
        f"{summary['threshold']:.3f}; speedup p50 (batch 1) {summary['speedup_p50']:.1f}x; batched "
        f"{summary['speedup_batched']:.1f}x; trainable params {summary['trainable_params']:,}; classifier batch-1 "
        f"p50 split: embed {summary['classifier_parts_p50_ms']['embed']:.1f} ms + classify "
        f"{summary['classifier_parts_p50_ms']['classify']:.1f} ms."
    )
    return "\n".join(rows) + "\n" + tail + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.admission", description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=None, help="locomo10.json (default: data.locomo_path)")
    parser.add_argument("--split", choices=("train", "test"), default="test")
    parser.add_argument("--limit", type=int, default=None, help="first N turns of each conversation")
    parser.add_argument("--latency-turns", type=int, default=48, help="turns timed at batch 1 (both systems)")
    parser.add_argument("--batch", type=int, default=16, help="turns per batch in the batched timings")
    args = parser.parse_args(argv)
    setup_logging()
    cfg = load_config()
    convs = split(load_locomo(args.data or cfg.data.locomo_path), args.split)
    if args.limit:
        convs = [type(c)(c.sample_id, c.speakers, c.turns[: args.limit], c.questions) for c in convs]
    turns = [t for c in convs for t in c.turns]
    gold = np.concatenate([evidence_labels(c) for c in convs])

    from serve.embedder import Embedder
    from serve.engine import TransformersEngine

    embedder = Embedder(cfg.embedder)
    clf = AdmissionClassifier.load(Path(cfg.paths.cache_dir) / "admission", device=cfg.admission.device)
    trainable = clf.model.trainable_parameters()
    embedder.encode(["warm-up"])
    clf.classify([embedder.encode(["warm-up"])])

    # Classifier, batched, stream order: each batch's new turns embedded once, then one pass.
    stream = ChunkStream(embedder, cfg.admission.max_turns)
    chunks: list[np.ndarray] = []
    decisions = []
    batch_ms: list[float] = []
    for start in tqdm(range(0, len(turns), args.batch), desc="classifier batched", file=sys.stderr):
        batch = turns[start : start + args.batch]
        t0 = time.perf_counter()
        new = stream.push(batch)
        decisions += clf.classify(new)
        batch_ms.append((time.perf_counter() - t0) / len(batch))
        chunks += new
    pred = np.array([d.op == "ADD" for d in decisions])

    # Batch 1 on a sample: embed the new turn, reuse the stored vectors of the turns before it.
    sample = even_sample(len(turns), args.latency_turns)
    cls_s, embed_s, infer_s = [], [], []
    for i in tqdm(sample, desc="classifier batch 1", file=sys.stderr):
        previous = chunks[i][:-1]
        t0 = time.perf_counter()
        vec = embedder.encode([render_turn(turns[i])])
        t1 = time.perf_counter()
        clf.classify([np.concatenate([previous, vec])])
        t2 = time.perf_counter()
        cls_s.append(t2 - t0)
        embed_s.append(t1 - t0)
        infer_s.append(t2 - t1)

    engine = TransformersEngine(cfg.engine.model_copy(update={"backend": "transformers", "max_batch_size": args.batch,
                                                              "cache_dir": str(cfg.paths.cache_dir)}))
    requests = []
    for i in sample:
        conv = next(c for c in convs if c.sample_id == turns[i].conv_id)
        pos = turns[i].index
        requests.append(generative_request(conv.turns[max(0, pos - cfg.admission.max_turns + 1) : pos + 1]))
    engine.generate(requests[:1])  # warm-up
    gen_s, gen_pred = [], []
    for req in tqdm(requests, desc="generative batch 1", file=sys.stderr):
        t0 = time.perf_counter()
        [res] = engine.generate([req])
        gen_s.append(time.perf_counter() - t0)
        gen_pred.append(res.text == "ADD")
    gen_batch_ms = []
    for start in tqdm(range(0, len(requests), args.batch), desc="generative batched", file=sys.stderr):
        part = requests[start : start + args.batch]
        t0 = time.perf_counter()
        engine.generate(part)
        gen_batch_ms.append((time.perf_counter() - t0) / len(part))

    cls_p, gen_p = percentiles_ms(cls_s), percentiles_ms(gen_s)
    bat_c, bat_g = float(np.median(batch_ms) * 1000), float(np.median(gen_batch_ms) * 1000)
    adds = [d.content_type for d in decisions if d.op == "ADD"]
    summary = {
        "split": args.split,
        "turns": len(turns),
        **quality(pred, gold),
        "latency_p50_ms": {"classifier": cls_p["p50"], "generative": gen_p["p50"]},
        "latency_p95_ms": {"classifier": cls_p["p95"], "generative": gen_p["p95"]},
        "speedup_p50": gen_p["p50"] / cls_p["p50"],
        "trainable_params": trainable,
        "batched_per_turn_ms": {"classifier": bat_c, "generative": bat_g},
        "speedup_batched": bat_g / bat_c,
        "batch": args.batch,
        "classifier_parts_p50_ms": {"embed": percentiles_ms(embed_s)["p50"],
                                    "classify": percentiles_ms(infer_s)["p50"]},
        "latency_turns": len(sample),
        "classifier_sample": quality(pred[sample], gold[sample]),
        "generative_sample": quality(np.array(gen_pred), gold[sample]),
        "label_add_share": float(gold.mean()),
        "random_f1_same_share": random_f1(float(gold.mean()), float(pred.mean())),
        "store_all_f1": random_f1(float(gold.mean()), 1.0),
        "threshold": clf.threshold,
        "content_types_of_add": {t: adds.count(t) for t in CONTENT_TYPES},
        "limit": args.limit,
    }
    out = Path(cfg.paths.results_dir)
    out = (out if out.is_absolute() else REPO_ROOT / out) / "admission"
    out.mkdir(parents=True, exist_ok=True)
    (out / f"admission-{args.split}.md").write_text(markdown(summary))
    (out / f"admission-{args.split}.json").write_text(json.dumps(summary, indent=1) + "\n")
    engine.close()
    emit_json(summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
