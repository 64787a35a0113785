"""How many tier shards and nodes a workload needs: a back-of-the-envelope model fed by measured costs.

    python -m cluster.capacity --users 1000000 --memories-per-user 1000 --qps 500 \\
        --scale-json results/scale/scale.json --node-cpus 16 --node-memory-gb 64

Every cost comes from a measurement: a ``bench.scale`` run's JSON (:meth:`ShardCosts.from_scale_bench`) or flags
given one by one; nothing is filled in by default, so a plan never rests on a number nobody measured.

The model: a tier shard uses one core, so a node holds at most ``cpus`` shards and each gets
``memory_gb * max_memory_fraction / cpus`` of RAM. Shards are what the larger of two needs asks for:

- memory: every tenant's fixed overhead plus its memories at ``bytes_per_memory`` (HNSW graph and columns),
  in shards of that share of RAM;
- CPU: the cores kept busy by ``queries_per_s * (search_ms + embed_ms) + writes_per_s * insert_ms``, over
  ``target_utilisation`` (headroom for bursts and restarts). The query embedding runs in the ingress, not in a
  shard, but on the same nodes: it is counted here so that the nodes have the cores for it.

Limits: ``search_ms`` is per search of one tenant's memory (each tenant has its own index) at the size
``bench.scale`` measured; a workload whose ``memories_per_user`` is far beyond it searches slower. Router and
assistant actors, the model pool and the ingress's own memory are not in the model. GB is 2**30 bytes.
"""

from __future__ import annotations

import argparse
import json
import math
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any

MIB, GIB = 2**20, 2**30


def _positive(obj: Any, *names: str, zero_ok: tuple[str, ...] = ()) -> None:
    for name in names:
        value = getattr(obj, name)
        if value < 0 or (value == 0 and name not in zero_ok):
            raise ValueError(f"{type(obj).__name__}.{name} must be {'≥' if name in zero_ok else '>'} 0, not {value}")


def _ceil(x: float) -> int:
    """``math.ceil`` that ignores float noise: ``_ceil(3 * 0.1 / 0.1) == 3``, not 4."""
    return math.ceil(round(x, 9))


@dataclass(frozen=True)
class Workload:
    users: int
    memories_per_user: int
    queries_per_s: float
    writes_per_s: float = 0.0

    def __post_init__(self) -> None:
        _positive(self, "users", "memories_per_user", "queries_per_s", "writes_per_s",
                  zero_ok=("memories_per_user", "queries_per_s", "writes_per_s"))


@dataclass(frozen=True)
class ShardCosts:
    """Costs of one tier shard on one core: resident bytes per stored memory (HNSW graph and columns included)
    and per tenant (its fixed overhead), CPU ms per search (without the query embedding), per query embedding
    (done by the ingress) and per stored memory; ``max_memory_fraction``: the share of a node's RAM given to
    shards (the rest: the OS, Ray, the ingress and the models)."""

    bytes_per_memory: float
    bytes_per_tenant: float
    search_ms: float
    embed_ms: float
    insert_ms: float
    max_memory_fraction: float = 0.7

    def __post_init__(self) -> None:
        _positive(self, "bytes_per_memory", "bytes_per_tenant", "search_ms", "embed_ms", "insert_ms",
                  "max_memory_fraction", zero_ok=("bytes_per_tenant", "embed_ms", "insert_ms"))
        if self.max_memory_fraction > 1:
            raise ValueError(f"ShardCosts.max_memory_fraction must be ≤ 1, not {self.max_memory_fraction}")

    @classmethod
    def from_scale_bench(cls, result: dict[str, Any], **overrides: float) -> ShardCosts:
        """The costs a ``bench.scale`` run measured (the JSON it prints last).

        ``bytes_per_memory``: the slope of ``rss_mb`` over ``memories`` between the two largest sizes (the
        process's fixed memory cancels out); ``bytes_per_tenant``: the many-tenants run's memory per tenant less
        its memories at that slope (at least 0); ``search_ms`` and ``insert_ms`` (``1000 / insert_per_s``) at
        the largest size; ``embed_ms``: ``embed_p50_ms``. ``overrides`` replace single fields.
        """
        try:
            sizes = sorted(result["sizes"], key=lambda s: s["memories"])
            tenants, embed_ms = result["tenants"], float(result["embed_p50_ms"])
            if len(sizes) < 2 or sizes[-1]["memories"] <= sizes[-2]["memories"]:
                raise ValueError("a bench.scale result with at least two different sizes is needed")
            small, large = sizes[-2], sizes[-1]
            per_memory = (large["rss_mb"] - small["rss_mb"]) * MIB / (large["memories"] - small["memories"])
            if per_memory <= 0:
                raise ValueError(f"rss_mb did not grow from {small['memories']} to {large['memories']} memories "
                                 "(measurement noise?); rerun bench.scale with larger sizes")
            per_tenant = tenants["rss_mb_per_tenant"] * MIB - tenants["memories"] / tenants["tenants"] * per_memory
            costs = cls(bytes_per_memory=per_memory, bytes_per_tenant=max(0.0, per_tenant),
                        search_ms=float(large["search_p50_ms"]), embed_ms=embed_ms,
                        insert_ms=1000.0 / large["insert_per_s"])
        except KeyError as e:
            raise ValueError(f"not a bench.scale result: no {e.args[0]!r}") from e
        return replace(costs, **overrides)


@dataclass(frozen=True)
class NodeSpec:
    """One node: cores, RAM, and the share of its cores the plan lets the work keep busy."""

    cpus: int
    memory_gb: float
    target_utilisation: float = 0.5

    def __post_init__(self) -> None:
        _positive(self, "cpus", "memory_gb", "target_utilisation")
        if self.target_utilisation > 1:
            raise ValueError(f"NodeSpec.target_utilisation must be ≤ 1, not {self.target_utilisation}")


@dataclass(frozen=True)
class Plan:
    """``memory_gb_total``: the shards' resident memory; ``cpu_cores_needed``: the cores the work keeps busy
    (before the utilisation target); ``bound``: what sets the shard count, ``"memory"`` or ``"cpu"``."""

    tier_shards: int
    nodes: int
    memory_gb_total: float
    cpu_cores_needed: float
    bound: str


def plan(workload: Workload, costs: ShardCosts, node: NodeSpec) -> Plan:
    """Tier shards and nodes for ``workload`` (see the module docstring for the model).

    A million users of 1,000 memories at 3 kB each are ~2,980 GB: 1,065 shards of 2.8 GB (16 per 64 GB node at
    70%); 500 queries/s keep 5 cores busy, 10 at 50%. Memory decides:

    >>> costs = ShardCosts(bytes_per_memory=3000, bytes_per_tenant=200_000, search_ms=2.0, embed_ms=8.0,
    ...                    insert_ms=0.5)
    >>> plan(Workload(users=1_000_000, memories_per_user=1000, queries_per_s=500), costs, NodeSpec(16, 64))
    Plan(tier_shards=1065, nodes=67, memory_gb_total=2980.2, cpu_cores_needed=5.0, bound='memory')

    Ten thousand users asking 2,000 queries/s need 40 cores at 50%, though their 30 GB fit 11 shards:

    >>> plan(Workload(users=10_000, memories_per_user=1000, queries_per_s=2000), costs, NodeSpec(16, 64))
    Plan(tier_shards=40, nodes=3, memory_gb_total=29.8, cpu_cores_needed=20.0, bound='cpu')
    """
    memory = workload.users * (costs.bytes_per_tenant + workload.memories_per_user * costs.bytes_per_memory)
    node_memory = node.memory_gb * GIB * costs.max_memory_fraction
    memory_shards = _ceil(memory / (node_memory / node.cpus))  # NOTE: one core per shard: ``cpus`` shards a node
    busy = (workload.queries_per_s * (costs.search_ms + costs.embed_ms)
            + workload.writes_per_s * costs.insert_ms) / 1000.0
    cpu_shards = _ceil(busy / node.target_utilisation)
    shards = max(1, memory_shards, cpu_shards)
    nodes = max(_ceil(shards / node.cpus), _ceil(memory / node_memory), 1)
    return Plan(tier_shards=shards, nodes=nodes, memory_gb_total=round(memory / GIB, 1),
                cpu_cores_needed=round(busy, 2), bound="memory" if memory_shards >= cpu_shards else "cpu")


COST_FLAGS = {f.name: "--" + f.name.replace("_", "-") for f in fields(ShardCosts) if f.name != "max_memory_fraction"}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(prog="python -m cluster.capacity", description=__doc__.split("\n\n")[0])
    p.add_argument("--users", type=int, required=True)
    p.add_argument("--memories-per-user", type=int, required=True)
    p.add_argument("--qps", type=float, required=True, help="searches per second (ask requests included)")
    p.add_argument("--writes-per-s", type=float, default=0.0, help="memories stored per second")
    p.add_argument("--scale-json", type=Path, default=None,
                   help="a bench.scale run's JSON (its last stdout line); the cost flags below override it")
    for name, flag in COST_FLAGS.items():
        p.add_argument(flag, type=float, default=None, dest=name, help="needed without --scale-json")
    p.add_argument("--max-memory-fraction", type=float, default=0.7, help="share of node RAM given to shards")
    p.add_argument("--node-cpus", type=int, required=True)
    p.add_argument("--node-memory-gb", type=float, required=True)
    p.add_argument("--target-utilisation", type=float, default=0.5, help="share of the cores the work may use")
    args = p.parse_args(argv)
    given = {name: getattr(args, name) for name in COST_FLAGS if getattr(args, name) is not None}
    try:
        if args.scale_json is not None:
            text = args.scale_json.read_text().strip().splitlines()[-1]  # NOTE: a saved stdout ends with the JSON
            costs = ShardCosts.from_scale_bench(json.loads(text), **given,
                                                max_memory_fraction=args.max_memory_fraction)
        else:
            missing = [flag for name, flag in COST_FLAGS.items() if name not in given]
            if missing:
                p.error(f"without --scale-json these are needed: {' '.join(missing)}")
            costs = ShardCosts(**given, max_memory_fraction=args.max_memory_fraction)
        workload = Workload(args.users, args.memories_per_user, args.qps, args.writes_per_s)
        node = NodeSpec(args.node_cpus, args.node_memory_gb, args.target_utilisation)
    except (OSError, ValueError) as e:
        p.error(str(e))
    out = {**asdict(plan(workload, costs, node)),
           "inputs": {"workload": asdict(workload), "costs": asdict(costs), "node": asdict(node)}}
    print(json.dumps(out))
    return out


if __name__ == "__main__":
    main()
