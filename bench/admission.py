"""Write-side admission on LoCoMo: the learned classifier (MemRouter) against generative admission.

    python -m bench.admission --split test [--limit N] [--data PATH] [--latency-turns N] [--batch B]
                              [--weights packaged,DIR,...] [--dtypes float32,bfloat16,int8]

Every (weights, dtype) pair is a variant (exit layer from its settings); all of them are scored and timed in
the same run against the same generative managers (JSON ``variants``); the top-level keys describe the
first variant.

Quality: every turn of the split (``--limit N``: the first N turns of each conversation) is decided by the
trained classifier (the committed heads, or folders of ``python -m training.train_admission``); precision /
recall / F1 of ADD against the evidence labels (a turn cited as evidence by a question -> ADD) and the share
of turns stored. The content-type
head is scored on the turns labelled ADD against the keyword rule (``content_type_rule``) and, where
``bench/labels/content_types_teacher.jsonl`` labels them, against the teacher model it is trained on
(``training.content_teacher``; the rule's own agreement with the teacher beside it).

Latency, wall time per turn, embedding included:
- classifier, batched: turns arrive in stream order in batches of ``--batch``; each batch's new turns are
  embedded in one call (earlier turns' vectors are reused, never re-embedded), then one classifier pass;
  per-turn time = batch time / batch size.
- classifier, batch 1: ``--latency-turns`` turns spread evenly over the split; embed that one turn, build its
  chunk from the stored vectors of the turns before it, classify.
- generative, same model: SmolLM2-135M-Instruct through ``serve.transformers_engine.TransformersEngine`` reads the same
  ≤ 5 rendered turns as text and answers, two ways: free greedy generation of at most 4 tokens (its first
  word read as ADD or not: one prompt pass plus a few decode steps) and the choice constraint ADD / NOOP
  (the engine scores both options: one prompt pass per option); batch 1 and batched (``--batch``) on the
  same sample turns. Their precision / recall on that sample are reported too.

``speedup_p50`` = the faster generative manager's p50 / classifier p50, both at batch 1 (each manager's
ratio is in ``speedup_p50_by_generative``). The JSON's last line follows
BENCH.md; tables go to ``<results_dir>/admission/``.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from bench.common import emit_json, percentiles_ms, setup_logging
from core.config import REPO_ROOT, load_config
from core.generation import ChatMessage, GenerationRequest
from corpora.locomo import load_locomo, split
from inference.admission import CONTENT_TYPES, AdmissionClassifier, ChunkStream, content_type_rule
from memory.segmenter import render_turn
from training.content_teacher import PACKAGED_LABELS, load_labels
from training.train_admission import evidence_labels, prf

FREE_TOKENS = 4  # free generation: room for "ADD" / "NOOP" and a stop token
SYSTEM_PROMPT = (
    "You manage the long-term memory of a chat assistant. Store a turn (ADD) when it holds a fact, plan, "
    "preference, feeling or event worth remembering later; otherwise skip it (NOOP)."
)


def generative_request(window: Sequence[Any], *, constrained: bool = True) -> GenerationRequest:
    """The LLM manager's prompt: the ≤ 5 rendered turns, the last one to decide; answer ADD or NOOP.

    ``constrained``: the output is exactly ``ADD`` or ``NOOP`` (the engine scores both); else the model
    generates freely, greedy, at most :data:`FREE_TOKENS` tokens (read by :func:`generated_op`).
    """
    lines = "\n".join(render_turn(t) for t in window)
    ask = f"Conversation:\n{lines}\n\nShould the LAST turn be stored in long-term memory? Answer ADD or NOOP."
    return GenerationRequest(
        messages=[ChatMessage(role="system", content=SYSTEM_PROMPT), ChatMessage(role="user", content=ask)],
        choice=["ADD", "NOOP"] if constrained else None,
        max_tokens=None if constrained else FREE_TOKENS,
        temperature=0.0,
    )


def generated_op(text: str) -> bool:
    """Free generation read as ADD when its first word is ADD: ``generated_op(" add.") is True``."""
    words = re.findall(r"[A-Za-z]+", text)
    return bool(words) and words[0].upper() == "ADD"


def time_generative(engine: Any, requests: Sequence[GenerationRequest], batch: int, label: str,
                    read: Callable[[str], bool]) -> tuple[list[float], list[bool], list[float]]:
    """(seconds per request at batch 1, ADD decisions, ms per request in batches of ``batch``)."""
    engine.generate(requests[:1])  # warm-up
    single, decided = [], []
    for req in tqdm(requests, desc=f"{label} batch 1", file=sys.stderr):
        t0 = time.perf_counter()
        [res] = engine.generate([req])
        single.append(time.perf_counter() - t0)
        decided.append(read(res.text))
    batched = []
    for start in tqdm(range(0, len(requests), batch), desc=f"{label} batched", file=sys.stderr):
        part = requests[start : start + batch]
        t0 = time.perf_counter()
        engine.generate(part)
        batched.append((time.perf_counter() - t0) / len(part) * 1000)
    return single, decided, batched


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


def type_agreement(predicted: Sequence[str], reference: Sequence[str]) -> dict[str, Any]:
    """How predicted content types agree with reference ones (the keyword rule's, or the teacher's).

    Accuracy, macro-F1 over the types present in either list, per-type precision / recall / support, and
    the accuracy of always answering the reference's most frequent type (the floor a useless head reaches).
    """
    pred, gold = np.asarray(predicted, dtype=object), np.asarray(reference, dtype=object)
    if not len(gold):
        return {"n": 0, "accuracy": 0.0, "macro_f1": 0.0, "majority_accuracy": 0.0, "per_type": {}}
    present = [t for t in CONTENT_TYPES if (pred == t).any() or (gold == t).any()]
    per_type = {t: {**prf(pred == t, gold == t), "support": int((gold == t).sum())} for t in present}
    return {
        "n": len(gold),
        "accuracy": float((pred == gold).mean()),
        "macro_f1": float(np.mean([v["f1"] for v in per_type.values()])),
        "majority_accuracy": max(v["support"] for v in per_type.values()) / len(gold),
        "per_type": per_type,
    }


def time_variant(cfg: Any, weights: str, dtype: str, embedder: Any, turns: Sequence[Any],
                 chunks: Sequence[np.ndarray], embed_batch_s: Sequence[float], sample: Sequence[int], batch: int,
                 gold: np.ndarray) -> dict[str, Any]:
    """One classifier variant (weights folder x backbone precision): decisions on every chunk, batched cost
    (the batch's shared embedding time + its pass), and batch 1 on ``sample`` (embed the new turn, reuse the
    stored vectors of the turns before it, classify)."""
    variant_cfg = cfg.model_copy(deep=True)
    variant_cfg.admission.weights, variant_cfg.admission.dtype = weights, dtype
    clf = AdmissionClassifier.from_config(variant_cfg)
    clf.classify([embedder.encode(["warm-up"])])
    decisions, batch_ms = [], []
    for n, start in enumerate(tqdm(range(0, len(chunks), batch), desc=f"classifier {weights} {dtype} batched",
                                   file=sys.stderr)):
        part = chunks[start : start + batch]
        t0 = time.perf_counter()
        decisions += clf.classify(part)
        batch_ms.append((time.perf_counter() - t0 + embed_batch_s[n]) / len(part) * 1000)
    single, embed_s, infer_s = [], [], []
    for i in tqdm(sample, desc=f"classifier {weights} {dtype} batch 1", file=sys.stderr):
        previous = chunks[i][:-1]
        t0 = time.perf_counter()
        vec = embedder.encode([render_turn(turns[i])])
        t1 = time.perf_counter()
        clf.classify([np.concatenate([previous, vec])])
        t2 = time.perf_counter()
        single.append(t2 - t0)
        embed_s.append(t1 - t0)
        infer_s.append(t2 - t1)
    pred = np.array([d.op == "ADD" for d in decisions])
    lat = percentiles_ms(single)
    return {
        "weights": weights, "dtype": dtype, "exit_layer": clf.model.exit_layer, "threshold": clf.threshold,
        **quality(pred, gold), "p50_ms": lat["p50"], "p95_ms": lat["p95"],
        "classify_p50_ms": percentiles_ms(infer_s)["p50"], "batched_per_turn_ms": float(np.median(batch_ms)),
        "trainable_params": clf.model.trainable_parameters(),
        "decisions": decisions, "pred": pred, "single_s": single, "embed_s": embed_s, "infer_s": infer_s,
        "batch_ms": batch_ms,
    }


def markdown(summary: dict[str, Any]) -> str:
    lat, p95, bat = summary["latency_p50_ms"], summary["latency_p95_ms"], summary["batched_per_turn_ms"]
    cq = summary["classifier_sample"]
    rows = [
        "| system | precision | recall | F1 | stored | p50 ms (batch 1) | p95 ms (batch 1) | ms/turn batched |",
        "|---|---|---|---|---|---|---|---|",
        f"| classifier, all {summary['turns']} turns | {summary['precision']:.3f} | {summary['recall']:.3f} | "
        f"{summary['f1']:.3f} | {summary['stored_share']:.3f} | {lat['classifier']:.1f} | {p95['classifier']:.1f} | "
        f"{bat['classifier']:.1f} |",
        f"| classifier, latency sample ({summary['latency_turns']}) | {cq['precision']:.3f} | {cq['recall']:.3f} | "
        f"{cq['f1']:.3f} | {cq['stored_share']:.3f} | | | |",
    ]
    for kind, label in (("generate", "free greedy generation"), ("choice", "choice ADD/NOOP, both scored")):
        q, key = summary[f"generative_{kind}_sample"], f"generative_{kind}"
        rows.append(f"| generative SmolLM2 ({label}), same sample | {q['precision']:.3f} | {q['recall']:.3f} | "
                    f"{q['f1']:.3f} | {q['stored_share']:.3f} | {lat[key]:.1f} | {p95[key]:.1f} | {bat[key]:.1f} |")
    tail = (
        f"\nrandom admission at the same stored share: F1 {summary['random_f1_same_share']:.3f} (expected); "
        f"store everything: F1 {summary['store_all_f1']:.3f}."
        f"\nsplit {summary['split']}; ADD share of labels {summary['label_add_share']:.3f}; threshold "
        f"{summary['threshold']:.3f}; speedup p50 (batch 1, against the faster generative manager) "
        f"{summary['speedup_p50']:.1f}x (free generation "
        f"{summary['speedup_p50_by_generative']['generate']:.1f}x, choice "
        f"{summary['speedup_p50_by_generative']['choice']:.1f}x); batched "
        f"{summary['speedup_batched']:.1f}x; trainable params {summary['trainable_params']:,}; classifier batch-1 "
        f"p50 split: embed {summary['classifier_parts_p50_ms']['embed']:.1f} ms + classify "
        f"{summary['classifier_parts_p50_ms']['classify']:.1f} ms."
    )
    for key, what in (("content_type_vs_rule", "content type head vs the keyword rule"),
                      ("content_type_vs_teacher", "content type head vs the teacher"),
                      ("rule_vs_teacher", "keyword rule vs the teacher")):
        types = summary.get(key)
        if not types:
            continue
        tail += (
            f"\n{what}, on the {types['n']} turns the evidence labels call ADD: accuracy {types['accuracy']:.3f} "
            f"(always the most frequent reference type: {types['majority_accuracy']:.3f}), macro-F1 "
            f"{types['macro_f1']:.3f}; per type (F1 / support): "
            + ", ".join(f"{t} {v['f1']:.2f}/{v['support']}" for t, v in types["per_type"].items()) + "."
        )
    variants = [
        "\n| weights | exit after layers | backbone | precision | recall | F1 | stored | p50 ms (batch 1, embed "
        "included) | classify p50 ms | ms/turn batched | speedup p50 | agreement with the first row | type "
        "accuracy vs rule | type accuracy vs teacher |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for v in summary["variants"]:
        agree, taught = v.get("agreement_with_first"), v.get("type_accuracy_vs_teacher")
        variants.append(
            f"| {v['weights']} | {v['exit_layer']} | {v['dtype']} | {v['precision']:.3f} | {v['recall']:.3f} | "
            f"{v['f1']:.3f} | {v['stored_share']:.3f} | {v['p50_ms']:.1f} | {v['classify_p50_ms']:.1f} | "
            f"{v['batched_per_turn_ms']:.1f} | {v['speedup_p50']:.1f}x | {'' if agree is None else f'{agree:.3f}'} | "
            f"{v['type_accuracy_vs_rule']:.3f} | {'' if taught is None else f'{taught:.3f}'} |"
        )
    return "\n".join(rows) + "\n" + tail + "\n" + "\n".join(variants) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.admission", description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=None, help="locomo10.json (default: data.locomo_path)")
    parser.add_argument("--split", choices=("train", "test"), default="test")
    parser.add_argument("--limit", type=int, default=None, help="first N turns of each conversation")
    parser.add_argument("--latency-turns", type=int, default=48, help="turns timed at batch 1 (both systems)")
    parser.add_argument("--batch", type=int, default=16, help="turns per batch in the batched timings")
    parser.add_argument("--weights", default=None,
                        help="comma-separated admission weights ('packaged' or folders; default admission.weights)")
    parser.add_argument("--dtypes", default=None,
                        help="comma-separated backbone precisions float32,bfloat16,int8 (default admission.dtype)")
    args = parser.parse_args(argv)
    setup_logging()
    cfg = load_config()
    convs = split(load_locomo(args.data or cfg.data.locomo_path), args.split)
    if args.limit:
        convs = [type(c)(c.sample_id, c.speakers, c.turns[: args.limit], c.questions) for c in convs]
    turns = [t for c in convs for t in c.turns]
    gold = np.concatenate([evidence_labels(c) for c in convs])

    from serve.embedder import Embedder
    from serve.transformers_engine import TransformersEngine

    embedder = Embedder(cfg.embedder)
    embedder.encode(["warm-up"])
    # Every turn embedded once, in stream order, in batches of --batch (timed: the batched cost includes it).
    stream = ChunkStream(embedder, cfg.admission.max_turns)
    chunks: list[np.ndarray] = []
    embed_batch_s: list[float] = []
    for start in tqdm(range(0, len(turns), args.batch), desc="embedding batched", file=sys.stderr):
        t0 = time.perf_counter()
        chunks += stream.push(turns[start : start + args.batch])
        embed_batch_s.append(time.perf_counter() - t0)
    sample = even_sample(len(turns), args.latency_turns)
    weights = [w.strip() for w in (args.weights or cfg.admission.weights).split(",") if w.strip()]
    dtypes = [d.strip() for d in (args.dtypes or cfg.admission.dtype).split(",") if d.strip()]
    variants = [time_variant(cfg, w, d, embedder, turns, chunks, embed_batch_s, sample, args.batch, gold)
                for w in weights for d in dtypes]
    labelled_add = np.flatnonzero(gold)  # the type head trains on ADD chunks: score it on those
    teacher = load_labels(PACKAGED_LABELS) if PACKAGED_LABELS.exists() else {}
    taught = [i for i in labelled_add if (turns[i].conv_id, turns[i].dia_id) in teacher]
    taught_types = [teacher[(turns[i].conv_id, turns[i].dia_id)] for i in taught]
    rule_of = {i: content_type_rule(turns[i].text) for i in labelled_add}
    type_vs: list[tuple[dict[str, Any], dict[str, Any] | None]] = []  # per variant: vs the rule, vs the teacher
    for v in variants:
        vs_rule = type_agreement([v["decisions"][i].content_type for i in labelled_add], list(rule_of.values()))
        vs_teacher = (type_agreement([v["decisions"][i].content_type for i in taught], taught_types)
                      if taught else None)
        type_vs.append((vs_rule, vs_teacher))
        v["type_accuracy_vs_rule"] = vs_rule["accuracy"]
        v["type_accuracy_vs_teacher"] = vs_teacher["accuracy"] if vs_teacher else None
    first = variants[0]
    decisions, pred = first.pop("decisions"), first.pop("pred")
    cls_s, embed_s, infer_s = first.pop("single_s"), first.pop("embed_s"), first.pop("infer_s")
    batch_ms = first.pop("batch_ms")
    for v in variants[1:]:
        for key in ("decisions", "single_s", "embed_s", "infer_s", "batch_ms"):
            v.pop(key)
        v["agreement_with_first"] = float((v.pop("pred") == pred).mean())
    trainable = first["trainable_params"]
    threshold = first["threshold"]

    # NOTE: the generative manager runs in the classifier backbone's dtype, so the ratio compares like with like.
    gen_dtype = "bfloat16" if first["dtype"] == "bfloat16" else "float32"
    engine = TransformersEngine(cfg.engine.model_copy(update={"backend": "transformers", "max_batch_size": args.batch,
                                                              "dtype": gen_dtype,
                                                              "cache_dir": str(cfg.paths.cache_dir)}))
    windows = []
    for i in sample:
        conv = next(c for c in convs if c.sample_id == turns[i].conv_id)
        pos = turns[i].index
        windows.append(conv.turns[max(0, pos - cfg.admission.max_turns + 1) : pos + 1])
    generative = {
        "generate": time_generative(engine, [generative_request(w, constrained=False) for w in windows],
                                    args.batch, "generative (free)", generated_op),
        "choice": time_generative(engine, [generative_request(w) for w in windows], args.batch,
                                  "generative (choice)", lambda text: text == "ADD"),
    }

    cls_p = percentiles_ms(cls_s)
    gen_p = {k: percentiles_ms(v[0]) for k, v in generative.items()}
    bat_c = float(np.median(batch_ms))
    bat_g = {k: float(np.median(v[2])) for k, v in generative.items()}
    adds = [d.content_type for d in decisions if d.op == "ADD"]
    summary = {
        "split": args.split,
        "turns": len(turns),
        **quality(pred, gold),
        "latency_p50_ms": {"classifier": cls_p["p50"], **{f"generative_{k}": v["p50"] for k, v in gen_p.items()}},
        "latency_p95_ms": {"classifier": cls_p["p95"], **{f"generative_{k}": v["p95"] for k, v in gen_p.items()}},
        # NOTE: the headline ratio is against the faster generative manager (free generation: one prompt
        # pass + a few decode steps); choice scoring runs one full pass per option.
        "speedup_p50": min(v["p50"] for v in gen_p.values()) / cls_p["p50"],
        "speedup_p50_by_generative": {k: v["p50"] / cls_p["p50"] for k, v in gen_p.items()},
        "trainable_params": trainable,
        "batched_per_turn_ms": {"classifier": bat_c, **{f"generative_{k}": v for k, v in bat_g.items()}},
        "speedup_batched": min(bat_g.values()) / bat_c,
        "batch": args.batch,
        "classifier_parts_p50_ms": {"embed": percentiles_ms(embed_s)["p50"],
                                    "classify": percentiles_ms(infer_s)["p50"]},
        "latency_turns": len(sample),
        "classifier_sample": quality(pred[sample], gold[sample]),
        **{f"generative_{k}_sample": quality(np.array(v[1]), gold[sample]) for k, v in generative.items()},
        "label_add_share": float(gold.mean()),
        "random_f1_same_share": random_f1(float(gold.mean()), float(pred.mean())),
        "store_all_f1": random_f1(float(gold.mean()), 1.0),
        "threshold": threshold,
        "exit_layer": first["exit_layer"],
        "dtype": first["dtype"],
        "generative_dtype": gen_dtype,
        "variants": [{**v, "speedup_p50": min(x["p50"] for x in gen_p.values()) / v["p50_ms"]} for v in variants],
        "content_types_of_add": {t: adds.count(t) for t in CONTENT_TYPES},
        "content_type_vs_rule": type_vs[0][0],
        "content_type_vs_teacher": type_vs[0][1],
        "rule_vs_teacher": type_agreement([rule_of[i] for i in taught], taught_types) if taught else None,
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
