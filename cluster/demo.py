"""``engram demo``: the main job end to end on the embedded default — start, ingest, ask, stop.

Starts a local Ray and the Serve application of ``configs/serve-cpu.yaml`` (CPU models; its journals and API key
in a temporary folder, so nothing of the demo stays behind), ingests one LoCoMo conversation over HTTP with a
progress bar, asks a few of its questions (the first of each of three kinds) and prints each answer beside
LoCoMo's, with its evidence lines and token bill, then stops the service. On machines where Ray must stay on
loopback, run it under ``bin/loopback-only``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import yaml

from cluster.cli_common import _Context, _fail
from cluster.cli_ingest import DEFAULT_BATCH, _post, _summary, locomo_batches
from cluster.cli_queries import format_ask
from cluster.client import EngramClient
from cluster.local_cluster import free_port
from core.config import REPO_ROOT, load_config

DEMO_CONFIG = REPO_ROOT / "configs" / "serve-cpu.yaml"
ENV_DEFAULTS = {"RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0", "HF_HUB_OFFLINE": "1",
                "TRANSFORMERS_OFFLINE": "1"}
KINDS = (1, 2, 4)  # multi-hop, temporal, single-hop: the first question of each


def app_args(config: Path, state: Path) -> dict:
    """The ``serve.app:build_app`` args of a Serve config file, with the demo's own state folder and keys file."""
    data = yaml.safe_load(config.read_text()) or {}
    app = next(a for a in data.get("applications") or [] if a.get("import_path") == "serve.app:build_app")
    args = dict(app.get("args") or {})
    overrides = dict(args.get("config") or {})
    overrides["cluster"] = {**overrides.get("cluster", {}), "storage_dir": str(state / "journals"),
                            "namespace": "engram-demo"}
    overrides["auth"] = {"required": True, "keys_file": str(state / "keys.json")}
    args["config"] = overrides
    return args


def wait_ready(client: EngramClient, timeout_s: float) -> None:
    deadline = time.time() + timeout_s
    while True:
        try:
            if client.health().status == "ok":
                return
        except Exception:  # noqa: BLE001 - not up yet: the proxy refuses or the actors are starting
            pass
        if time.time() > deadline:
            raise TimeoutError(f"the service was not healthy after {timeout_s:.0f} s")
        time.sleep(2)


def run(conversation: str, questions: int, config: Path, timeout_s: float) -> int:
    for key, value in ENV_DEFAULTS.items():
        os.environ.setdefault(key, value)
    import ray
    from ray import serve

    from corpora.locomo import load_locomo
    from serve.app import build_app
    from serve.auth import KeyStore

    convs = {c.sample_id: c for c in load_locomo(load_config().data.locomo_path)}
    conv = convs.get(conversation)
    if conv is None:
        return _fail(f"no conversation {conversation!r}; known: {', '.join(convs)}", code=2)
    state = Path(tempfile.mkdtemp(prefix="engram-demo-"))
    args = app_args(config, state)
    key, _ = KeyStore(state / "keys.json").create([], admin=True, name="engram demo")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    print(f"engram demo: starting Ray and the service ({config.name}, CPU models) at {url} ...", file=sys.stderr)
    t0 = time.perf_counter()
    ray.init(address="local", include_dashboard=False, log_to_driver=False)  # NOTE: its own Ray, never one running
    try:
        serve.start(http_options={"host": "127.0.0.1", "port": port}, proxy_location="HeadOnly")
        serve.run(build_app(args), name="engram", route_prefix="/", blocking=False)
        with EngramClient(url, api_key=key, timeout=600) as client:
            wait_ready(client, timeout_s)
            print(f"engram demo: ready in {time.perf_counter() - t0:.0f} s; ingesting {conv.sample_id} "
                  f"({len(conv.turns)} turns)", file=sys.stderr)
            totals = _post(client, locomo_batches(conv.turns, conv.sample_id, DEFAULT_BATCH), len(conv.turns))
            print(_summary(totals, f"{conv.sample_id} -> user {conv.sample_id}"))
            picked = [next(q for q in conv.questions if q.category == kind) for kind in KINDS][:questions]
            for q in picked:
                reply = client.ask(conv.sample_id, q.question)
                print(f"\nQ: {q.question}\nLoCoMo's answer: {q.answer}\nA: {format_ask(reply)}")
    finally:
        serve.shutdown()
        ray.shutdown()
        shutil.rmtree(state, ignore_errors=True)
    print(f"\nengram demo: done in {time.perf_counter() - t0:.0f} s; the service is stopped.", file=sys.stderr)
    return 0


def _cmd_demo(args: argparse.Namespace, _: _Context) -> int:
    return run(args.conversation, args.questions, args.config, args.timeout_s)


def add_parser(sub: argparse._SubParsersAction) -> None:
    s = sub.add_parser("demo", help="start the service, ingest a LoCoMo conversation, ask three questions, stop")
    s.add_argument("--conversation", default="conv-26", help="LoCoMo sample id (default conv-26, train split)")
    s.add_argument("--questions", type=int, default=3, choices=range(1, 4), help="questions to ask (1-3)")
    s.add_argument("--config", type=Path, default=DEMO_CONFIG, help="Serve config whose application runs")
    s.add_argument("--timeout-s", type=float, default=600, help="how long to wait for the service to be healthy")
    s.set_defaults(run=_cmd_demo)
