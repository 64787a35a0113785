"""Durability under kills: ingest over HTTP while stateful actors are SIGKILLed, then count what was lost.

    python -m bench.chaos [--turns 5000] [--kill-every 3] [--tenants 8] [--writers 4] [--no-node-kill]

(through ``bin/loopback-only``). Starts a head and a worker node on this machine
(``cluster.local_cluster``), the service with journaled actors (transformers pool: the model is not
what is tested), and ``--writers`` client threads that post LoCoMo turns in batches of 10 for
``--tenants`` users. A *turn is acknowledged* when its batch got a 200; a batch that fails (503 while an
actor restarts, a dropped connection) is resent with the same turn ids until it is acknowledged — the
write path is idempotent, so a resend completes a write that failed half-way. Meanwhile a killer sends
SIGKILL to the process of a random tier / router / assistant actor every ``--kill-every`` seconds and,
half-way, kills the worker node (unless ``--no-node-kill``); each restart's recovery time is the time
until the actor answers a ping again.

Afterwards: every acknowledged turn must be listed in its user's tier memory and held by its user's
episodic stream (router); ``lost`` counts those that are not. The tier capacities are raised so that no
memory is evicted (eviction is not loss). Prints one JSON object last; writes results/chaos/chaos.json.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from bench.common import admin_key, bearer, emit_json, setup_logging
from core.config import load_config
from corpora.locomo import load_locomo

log = logging.getLogger("bench.chaos")


def chaos_args(storage: str, *, turns: int, keys_file: str) -> dict[str, Any]:
    on_head = {"resources": {"engram_head": 1}}
    big = max(2 * turns, 1000)
    return {
        "profile": "cpu",
        "config": {
            "engine": {"backend": "transformers", "max_model_len": 2048},
            "admission": {"mode": "store_all"},
            "episodic": {"segment_tokens": 256},
            "tiers": {"l1": {"capacity": big}, "l2": {"capacity": big}},
            "cluster": {"namespace": "chaos", "storage_dir": storage, "snapshot_every": 200,
                        "summaries": False, "actor_call_timeout_s": 30},
            "auth": {"keys_file": keys_file},
        },
        **{name: on_head for name in ("ingress", "embedder", "admission", "llm", "master")},
    }


def actor_pid(handle: Any, timeout_s: float = 10.0) -> int:
    import ray

    return ray.get(handle.__ray_call__.remote(lambda self: os.getpid()), timeout=timeout_s)


class Killer(threading.Thread):
    """SIGKILLs a random stateful actor's process every ``every`` seconds; records recovery times."""

    def __init__(self, names: list[str], every: float, namespace: str, seed: int = 0, node_kill: Any = None) -> None:
        super().__init__(daemon=True)
        self.names, self.every, self.namespace, self.rng = names, every, namespace, random.Random(seed)
        self.node_kill = node_kill  # called once, half-way
        self.stop_event, self.half_way = threading.Event(), threading.Event()
        self.kills, self.recovery_s, self.errors = 0, [], []

    def run(self) -> None:
        import ray

        while not self.stop_event.wait(self.every):
            if self.half_way.is_set() and self.node_kill is not None:
                node_kill, self.node_kill = self.node_kill, None
                node_kill()
                self.kills += 1
                continue
            name = self.rng.choice(self.names)
            try:
                handle = ray.get_actor(name, namespace=self.namespace)
                os.kill(actor_pid(handle), signal.SIGKILL)
                killed = time.perf_counter()
                self.kills += 1
                while not self.stop_event.is_set():
                    try:
                        ray.get(ray.get_actor(name, namespace=self.namespace).ping.remote(), timeout=5)
                        self.recovery_s.append(time.perf_counter() - killed)
                        break
                    except Exception:  # NOTE: restarting, or revived under the same name by the ingress
                        time.sleep(0.1)
            except Exception as e:  # an actor that is restarting has no pid to report: skip this round
                self.errors.append(f"{name}: {type(e).__name__}")


def write_all(url: str, work: list[tuple[str, list[dict]]], writers: int, progress: Any,
              api_key: str | None = None) -> dict[str, set[str]]:
    """Post every batch until it is acknowledged; returns the acknowledged turn ids per user."""
    acked: dict[str, set[str]] = {}
    lock = threading.Lock()
    queue = list(reversed(work))

    def writer() -> None:
        with httpx.Client(base_url=url, timeout=120, headers=bearer(api_key)) as client:
            while True:
                with lock:
                    if not queue:
                        return
                    user, turns = queue.pop()
                deadline = time.time() + 300
                while True:
                    try:
                        r = client.post("/v1/turns", json={"user_id": user, "turns": turns})
                        if r.status_code == 200:
                            break
                        if r.status_code < 500:
                            raise RuntimeError(f"rejected: {r.status_code} {r.text[:200]}")
                    except httpx.TransportError:
                        pass
                    if time.time() > deadline:
                        raise RuntimeError(f"a batch of {user} was not acknowledged within 300 s")
                    time.sleep(0.5)
                with lock:
                    # NOTE: a turn the write dedup answered as a duplicate (not admitted) was never to be stored
                    acked.setdefault(user, set()).update(x["id"] for x in r.json()["results"] if x["admitted"])
                    progress(len(turns))

    threads = [threading.Thread(target=writer) for _ in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return acked


def verify(url: str, acked: dict[str, set[str]], config: Any, api_key: str | None = None) -> dict[str, int]:
    """Acknowledged turns missing from the tier memories / the episodic streams, closed segments that no
    assistant actor holds, turns stored twice (a memory id listed twice, or a turn among the own lines of two
    held segments — a segment's leading ``overlap`` lines are its designed replay and do not count) and turns
    half-applied (in the tiers or in the stream, not in both)."""
    import ray

    from serve.topology import Topology

    topo = Topology.connect(config)
    missing_tier = missing_episodes = missing_segments = found = twice = half = 0
    with httpx.Client(base_url=url, timeout=120, headers=bearer(api_key)) as client:
        for user, ids in acked.items():
            listed: Counter[str] = Counter()
            offset = 0
            while True:
                page = client.get("/v1/memories", params={"user_id": user, "offset": offset, "limit": 1000}).json()
                listed.update(m["id"] for m in page["memories"])
                offset += len(page["memories"])
                if offset >= page["total"] or not page["memories"]:
                    break
            in_stream = ray.get(topo.router_for(user).turn_ids.remote(user), timeout=60)
            closed = set(ray.get(topo.router_for(user).segment_ids.remote(user), timeout=60))
            segments = [seg for held in ray.get([a.segments.remote(user) for a in topo.assistants], timeout=60)
                        for seg in held]
            own = Counter(t for seg in segments for t in seg.turn_ids[seg.overlap :])
            missing_segments += len(closed - {seg.id for seg in segments})
            missing_tier += len(ids - set(listed))
            missing_episodes += len(ids - in_stream)
            found += len(ids & set(listed) & in_stream)
            twice += sum(1 for n in listed.values() if n > 1) + sum(1 for n in own.values() if n > 1)
            half += len(ids & (set(listed) ^ in_stream))
    return {"turns_found": found, "missing_tier": missing_tier, "missing_episodes": missing_episodes,
            "missing_segments": missing_segments, "stored_twice": twice, "half_applied": half}


def workload(turns: int, tenants: int, data: Path, prefix: str = "user") -> list[tuple[str, list[dict]]]:
    """LoCoMo turns (cycled when more are asked for) dealt to users, in batches of 10, users interleaved."""
    pool = [t for c in load_locomo(data) for t in c.turns]
    per_user: dict[str, list[dict]] = {f"{prefix}-{u}": [] for u in range(tenants)}
    for i in range(turns):
        t = pool[i % len(pool)]
        per_user[f"{prefix}-{i % tenants}"].append({"id": f"t{i}", "speaker": t.speaker, "text": t.text,
                                                    "timestamp": t.timestamp.isoformat(), "date_time": t.date_time})
    batches = {u: [ts[k : k + 10] for k in range(0, len(ts), 10)] for u, ts in per_user.items()}
    return [(u, b[k]) for k in range(max(map(len, batches.values()))) for u, b in batches.items() if k < len(b)]


def run(url: str, config: Any, *, turns: int, kill_every: float, tenants: int, writers: int, data: Path,
        node_kill: Any = None, progress: Any = None, prefix: str = "user", api_key: str | None = None
        ) -> dict[str, Any]:
    """The chaos run against a service already up at ``url`` whose config tree is ``config``; ``api_key`` is sent
    as a bearer token (an admin key, or one bound to the ``<prefix>-<n>`` users)."""
    from serve.topology import Topology

    names = [f"{kind}-{i}" for kind, n in Topology.counts(config).items() for i in range(n)]
    killer = Killer(names, kill_every, config.cluster.namespace, node_kill=node_kill)
    work = workload(turns, tenants, data, prefix)
    done = [0]

    def step(n: int) -> None:
        done[0] += n
        if done[0] >= turns // 2:
            killer.half_way.set()
        if progress is not None:
            progress(n)

    start = time.perf_counter()
    killer.start()
    try:
        acked = write_all(url, work, writers, step, api_key)
    finally:
        killer.stop_event.set()
        killer.join(timeout=60)
    ingest_s = time.perf_counter() - start
    with httpx.Client(base_url=url, timeout=120, headers=bearer(api_key)) as client:
        deadline = time.time() + 120
        while client.get("/v1/health").json()["status"] != "ok" and time.time() < deadline:
            time.sleep(1)
    counts = verify(url, acked, config, api_key)
    total = sum(len(v) for v in acked.values())
    rec = np.asarray(killer.recovery_s) if killer.recovery_s else np.asarray([np.nan])
    return {
        "turns_acked": total, "turns_found": counts["turns_found"],
        "lost": counts["missing_tier"] + counts["missing_episodes"], **counts,  # missing_segments: apart
        "kills": killer.kills, "kill_errors": len(killer.errors),
        "recovery_s_p50": float(np.nanpercentile(rec, 50)), "recovery_s_max": float(np.nanmax(rec)),
        "ingest_s": ingest_s,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.chaos", description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=5000, help="turns to ingest")
    parser.add_argument("--kill-every", type=float, default=3.0, help="seconds between kills")
    parser.add_argument("--tenants", type=int, default=8, help="users the turns are dealt to")
    parser.add_argument("--writers", type=int, default=4, help="concurrent client threads")
    parser.add_argument("--no-node-kill", action="store_true", help="do not kill the worker node half-way")
    parser.add_argument("--data", type=Path, default=None, help="LoCoMo JSON (default: data.locomo_path)")
    parser.add_argument("--out", type=Path, default=None, help="results folder (default: results/chaos)")
    args = parser.parse_args(argv)
    setup_logging()
    logging.getLogger("httpx").setLevel(logging.WARNING)
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    config = load_config()

    import ray
    from ray import serve
    from tqdm import tqdm

    from cluster.local_cluster import LocalCluster, free_port
    from serve.app import build_app

    storage = tempfile.mkdtemp(prefix="engram-chaos-")
    keys_file, key = admin_key(storage)  # NOTE: API keys on, as served; the file goes with the journals
    app_args = chaos_args(storage, turns=args.turns, keys_file=str(keys_file))
    cluster = LocalCluster()
    cluster.start_head()
    cluster.start_worker()
    try:
        ray.init(address=cluster.address, namespace="bench", log_to_driver=False)
        cluster.wait_for_nodes(2)
        port = free_port()
        serve.start(http_options={"host": "127.0.0.1", "port": port}, proxy_location="HeadOnly")
        serve.run(build_app(app_args), name="engram", route_prefix="/")
        url = f"http://127.0.0.1:{port}"
        httpx.get(f"{url}/v1/health", timeout=300).raise_for_status()
        bar = tqdm(total=args.turns, desc="acknowledged turns", file=sys.stderr)
        config_tree = load_config("cpu", app_args["config"])
        result = run(url, config_tree, turns=args.turns, kill_every=args.kill_every, tenants=args.tenants,
                     writers=args.writers, data=args.data or config.data.locomo_path,
                     node_kill=None if args.no_node_kill else cluster.kill_worker, progress=bar.update, api_key=key)
        bar.close()
    finally:
        serve.shutdown()
        ray.shutdown()
        cluster.stop()
        shutil.rmtree(storage, ignore_errors=True)
    out = args.out or Path(config.paths.results_dir) / "chaos"
    out.mkdir(parents=True, exist_ok=True)
    (out / "chaos.json").write_text(json.dumps(result, indent=2))
    emit_json(result)


if __name__ == "__main__":
    main()
