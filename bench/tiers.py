"""HTM-EAR synthetic saturation benchmark on real embeddings.

For each seed the facts of the largest requested scenario are embedded once (A and C are
prefixes of B's stream) and cached; every (scenario, mode) then ingests those vectors into
a fresh memory and answers the 101 "active" and 100 "historical" queries. Query latency is
the wall time of ``retrieve`` including the query's embedding; ingest rate covers indexing
and eviction of pre-computed vectors. MRR@5 as in the paper.

    python -m bench.tiers --quick                       # one seed, scenario B scaled by 1/5, ~1 min
    python -m bench.tiers --scenario A,B,C --seeds 42-46 --modes full,full@0.84,no_rerank,no_gate,lru,oracle
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tqdm import tqdm

from bench import encoding
from bench.common import emit_json, parse_int_list, percentiles_ms, reciprocal_rank, setup_logging, warm_up
from bench.modes import MODES, mode_config, parse_mode
from bench.synthetic import SCENARIOS, Fact, generate_facts, query_ids
from bench.tiers_report import write_report
from cluster.embedding_cache import embed_cached
from core.config import EngramConfig, load_config
from memory.rerank import build_reranker
from memory.tiered_memory import TieredMemory
from serve.embedder import Embedder

QUICK = {"scenario": "B", "scale": 5, "seeds": [42]}


@dataclass(frozen=True)
class Scenario:
    name: str
    n: int
    l1: int
    l2: int


def scenarios_for(names: list[str], scale: int) -> list[Scenario]:
    out = []
    for name in names:
        if name not in SCENARIOS:
            raise ValueError(f"unknown scenario {name!r}; known: {', '.join(SCENARIOS)}")
        n, l1, l2 = SCENARIOS[name]
        label = name if scale == 1 else f"{name}/{scale}"
        out.append(Scenario(label, n // scale, l1 // scale, l2 // scale))
    return out


def run_one(cfg: EngramConfig, embedder: Embedder, reranker, sc: Scenario, mode: str, facts: list[Fact],
            vectors: np.ndarray) -> dict:
    base = cfg.tiers.model_copy(update={
        "l1": cfg.tiers.l1.model_copy(update={"capacity": sc.l1}),
        "l2": cfg.tiers.l2.model_copy(update={"capacity": sc.l2}),
    })
    tiers = mode_config(base, mode, total_items=sc.n)
    memory = TieredMemory(tiers, embedder.dim, reranker=reranker if tiers.rerank.kind != "none" else None)
    facts = facts[: sc.n]
    start = time.perf_counter()
    memory.add([f.text for f in facts], ids=[f.id for f in facts], importance=[f.importance for f in facts],
               vectors=vectors[: sc.n])
    ingest_s = time.perf_counter() - start

    result: dict = {"mode": mode}
    latencies: dict[str, list[float]] = {}
    for phase, ids in query_ids(sc.n).items():  # active first, as the reference does
        rr, lat = [], []
        for i in ids:
            t0 = time.perf_counter()
            hits = encoding.retrieve(memory, embedder, facts[i - 1].query)  # embedded inside the timing, as before
            lat.append(time.perf_counter() - t0)
            rr.append(reciprocal_rank(i, [h.id for h in hits]))
        result[f"{phase}_mrr"] = float(np.mean(rr))
        latencies[phase] = lat
    active = percentiles_ms(latencies["active"])
    result.update({
        "essential_lost": memory.stats.essential_lost, "pruned": memory.stats.pruned,
        "latency_p50_ms": active["p50"], "latency_p95_ms": active["p95"], "latency_mean_ms": active["mean"],
        "ingest_per_s": sc.n / ingest_s,
        "gate_fired": memory.stats.gate_fired, "queries": memory.stats.queries,
        "gate_threshold": tiers.gate.similarity_threshold, "gate_mode": tiers.gate.mode,
        "reranker": tiers.rerank.kind,
    })
    return result


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description="HTM-EAR synthetic saturation benchmark")
    parser.add_argument("--scenario", default=None, help="A, B, C or a comma list (default B)")
    parser.add_argument("--seeds", default=None, help="e.g. 42,43 or 42-46 (default 42-46)")
    parser.add_argument("--modes", default=",".join(MODES),
                        help=f"comma list of {', '.join(MODES)}; a suffix @T sets the gate threshold (full@0.84)")
    parser.add_argument("--quick", action="store_true", help="seed 42, scenario B scaled by 1/5 (n=3000)")
    parser.add_argument("--profile", default=None, help="config profile (default: $ENGRAM_PROFILE or cpu)")
    parser.add_argument("--results-dir", type=Path, default=None, help="where tables and plots go")
    args = parser.parse_args(argv)

    scale = QUICK["scale"] if args.quick else 1
    names = (args.scenario or QUICK["scenario"]).split(",")
    seeds = parse_int_list(args.seeds) if args.seeds else (QUICK["seeds"] if args.quick else list(range(42, 47)))
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    try:
        for m in modes:
            parse_mode(m)
        scens = scenarios_for([s.strip() for s in names], scale)
    except ValueError as exc:
        parser.error(str(exc))

    setup_logging()
    cfg = load_config(args.profile)
    results_dir = (args.results_dir or cfg.paths.results_dir) / "tiers"
    embedder = Embedder(cfg.embedder)
    reranker = build_reranker(cfg.tiers.rerank)
    warm_up(embedder)
    n_max = max(s.n for s in scens)

    runs = {s.name: [] for s in scens}
    embed_rates = []
    bar = tqdm(total=len(seeds) * len(scens) * len(modes), desc="runs", unit="run")
    for seed in seeds:
        facts = generate_facts(n_max, seed)
        vectors, rate = embed_cached(embedder, [f.text for f in facts], cfg.paths.cache_dir,
                                     label=f"synthetic-{seed}")
        if rate:
            embed_rates.append(rate)
        for sc in scens:
            for mode in modes:
                bar.set_postfix_str(f"seed {seed} {sc.name} {mode}")
                runs[sc.name].append({**run_one(cfg, embedder, reranker, sc, mode, facts, vectors), "seed": seed})
                bar.update()
    bar.close()

    payloads = [{"scenario": s.name, "n": s.n, "l1": s.l1, "l2": s.l2, "results": runs[s.name]} for s in scens]
    for p in payloads:
        p["summary"] = summarise(p["results"])
    meta = {"embedder": cfg.embedder.model, "reranker": cfg.tiers.rerank.kind,
            "embed_facts_per_s": float(np.mean(embed_rates)) if embed_rates else None,
            "seeds": seeds, "modes": modes}
    results_dir.mkdir(parents=True, exist_ok=True)
    (results_dir / "tiers.json").write_text(json.dumps({"meta": meta, "scenarios": payloads}, indent=1))
    write_report(payloads, meta, results_dir)
    out = {**payloads[0], **meta} if len(payloads) == 1 else {"scenarios": payloads, **meta}
    emit_json(out)
    return out


def summarise(results: list[dict]) -> dict:
    """Mean over seeds per mode, plus the full/lru p50 latency ratio when both ran."""
    keys = ("active_mrr", "historical_mrr", "essential_lost", "pruned", "latency_p50_ms", "latency_p95_ms",
            "ingest_per_s")
    by_mode: dict[str, dict] = {}
    for mode in dict.fromkeys(r["mode"] for r in results):
        rows = [r for r in results if r["mode"] == mode]
        by_mode[mode] = {k: float(np.mean([r[k] for r in rows])) for k in keys}
        by_mode[mode]["seeds"] = len(rows)
    summary: dict = {"by_mode": by_mode}
    if "full" in by_mode and "lru" in by_mode:
        summary["latency_ratio_full_vs_lru_p50"] = by_mode["full"]["latency_p50_ms"] / by_mode["lru"]["latency_p50_ms"]
    return summary


if __name__ == "__main__":
    main()
