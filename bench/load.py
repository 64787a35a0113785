"""A bounded load test over HTTP: mixed add / search / ask at a fixed concurrency, for a fixed time.

    python -m bench.load [--seconds 60] [--concurrency 16] [--mix 0.45,0.45,0.10] [--backend vllm|transformers]

(through ``bin/loopback-only``). Starts the service (CPU profile, journaled actors, store-all
admission), preloads one LoCoMo conversation per user (``--users``, default 4), then ``--concurrency`` client
tasks each loop for ``--seconds``: draw an operation by ``--mix`` (add a batch of 5 new turns / search a
LoCoMo question / ask it), send it, record status and latency. Any status other than 200 counts as an
error (the target is 0). Reports p50 / p99 latency and throughput per operation; prints one JSON object
last and writes results/load/load.json + load.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import random
import shutil
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from bench.common import admin_key, bearer, emit_json, setup_logging
from cluster.local_cluster import free_port
from core.config import load_config
from corpora.locomo import load_locomo

OPS = ("add", "search", "ask")


async def run(url: str, *, seconds: float, concurrency: int, mix: tuple[float, float, float],
              users: list[str], questions: list[tuple[str, str]], seed: int = 0,
              api_key: str | None = None) -> dict[str, Any]:
    """The load loop against a service at ``url``; users must exist (searches and asks read them). ``api_key`` is
    sent as a bearer token (an admin key, or one bound to every user here)."""
    rng = random.Random(seed)
    latencies: dict[str, list[float]] = defaultdict(list)
    errors: dict[str, int] = defaultdict(int)
    statuses: dict[str, int] = defaultdict(int)
    counter = [0]
    deadline = time.perf_counter() + seconds

    def body(op: str) -> tuple[str, dict[str, Any]]:
        user, question = rng.choice(questions)
        if op == "add":
            counter[0] += 1
            turns = [{"id": f"load-{counter[0]}-{k}", "speaker": "user",
                      "text": f"load note {counter[0]}.{k}: {question}"} for k in range(5)]
            return "/v1/turns", {"user_id": rng.choice(users), "turns": turns}
        if op == "search":
            return "/v1/search", {"user_id": user, "query": question, "k": 5}
        return "/v1/ask", {"user_id": user, "question": question}

    async def client_task(client: httpx.AsyncClient) -> None:
        while time.perf_counter() < deadline:
            op = rng.choices(OPS, weights=mix)[0]
            path, payload = body(op)
            start = time.perf_counter()
            try:
                r = await client.post(path, json=payload)
                status = r.status_code
            except httpx.HTTPError as e:
                status = type(e).__name__
            latencies[op].append(time.perf_counter() - start)
            statuses[f"{op} {status}"] += 1
            if status != 200:
                errors[op] += 1

    start = time.perf_counter()
    async with httpx.AsyncClient(base_url=url, timeout=300, headers=bearer(api_key)) as client:
        await asyncio.gather(*(client_task(client) for _ in range(concurrency)))
    wall = time.perf_counter() - start
    per_op = {}
    for op in OPS:
        ms = np.asarray(latencies[op]) * 1000.0
        per_op[op] = {"requests": len(ms), "errors": errors[op],
                      "p50_ms": float(np.percentile(ms, 50)) if len(ms) else float("nan"),
                      "p99_ms": float(np.percentile(ms, 99)) if len(ms) else float("nan"),
                      "per_s": len(ms) / wall}
    total = sum(v["requests"] for v in per_op.values())
    return {"seconds": wall, "concurrency": concurrency, "requests": total, "per_s": total / wall,
            "errors": sum(errors.values()), "ops": per_op, "statuses": dict(statuses)}


def markdown(p: dict[str, Any]) -> str:
    rows = [f"| {op} | {v['requests']} | {v['errors']} | {v['p50_ms']:.0f} | {v['p99_ms']:.0f} | {v['per_s']:.2f} |"
            for op, v in p["ops"].items()]
    return ("| operation | requests | errors | p50 (ms) | p99 (ms) | per second |\n|---|---|---|---|---|---|\n"
            + "\n".join(rows) + f"\n| all | {p['requests']} | {p['errors']} | | | {p['per_s']:.2f} |\n")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.load", description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--mix", default="0.45,0.45,0.10", help="weights of add,search,ask")
    parser.add_argument("--users", type=int, default=4, help="users preloaded with a LoCoMo conversation each")
    parser.add_argument("--backend", choices=("vllm", "transformers"), default="vllm")
    parser.add_argument("--data", type=Path, default=None, help="LoCoMo JSON (default: data.locomo_path)")
    parser.add_argument("--out", type=Path, default=None, help="results folder (default: results/load)")
    args = parser.parse_args(argv)
    mix = tuple(float(x) for x in args.mix.split(","))
    if len(mix) != 3 or min(mix) < 0 or sum(mix) <= 0:
        parser.error("--mix takes three non-negative weights: add,search,ask")
    setup_logging()
    logging.getLogger("httpx").setLevel(logging.WARNING)
    for var, value in (("RAY_AUTH_MODE", "disabled"), ("RAY_USAGE_STATS_ENABLED", "0"), ("HF_HUB_OFFLINE", "1")):
        os.environ.setdefault(var, value)
    config = load_config()
    convs = load_locomo(args.data or config.data.locomo_path)[: args.users]

    import ray
    from ray import serve
    from tqdm import tqdm

    from serve.app import build_app

    storage = tempfile.mkdtemp(prefix="engram-load-")
    keys_file, key = admin_key(storage)  # NOTE: API keys on, as served; the file goes with the journals
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    ray.init(include_dashboard=False, namespace="bench", log_to_driver=False)
    try:
        serve.start(http_options={"host": "127.0.0.1", "port": port})
        serve.run(build_app({"profile": "cpu", "config": {
            "admission": {"mode": "store_all"}, "engine": {"backend": args.backend},
            "cluster": {"namespace": f"load-{port}", "storage_dir": storage}, "auth": {"keys_file": str(keys_file)}}}),
            name="engram", route_prefix="/")
        with httpx.Client(base_url=url, timeout=600, headers=bearer(key)) as client:
            client.get("/v1/health").raise_for_status()
            for conv in convs:
                for k in tqdm(range(0, len(conv.turns), 32), desc=f"preload {conv.sample_id}", file=sys.stderr):
                    client.post("/v1/turns", json={"user_id": conv.sample_id, "turns": [
                        {"id": t.dia_id, "speaker": t.speaker, "text": t.text, "timestamp": t.timestamp.isoformat(),
                         "date_time": t.date_time} for t in conv.turns[k : k + 32]]}).raise_for_status()
        questions = [(c.sample_id, q.question) for c in convs for q in c.questions if q.category != 5]
        print(f"load: {args.concurrency} clients for {args.seconds:.0f} s", file=sys.stderr)
        result = asyncio.run(run(url, seconds=args.seconds, concurrency=args.concurrency, mix=mix,
                                 users=[c.sample_id for c in convs], questions=questions, api_key=key))
    finally:
        serve.shutdown()
        ray.shutdown()
        shutil.rmtree(storage, ignore_errors=True)
    result.update({"backend": args.backend, "mix": dict(zip(OPS, mix, strict=True))})
    out = args.out or Path(config.paths.results_dir) / "load"
    out.mkdir(parents=True, exist_ok=True)
    (out / "load.json").write_text(json.dumps(result, indent=2))
    (out / "load.md").write_text(markdown(result))
    emit_json(result)


if __name__ == "__main__":
    main()
