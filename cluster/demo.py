"""``engram demo``: the main job end to end on the embedded default — start, ingest, ask, stop.

Starts a local Ray and the Serve application of ``configs/serve-cpu.yaml`` (CPU models; its journals and API key
in a temporary folder, so nothing of the demo stays behind), ingests a conversation over HTTP with a progress bar,
asks its questions and prints each answer beside the expected one, with its evidence lines and token bill, then
stops the service. On machines where Ray must stay on loopback, run it under ``bin/loopback-only``.

The conversation is the one the project ships (``corpora/demo_conversation.json``, see ``corpora.demo``: four
dated sessions, a fact that changes, a question about something never said), so a fresh clone needs no data set.
``--locomo [CONV_ID]`` takes a LoCoMo conversation instead (``data.locomo_path``, env ``ENGRAM_DATA__LOCOMO_PATH``)
and asks the first question of each of three kinds; a missing file is a one-line error (exit 2) before anything
starts.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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
KINDS = (1, 2, 4)  # LoCoMo: multi-hop, temporal, single-hop; the first question of each
DEFAULT_LOCOMO = "conv-26"  # train split
_DEMO_TAGS = {"changed": "a fact that changed", "temporal": "when", "not_said": "never said", "fact": "a fact"}


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


@dataclass(frozen=True)
class DemoQuestion:
    tag: str  # what the question tests, shown beside it
    question: str
    expected: str


@dataclass(frozen=True)
class DemoSource:
    """What the demo ingests (``corpora.locomo.Turn``-like turns, as ``locomo_batches`` posts them) and asks."""

    user_id: str
    label: str
    turns: Sequence[Any]
    questions: list[DemoQuestion]
    expected_label: str  # how the printout names the expected answer


def shipped_source() -> DemoSource:
    """The project's own conversation (``corpora/demo_conversation.json``), every question of it."""
    from corpora.demo import load_demo

    conv = load_demo()
    questions = [DemoQuestion(_DEMO_TAGS[q.kind] + (f" (was: {q.old_answer})" if q.old_answer else ""),
                              q.question, q.answer) for q in conv.questions]
    return DemoSource(conv.sample_id, f"the demo conversation ({' and '.join(conv.speakers)}, "
                      f"{len(conv.sessions)} sessions)", conv.turns, questions, "expected")


def locomo_source(conv: Any) -> DemoSource:
    """A LoCoMo conversation (``corpora.locomo.Conversation``) and its first question of each of ``KINDS``."""
    tags = {1: "multi-hop", 2: "temporal", 4: "single-hop"}
    picked = [next((q for q in conv.questions if q.category == kind), None) for kind in KINDS]
    questions = [DemoQuestion(tags[q.category], q.question, q.answer) for q in picked if q is not None]
    return DemoSource(conv.sample_id, f"LoCoMo {conv.sample_id}", conv.turns, questions, "LoCoMo's answer")


def run(source: DemoSource, config: Path, timeout_s: float) -> int:
    for key, value in ENV_DEFAULTS.items():
        os.environ.setdefault(key, value)
    import ray
    from ray import serve

    from serve.app import build_app
    from serve.auth import KeyStore

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
            print(f"engram demo: ready in {time.perf_counter() - t0:.0f} s; ingesting {source.label} "
                  f"({len(source.turns)} turns)", file=sys.stderr)
            batches = locomo_batches(source.turns, source.user_id, DEFAULT_BATCH)
            totals = _post(client, batches, len(source.turns))
            print(_summary(totals, f"{source.label} -> user {source.user_id}"))
            for q in source.questions:
                reply = client.ask(source.user_id, q.question)
                print(f"\nQ ({q.tag}): {q.question}\n{source.expected_label}: {q.expected}\nA: {format_ask(reply)}")
    finally:
        serve.shutdown()
        ray.shutdown()
        shutil.rmtree(state, ignore_errors=True)
    print(f"\nengram demo: done in {time.perf_counter() - t0:.0f} s; the service is stopped.", file=sys.stderr)
    return 0


def _cmd_demo(args: argparse.Namespace, _: _Context) -> int:
    if args.locomo:
        from corpora.locomo import load_locomo, locomo_missing

        path = load_config().data.locomo_path
        if not Path(path).is_file():
            return _fail(locomo_missing(path), code=2)
        convs = {c.sample_id: c for c in load_locomo(path)}
        conv = convs.get(args.conversation)
        if conv is None:
            return _fail(f"no conversation {args.conversation!r} in {path}; known: {', '.join(convs)}", code=2)
        source = locomo_source(conv)
    else:
        source = shipped_source()
    if args.questions is not None:
        source = DemoSource(source.user_id, source.label, source.turns, source.questions[: args.questions],
                            source.expected_label)
    return run(source, args.config, args.timeout_s)


class _LoCoMoAction(argparse.Action):
    """``--locomo [CONV_ID]`` and ``--conversation CONV_ID``: take that LoCoMo conversation instead of the shipped
    one."""

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        namespace.locomo = True
        namespace.conversation = values or DEFAULT_LOCOMO


def add_parser(sub: argparse._SubParsersAction) -> None:
    s = sub.add_parser("demo", help="start the service, ingest the shipped demo conversation (or a LoCoMo one), "
                       "ask its questions, stop")
    s.add_argument("--locomo", nargs="?", metavar="CONV_ID", dest="conversation", default=DEFAULT_LOCOMO,
                   action=_LoCoMoAction, help=f"a LoCoMo conversation instead (default {DEFAULT_LOCOMO}, train split),"
                   " read from data.locomo_path (env ENGRAM_DATA__LOCOMO_PATH)")
    s.add_argument("--conversation", metavar="CONV_ID", dest="conversation", default=DEFAULT_LOCOMO,
                   action=_LoCoMoAction, help="the same as --locomo CONV_ID")
    s.add_argument("--questions", type=int, default=None, choices=range(1, 5),
                   help="ask only the first N questions (default: all; 4 of the demo conversation, 3 of LoCoMo)")
    s.add_argument("--config", type=Path, default=DEMO_CONFIG, help="Serve config whose application runs")
    s.add_argument("--timeout-s", type=float, default=600, help="how long to wait for the service to be healthy")
    s.set_defaults(run=_cmd_demo, locomo=False)
