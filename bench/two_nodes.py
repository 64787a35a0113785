"""The service on a two-node Ray cluster on this machine: where the actors run, which requests reach them.

    python -m bench.two_nodes [--tenants 16] [--turns 24] [--searches 400] [--tier-shards 4] [--routers 2]

(through ``bin/loopback-only``: it starts a Ray head and a worker node with ``ray start``, Serve on the head).
The cluster's ``placement: round_robin`` pins actor ``i`` of each kind to node ``i % 2``, so with 4 tier shards
and 2 routers each node holds two tier shards and one router. Steps:

1. start the head (2 CPUs, the ingress, embedder and model pools pinned there) and a worker node (2 CPUs);
2. the service with ``--tier-shards`` tier shards, ``--routers`` routers and as many assistant actors, API keys
   and journals on (a temporary storage dir both nodes reach);
3. ``--tenants`` users with ``--turns`` turns each over HTTP (``POST /v1/turns``);
4. ``--searches`` searches over HTTP, spread evenly over the users, one at a time;
5. each actor reports its node and tenants; each tier shard counts the searches it answered
   (``TenantTiers.stats``, counted in the actor, not by the client); search p50 is split by the node of the
   tier shard that held the user, with the replica's ``Server-Timing`` steps.

Writes ``results/two_nodes/two_nodes.json`` and ``two_nodes.md``; prints the JSON last on stdout.
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import signal
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import numpy as np
from tqdm import tqdm

from bench.cluster import step_medians
from bench.common import admin_key, bearer, emit_json, offline_service_env, setup_logging
from cluster.local_cluster import LocalCluster, free_port
from core import timings
from core.config import load_config

offline_service_env()

TOPICS = ("the garden", "a trip to Lisbon", "the new job", "piano lessons", "a broken bike", "the book club")


def tenant_turns(tenant: str, n: int) -> list[dict[str, Any]]:
    """``n`` distinct turns of one user (a topic and a number each, so searches have something to find)."""
    return [{"id": f"t{i}", "speaker": "user" if i % 2 == 0 else "assistant",
             "text": f"{tenant} talks about {TOPICS[i % len(TOPICS)]}, item number {i * 7 + 3}."}
            for i in range(n)]


def service_config(args: argparse.Namespace, storage: str, keys_file: Path, port: int) -> dict[str, Any]:
    on_head = {"resources": {"engram_head": 1}}
    return {
        "profile": "cpu",
        "config": {
            "engine": {"backend": "transformers"},  # NOTE: search never calls the pool; it starts in seconds
            "admission": {"mode": "store_all"},
            "cluster": {"namespace": f"two-nodes-{port}", "tier_shards": args.tier_shards,
                        "router_shards": args.routers, "assistant_actors": args.routers, "placement": "round_robin",
                        "storage_dir": storage},
            "auth": {"keys_file": str(keys_file)},
        },
        **{name: on_head for name in ("ingress", "embedder", "admission", "llm", "master")},
    }


def node_of(actor: Any) -> str:
    import ray

    return ray.get(actor.__ray_call__.remote(lambda self: ray.get_runtime_context().get_node_id()), timeout=120)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.two_nodes", description=__doc__.split("\n\n")[0])
    parser.add_argument("--tenants", type=int, default=16)
    parser.add_argument("--turns", type=int, default=24, help="turns per tenant")
    parser.add_argument("--searches", type=int, default=400)
    parser.add_argument("--tier-shards", type=int, default=4)
    parser.add_argument("--routers", type=int, default=2, help="router shards (and assistant actors)")
    parser.add_argument("--out", type=Path, default=None, help="results folder (default: results/two_nodes)")
    args = parser.parse_args(argv)
    if args.tenants < 1 or args.searches < 1 or args.tier_shards < 2 or args.routers < 2:
        parser.error("--tenants and --searches must be >= 1, --tier-shards and --routers >= 2 (one per node)")
    setup_logging()
    logging.getLogger("httpx").setLevel(logging.WARNING)

    import ray
    from ray import serve

    from serve.app import build_app
    from serve.topology import Topology

    # NOTE: a SIGTERM (timeout, Ctrl-C of a wrapper) unwinds through ``finally``, so the nodes are stopped
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    cluster = LocalCluster(head_cpus=2)
    storage = tempfile.mkdtemp(prefix="engram-two-nodes-state-")
    keys_dir = tempfile.mkdtemp(prefix="engram-two-nodes-keys-")
    keys_file, key = admin_key(keys_dir)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    tenants = [f"user-{i:03d}" for i in range(args.tenants)]
    try:
        cluster.start_head()
        cluster.start_worker(num_cpus=2)
        ray.init(address=cluster.address, namespace="bench", include_dashboard=False, log_to_driver=False)
        cluster.wait_for_nodes(2, timeout_s=120)
        head = next(n["NodeID"] for n in ray.nodes() if n["Alive"] and "node:__internal_head__" in n["Resources"])
        serve.start(http_options={"host": "127.0.0.1", "port": port}, proxy_location="HeadOnly")
        spec = service_config(args, storage, keys_file, port)
        start = time.perf_counter()
        serve.run(build_app(spec), name="engram", route_prefix="/")
        with httpx.Client(base_url=url, timeout=600, headers=bearer(key)) as client:
            health = client.get("/v1/health").json()
            startup_s = time.perf_counter() - start
            start = time.perf_counter()
            for tenant in tqdm(tenants, desc="ingest", file=sys.stderr):
                client.post("/v1/turns", json={"user_id": tenant, "turns": tenant_turns(tenant, args.turns)}
                            ).raise_for_status()
            ingest = args.tenants * args.turns / (time.perf_counter() - start)

            topo = Topology.connect(load_config("cpu", spec["config"]))
            where = {name: "head" if node_of(actor) == head else "worker" for name, actor in topo.all().items()}
            shard_of = {t: f"tier-{topo.tiers.index(topo.tier_for(t))}" for t in tenants}
            shard_node = {t: where[shard_of[t]] for t in tenants}
            before = {i: _queries(ray.get(a.stats.remote())) for i, a in enumerate(topo.tiers)}

            by_node: dict[str, list[tuple[float, dict[str, list[float]]]]] = {"head": [], "worker": []}
            for i in tqdm(range(args.searches), desc="search", file=sys.stderr):
                tenant = tenants[i % len(tenants)]
                topic = TOPICS[i % len(TOPICS)]
                t0 = time.perf_counter()
                r = client.post("/v1/search", json={"user_id": tenant, "query": f"what about {topic}?", "k": 5})
                elapsed = time.perf_counter() - t0
                r.raise_for_status()
                if not r.json()["memories"]:
                    raise RuntimeError(f"search for {tenant} found nothing")
                by_node[shard_node[tenant]].append((elapsed, timings.parse(r.headers.get("server-timing", ""))))
            served = {f"tier-{i}": _queries(ray.get(a.stats.remote())) - before[i] for i, a in enumerate(topo.tiers)}
            tier_tenants = {f"tier-{i}": len(ray.get(a.tenants.remote())) for i, a in enumerate(topo.tiers)}
            router_tenants = {f"router-{i}": len(ray.get(a.tenants.remote())) for i, a in enumerate(topo.routers)}
    finally:
        try:
            serve.shutdown()
        finally:
            ray.shutdown()
            cluster.stop()
            shutil.rmtree(storage, ignore_errors=True)
            shutil.rmtree(keys_dir, ignore_errors=True)

    sent = Counter(shard_of[tenants[i % len(tenants)]] for i in range(args.searches))
    payload = {
        "nodes": 2, "tenants": args.tenants, "turns_per_tenant": args.turns, "searches": args.searches,
        "startup_s": startup_s, "health": health["status"], "ingest_turns_per_s": ingest,
        "actors": where,
        "actors_per_node": {n: sorted(a for a, w in where.items() if w == n) for n in ("head", "worker")},
        "tier_tenants": tier_tenants, "router_tenants": router_tenants,
        "tier_searches_served": served, "tier_searches_sent": {name: sent[name] for name in served},
        "searches_per_node": {n: len(v) for n, v in by_node.items()},
        "search_p50_ms": {n: _p50([t * 1000 for t, _ in v]) for n, v in by_node.items()},
        "search_steps_p50_ms": {n: step_medians(v) for n, v in by_node.items()},
    }
    out = args.out or Path(load_config().paths.results_dir) / "two_nodes"
    out.mkdir(parents=True, exist_ok=True)
    (out / "two_nodes.json").write_text(json.dumps(payload, indent=2))
    (out / "two_nodes.md").write_text(markdown(payload))
    emit_json(payload)


def _queries(stats: dict[str, dict[str, int]]) -> int:
    return sum(s.get("queries", 0) for s in stats.values())


def _p50(values: list[float]) -> float:
    return float(np.percentile(values, 50)) if values else float("nan")


def markdown(p: dict[str, Any]) -> str:
    rows = [("actors on the head", ", ".join(p["actors_per_node"]["head"])),
            ("actors on the worker", ", ".join(p["actors_per_node"]["worker"]))]
    rows += [(f"{name}: tenants / searches answered (sent)",
              f"{p['tier_tenants'][name]} / {p['tier_searches_served'][name]} ({p['tier_searches_sent'][name]})")
             for name in p["tier_tenants"]]
    rows += [(f"{name}: tenants", str(n)) for name, n in p["router_tenants"].items()]
    for node in ("head", "worker"):
        steps = p["search_steps_p50_ms"][node]
        rows.append((f"search p50, tier shard on the {node} (ms; {p['searches_per_node'][node]} searches)",
                     f"{p['search_p50_ms'][node]:.1f} (" + ", ".join(f"{k} {v:.1f}" for k, v in steps.items()) + ")"))
    rows.append(("ingest over HTTP (turns/s)", f"{p['ingest_turns_per_s']:.1f}"))
    return "| measure | value |\n|---|---|\n" + "\n".join(f"| {a} | {b} |" for a, b in rows) + "\n"


if __name__ == "__main__":
    main()
