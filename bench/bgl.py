"""HTM-EAR on real logs: the 2,000 lines of BGL_2k.log through L1=500 / L2=5000.

Importance 0.95 for lines containing fatal/error/panic/fail (lowercased), else 0.5. The BGL
entity patterns are used at ingest *and* at query time (HTM-EAR's code used the synthetic
patterns for both, a bug). A query names up to 2 of the target line's entities (sorted, so
runs reproduce) in one of four templates, or "Retrieve log entry {i}" when it has none.
200 target lines, the same for every mode; MRR@5 against the exact line.

    python -m bench.bgl --modes full,lru,oracle
"""

from __future__ import annotations

import argparse
import json
import random
import time
from pathlib import Path

import numpy as np
from tqdm import tqdm

from bench import encoding
from bench.common import emit_json, percentiles_ms, reciprocal_rank, setup_logging, warm_up
from bench.modes import mode_config, parse_mode
from cluster.embedding_cache import embed_cached
from core.config import load_config
from memory.entities import EntityExtractor
from memory.rerank import build_reranker
from memory.tiered_memory import TieredMemory
from serve.embedder import Embedder

IMPORTANT_WORDS = ("fatal", "error", "panic", "fail")
TEMPLATES = (
    "Find the log entry containing {x}",
    "Show me the system logs regarding {x}",
    "What was the recorded error status involving {x}?",
    "Retrieve the log entry with {x}",
)
PAPER = {"full": 0.336, "oracle": 0.370, "lru": 0.069}


def load_lines(path: Path) -> list[str]:
    if not path.is_file():
        raise FileNotFoundError(f"BGL log not found at {path}; set ENGRAM_DATA__BGL_PATH or pass --data")
    return [line.strip() for line in path.read_text(errors="replace").splitlines() if line.strip()]


def importance_of(line: str) -> float:
    lower = line.lower()
    return 0.95 if any(w in lower for w in IMPORTANT_WORDS) else 0.5


def make_queries(lines: list[str], extract: EntityExtractor, seed: int, count: int) -> list[tuple[int, str]]:
    """(target id, query) for ``count`` random lines; ids are 1-based line numbers."""
    rng = random.Random(seed)
    targets = rng.sample(range(1, len(lines) + 1), min(count, len(lines)))
    out = []
    for i in targets:
        entities = list(extract(lines[i - 1]))  # sorted by the extractor
        if entities:
            focus = " and ".join(rng.sample(entities, min(2, len(entities))))
            out.append((i, rng.choice(TEMPLATES).format(x=focus)))
        else:
            out.append((i, f"Retrieve log entry {i}"))
    return out


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description="HTM-EAR on BGL logs")
    parser.add_argument("--data", type=Path, default=None, help="BGL_2k.log (default: config bench.bgl_path)")
    parser.add_argument("--query-seed", type=int, default=42, help="seed of target lines and query wording")
    parser.add_argument("--queries", type=int, default=200, help="number of target lines")
    parser.add_argument("--modes", default="full,lru,oracle", help="comma list (full, lru, oracle, no_gate, ...)")
    parser.add_argument("--profile", default=None, help="config profile (default: $ENGRAM_PROFILE or cpu)")
    parser.add_argument("--results-dir", type=Path, default=None)
    args = parser.parse_args(argv)
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    try:
        for m in modes:
            parse_mode(m)
    except ValueError as exc:
        parser.error(str(exc))

    setup_logging()
    cfg = load_config(args.profile)
    cfg.tiers.entities.active = "bgl"
    lines = load_lines(args.data or cfg.bench.bgl_path)
    extract = EntityExtractor(cfg.tiers.entities.patterns)
    queries = make_queries(lines, extract, args.query_seed, args.queries)
    embedder = Embedder(cfg.embedder)
    vectors, _ = embed_cached(embedder, lines, cfg.paths.cache_dir, label="bgl")
    reranker = build_reranker(cfg.tiers.rerank)
    warm_up(embedder)

    results = []
    for mode in tqdm(modes, desc="modes"):
        tiers = mode_config(cfg.tiers, mode, total_items=len(lines))
        memory = TieredMemory(tiers, embedder.dim, reranker=reranker if tiers.rerank.kind != "none" else None)
        memory.add(lines, ids=list(range(1, len(lines) + 1)), importance=[importance_of(x) for x in lines],
                   vectors=vectors)
        rr, lat = [], []
        for target, query in queries:
            t0 = time.perf_counter()
            hits = encoding.retrieve(memory, embedder, query)
            lat.append(time.perf_counter() - t0)
            rr.append(reciprocal_rank(target, [h.id for h in hits]))
        p = percentiles_ms(lat)
        results.append({"mode": mode, "mrr": float(np.mean(rr)), "paper_mrr": PAPER.get(mode),
                        "latency_p50_ms": p["p50"], "latency_p95_ms": p["p95"],
                        "in_l1": len(memory.l1), "gate_fired": memory.stats.gate_fired,
                        "essential_lost": memory.stats.essential_lost})

    important = sum(importance_of(x) > 0.5 for x in lines)
    out = {"n": len(lines), "queries": len(queries), "important_lines": important, "query_seed": args.query_seed,
           "embedder": cfg.embedder.model, "reranker": cfg.tiers.rerank.kind, "results": results}
    results_dir = (args.results_dir or cfg.paths.results_dir) / "tiers"
    results_dir.mkdir(parents=True, exist_ok=True)
    table = ["| mode | MRR@5 | paper | p50 ms | p95 ms | gate fired |", "|---|---|---|---|---|---|"]
    for r in results:
        paper = f"{r['paper_mrr']:.3f}" if r["paper_mrr"] is not None else "–"
        table.append(f"| {r['mode']} | {r['mrr']:.3f} | {paper} | {r['latency_p50_ms']:.1f} | "
                     f"{r['latency_p95_ms']:.1f} | {r['gate_fired']} |")
    (results_dir / "bgl.md").write_text(
        f"BGL_2k: {len(lines)} lines ({important} important), {len(queries)} queries (seed {args.query_seed}), "
        f"embedder {cfg.embedder.model}, re-ranker {cfg.tiers.rerank.kind}\n\n" + "\n".join(table) + "\n")
    (results_dir / "bgl.json").write_text(json.dumps(out, indent=1))
    emit_json(out)
    return out


if __name__ == "__main__":
    main()
