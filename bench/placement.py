"""Tenant placement by simulation: balance over shards and nodes, and how many tenants move when a node joins or
leaves, for each ``cluster.tenant_hash`` scheme (no Ray, no service: the placement functions only).

    python -m bench.placement [--tenants 100000] [--nodes 10,20,50,100,200] [--shards-per-node 4]
                              [--schemes rendezvous,modulo]

``N`` nodes hold ``S`` shards each (``N * S`` in all); node ``k`` holds the shards of ids ``k*S .. k*S+S-1``. Tenant
``t`` is the key ``tenant-t``, hashed with ``pipeline.shards.stable_hash`` as the service hashes it. Per scheme and N:

- ``max_over_mean_shard`` / ``max_over_mean_node``: the most loaded shard (node) over the mean (1.0 is perfect);
- ``moved_on_join``: the share of tenants whose shard changes when node N+1 joins with S new shards;
- ``moved_on_leave``: the same when the last node leaves with its S shards.

How the schemes see a shard: **rendezvous** places a key on the shard *id* of highest weight
(``pipeline.shards.shard_weights``, the very function the service runs); an id's weights do not depend on the other
ids, so a join moves only the tenants the new ids win (ideally S/((N+1)S) = 1/(N+1)) and a leave only those of
the ids that are gone (1/N). **modulo** has no ids, only positions: a key goes to position ``hash % count``, so any
change of count re-deals almost every tenant. A node that leaves from the middle would also renumber the
shards after it (position p+S becomes p); the simulation removes the *last* node, the case most favourable to
modulo, where surviving shards keep their positions and a tenant counts as moved when its position changes.

The markdown table goes to ``<out>/results.md`` (default ``results/placement``); the last stdout line is the JSON.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from bench.common import emit_json, parse_int_list
from core.config import TenantHash, load_config
from pipeline.shards import SCHEMES, shard_seeds, shard_weights, stable_hash

CHUNK = 8192  # NOTE: tenants per weight matrix: 8192 x 804 shards of uint64 is ~50 MB


def tenant_hashes(count: int) -> np.ndarray:
    """``stable_hash`` of the keys ``tenant-0 .. tenant-(count-1)`` as uint64."""
    return np.fromiter((stable_hash(f"tenant-{t}") for t in range(count)), dtype=np.uint64, count=count)


def rendezvous_prefixes(hashes: np.ndarray, shards: Sequence[int]) -> dict[int, np.ndarray]:
    """``{n: shard id of each tenant among ids 0..n-1}`` for each ``n`` in ``shards``, from one weight matrix:
    the ids of a smaller shard set are a prefix of a larger one's, so its placement is the argmax over a prefix
    of the columns."""
    top = max(shards)
    out = {n: np.empty(len(hashes), dtype=np.int64) for n in shards}
    seeds = shard_seeds(np.arange(top))
    for lo in range(0, len(hashes), CHUNK):
        weights = shard_weights(hashes[lo:lo + CHUNK], seeds)
        for n in shards:
            out[n][lo:lo + CHUNK] = weights[:, :n].argmax(axis=1)
    return out


def modulo_placement(hashes: np.ndarray, shards: int) -> np.ndarray:
    """Position ``hash % shards`` of each tenant (``pipeline.shards.shard_of`` under ``modulo``)."""
    return (hashes % np.uint64(shards)).astype(np.int64)


def placements(hashes: np.ndarray, shards: Sequence[int], scheme: TenantHash) -> dict[int, np.ndarray]:
    """``{n: shard of each tenant over n shards}`` for each count in ``shards``, under ``scheme``."""
    if scheme == "rendezvous":
        return rendezvous_prefixes(hashes, shards)
    return {n: modulo_placement(hashes, n) for n in shards}


def max_over_mean(shard_of_tenant: np.ndarray, bins: int) -> float:
    """The most loaded of ``bins`` over the mean load.

    >>> max_over_mean(np.array([0, 0, 1, 1]), 2), max_over_mean(np.array([0, 0, 0, 1]), 2)
    (1.0, 1.5)
    """
    load = np.bincount(shard_of_tenant, minlength=bins)
    return float(load.max() / load.mean())


def moved(before: np.ndarray, after: np.ndarray) -> float:
    """The share of tenants whose shard changed."""
    return float(np.mean(before != after))


def simulate(hashes: np.ndarray, nodes: int, shards_per_node: int, scheme: TenantHash) -> dict[str, Any]:
    """One row of the table: ``nodes`` nodes of ``shards_per_node`` shards, and one node more or less."""
    n = nodes * shards_per_node
    counts = [n, n + shards_per_node] + ([n - shards_per_node] if nodes > 1 else [])
    place = placements(hashes, counts, scheme)
    now = place[n]
    return {
        "scheme": scheme, "nodes": nodes, "shards": n,
        "max_over_mean_shard": max_over_mean(now, n),
        "max_over_mean_node": max_over_mean(now // shards_per_node, nodes),
        "moved_on_join": moved(now, place[n + shards_per_node]),
        "moved_on_leave": moved(now, place[n - shards_per_node]) if nodes > 1 else None,  # no node to lose
        "ideal_moved_on_join": 1 / (nodes + 1), "ideal_moved_on_leave": 1 / nodes,
    }


def _share(x: float | None) -> str:
    return "–" if x is None else f"{x:.4f}"


def markdown(out: dict[str, Any]) -> str:
    head = (f"{out['tenants']:,} tenants, {out['shards_per_node']} shards per node; moved = share of tenants whose "
            "shard changes when one node joins / the last node leaves (ideal 1/(N+1) / 1/N).\n\n")
    rows = ["| scheme | nodes | shards | max/mean shard | max/mean node | moved on join | ideal | moved on leave "
            "| ideal |", "|---|---|---|---|---|---|---|---|---|"]
    for r in out["results"]:
        rows.append(f"| {r['scheme']} | {r['nodes']} | {r['shards']} | {r['max_over_mean_shard']:.3f} | "
                    f"{r['max_over_mean_node']:.3f} | {r['moved_on_join']:.4f} | {r['ideal_moved_on_join']:.4f} | "
                    f"{_share(r['moved_on_leave'])} | {r['ideal_moved_on_leave']:.4f} |")
    return head + "\n".join(rows) + "\n"


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(prog="python -m bench.placement", description=__doc__.split("\n\n")[0])
    parser.add_argument("--tenants", type=int, default=100_000, help="tenants placed")
    parser.add_argument("--nodes", default="10,20,50,100,200", help="comma list of node counts N")
    parser.add_argument("--shards-per-node", type=int, default=4, help="shards on each node (S)")
    parser.add_argument("--schemes", default=",".join(SCHEMES), help=f"comma list of {', '.join(SCHEMES)}")
    parser.add_argument("--out", type=Path, default=None, help="folder of results.md (default: results/placement)")
    args = parser.parse_args(argv)
    schemes = [s.strip() for s in args.schemes.split(",") if s.strip()]
    unknown = sorted(set(schemes) - set(SCHEMES))
    if unknown:
        parser.error(f"unknown schemes {unknown}; known: {', '.join(SCHEMES)}")
    nodes = parse_int_list(args.nodes)
    if args.tenants < 1 or args.shards_per_node < 1 or min(nodes) < 1:
        parser.error("--tenants, --shards-per-node and every node count must be at least 1")

    hashes = tenant_hashes(args.tenants)
    results = []
    with tqdm(total=len(schemes) * len(nodes), desc="placements", unit="run", file=sys.stderr) as bar:
        for scheme in schemes:
            for n in nodes:
                results.append(simulate(hashes, n, args.shards_per_node, scheme))
                bar.update()
    out = {"tenants": args.tenants, "shards_per_node": args.shards_per_node, "results": results}
    folder = args.out or Path(load_config().paths.results_dir) / "placement"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "results.md").write_text(markdown(out))
    emit_json(out)
    return out


if __name__ == "__main__":
    main()
