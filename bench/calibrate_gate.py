"""Calibrate the HTM-EAR gate's similarity threshold for an embedder on a seed that is never evaluated.

HTM-EAR's 0.84 was set for e5-large-v2; other embedders put similarities elsewhere. This
ingests scenario B's facts for ``--seed`` (default 41; the evaluation uses 42-46), prints
the similarity distributions the gate sees, then runs the full system's query phase at a
grid of thresholds and picks the one with the best active + historical MRR@5 (ties: the
highest threshold). The chosen value belongs in the embedder's profile (configs/*.yaml).

    python -m bench.calibrate_gate --seed 41
"""

from __future__ import annotations

import argparse

import numpy as np
from tqdm import tqdm

from bench.common import emit_json, reciprocal_rank, setup_logging
from bench.modes import mode_config
from bench.synthetic import SCENARIOS, generate_facts, query_ids
from cluster.embedding_cache import embed_cached
from core.config import TierConfig, load_config
from memory.tiered_memory import TieredMemory
from serve.embedder import Embedder


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=41, help="calibration seed (must not be an evaluated one)")
    parser.add_argument("--profile", default=None, help="config profile (default: $ENGRAM_PROFILE or cpu)")
    parser.add_argument("--grid", default="0.60:0.90:0.01", help="thresholds as start:stop:step")
    args = parser.parse_args(argv)
    if 42 <= args.seed <= 46:
        parser.error("seeds 42-46 are the evaluation seeds; calibrate on another one")
    setup_logging()
    cfg = load_config(args.profile)
    embedder = Embedder(cfg.embedder)
    n, l1, l2 = SCENARIOS["B"]
    facts = generate_facts(n, args.seed)
    vectors, _ = embed_cached(embedder, [f.text for f in facts], cfg.paths.cache_dir, label=f"synthetic-{args.seed}")
    base = cfg.tiers.model_copy(update={"l1": TierConfig(capacity=l1), "l2": TierConfig(capacity=l2)})
    memory = TieredMemory(mode_config(base, "full", total_items=n), embedder.dim)
    memory.add([f.text for f in facts], ids=[f.id for f in facts], importance=[f.importance for f in facts],
               vectors=vectors)
    sets = query_ids(n)
    ids = sets["active"] + sets["historical"]
    qvec = dict(zip(ids, embedder.encode([facts[i - 1].query for i in ids], is_query=True), strict=True))

    # What the gate sees: L1's best similarity when the target is in L1 vs when it is not.
    top_hit, top_miss = [], []
    for i in ids:
        _, sims = memory.l1.search(qvec[i], 1)
        (top_hit if i in memory.l1 else top_miss).append(float(sims[0]))
    match = [float(vectors[i - 1] @ qvec[i]) for i in sets["active"]]

    start, stop, step = (float(x) for x in args.grid.split(":"))
    grid = np.round(np.arange(start, stop + step / 2, step), 4)
    rows = []
    for threshold in tqdm(grid, desc="thresholds"):
        memory.config.gate.similarity_threshold = float(threshold)
        mrr = {name: float(np.mean([reciprocal_rank(i, [h.id for h in memory.retrieve(facts[i - 1].query,
                                                                                    vector=qvec[i])])
                                     for i in group])) for name, group in sets.items()}
        rows.append({"threshold": float(threshold), **mrr})
    best = max(rows, key=lambda r: (round(r["active"] + r["historical"], 6), r["threshold"]))

    def q(values: list[float]) -> dict[str, float]:
        return {f"p{p}": round(float(np.percentile(values, p)), 4) for p in (5, 10, 50, 90)}

    emit_json({
        "seed": args.seed, "embedder": cfg.embedder.model, "gate_mode": cfg.tiers.gate.mode,
        "matching_pair_similarity": q(match), "l1_top_similarity_target_in_l1": q(top_hit),
        "l1_top_similarity_target_not_in_l1": q(top_miss), "grid": rows, "calibrated_threshold": best["threshold"],
    })


if __name__ == "__main__":
    main()
