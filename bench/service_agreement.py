"""The same LoCoMo questions through the running service (``POST /v1/ask``) and through ``bench.locomo``'s
``engram``: do the benchmark's numbers hold for what a user of the service gets?

    python -m bench.service_agreement [--split test] [--per-category 3] [--categories 1,2,3,4] [--limit N]
                                      [--conversations N] [--profile cpu] [--user-id ID] [--compare CACHE.jsonl]
                                      [--out DIR]

(through ``bin/loopback-only``: it starts a local Ray and Serve). Steps:

1. the questions: the same selection flags and order as ``bench.locomo`` (``--conversations N`` keeps the split's
   first N conversations);
2. the harness's answers: ``bench.locomo``'s cache of ``engram`` for these settings (profile, data, code, predicted
   kinds: the file ``python -m bench.locomo --system engram`` with the same flags writes); ``--compare`` names
   another cache file. Questions missing there are reported and left out of the comparison;
3. the service: ``serve.app.build_app`` on the profile (store-all admission, as the harness; API keys on) on a free
   loopback port; each conversation posted as ``engram ingest locomo`` posts it (per session, 32 turns per
   request) as its own user (its sample id), or with ``--user-id`` all as that user, deleted after each
   conversation; then a wait until the background summaries are done. Where a segment lives (which assistant
   actor) follows from the user id and the segment id; ``--user-id locomo`` places them as the harness does;
4. every question asked over HTTP without a category (the master reads the kind from the question, as
   ``bench.locomo --category predicted``), one at a time; answer, evidence read, routed segments' turns, token
   bill and latency kept.

Both sides are scored with the same official scorer (``bench.locomo.score_row``). The JSON (printed last) holds
both summaries on the compared questions and the agreement: ``identical_answers`` (same answer text after
trimming), ``same_routed_turns`` (same set of routed turns), ``same_evidence`` (same lines read by the master),
``f1_abs_diff_mean`` and the F1 difference (service − harness) over categories 1–4. Writes
``results/service_agreement/agreement.{json,md}`` and the service's rows as JSONL.
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tqdm import tqdm

from bench.common import admin_key, emit_json, offline_service_env, setup_logging
from bench.locomo import (
    RECALL_CATEGORIES,
    ResultCache,
    answer_row,
    cache_file,
    cache_key,
    categories_arg,
    file_digest,
    score_row,
    summarise,
)
from bench.locomo_score import CATEGORIES
from bench.systems import TENANT as HARNESS_TENANT  # the tenant every harness system stores its conversation as
from bench.systems import Answer, build_system
from core.generation import TokenBill
from corpora.locomo import Conversation, Question, load_locomo, select_questions, split

offline_service_env()

SYSTEM = "engram"  # the harness system whose answers the service is compared with


def service_row(index: int, q: Question, reply: Any, latency_s: float) -> dict:
    """A ``bench.locomo`` question row (:func:`bench.locomo.answer_row`) from a ``POST /v1/ask`` reply
    (``serve.schemas.AskResponse``)."""
    tokens = reply.tokens
    answer = Answer(reply.answer, [e.turn_id for e in reply.evidence],
                    list(dict.fromkeys(t for seg in reply.segments for t in seg.turn_ids)), len(reply.segments),
                    TokenBill(tokens.assistants.prompt, tokens.assistants.completion),
                    TokenBill(tokens.master.prompt, tokens.master.completion, 1))
    return answer_row("service", index, q, answer, latency_s)


def agreement(service: Sequence[dict], harness: Sequence[dict]) -> dict[str, Any]:
    """How far two scored row lists (:func:`bench.locomo.score_row`) over the same questions, in the same order,
    agree: shares of identical answers, routed turn sets and evidence sets, the mean |F1 difference| and the
    difference of mean F1 over categories 1-4 (first − second). Both empty: every value None."""
    if len(service) != len(harness):
        raise ValueError(f"{len(service)} service rows against {len(harness)} harness rows")
    for a, b in zip(service, harness, strict=True):
        if (a["conv_id"], a["q_index"]) != (b["conv_id"], b["q_index"]):
            raise ValueError(f"rows out of step: {a['conv_id']}#{a['q_index']} vs {b['conv_id']}#{b['q_index']}")
    n = len(service)
    if n == 0:
        return {"questions": 0, "identical_answers": None, "same_routed_turns": None, "same_evidence": None,
                "f1_abs_diff_mean": None, "f1_diff_no5": None}
    pairs = list(zip(service, harness, strict=True))
    main = [(a, b) for a, b in pairs if a["category"] in RECALL_CATEGORIES]
    return {
        "questions": n,
        "identical_answers": sum(a["prediction"].strip() == b["prediction"].strip() for a, b in pairs) / n,
        "same_routed_turns": sum(set(a["routed_turn_ids"]) == set(b["routed_turn_ids"]) for a, b in pairs) / n,
        "same_evidence": sum(set(a["evidence_turn_ids"]) == set(b["evidence_turn_ids"]) for a, b in pairs) / n,
        "f1_abs_diff_mean": sum(abs(a["f1"] - b["f1"]) for a, b in pairs) / n,
        "f1_diff_no5": (sum(a["f1"] - b["f1"] for a, b in main) / len(main)) if main else None,
    }


def harness_cache(cfg: Any, data: Path) -> Path:
    """The cache file ``bench.locomo --system engram --category predicted`` uses for ``cfg`` and ``data`` now."""
    digest = cache_key(cfg, SYSTEM, build_system, data_digest=file_digest(data), category="predicted")
    return cache_file(cfg, SYSTEM, digest)


def ask_service(convs: Sequence[Conversation], selection: dict[str, list[tuple[int, Question]]], profile: str,
                out: Path, user_id: str | None = None) -> list[dict]:
    """Start the service on ``profile``, post each conversation, ask its selected questions; the rows, each also
    appended to ``out / service.jsonl``. Each conversation is posted as its own user (its sample id), or all as
    ``user_id``, which is then deleted after each conversation's questions (the next one starts empty)."""
    import ray
    from ray import serve

    from cluster.cli_ingest import DEFAULT_BATCH, locomo_batches
    from cluster.client import EngramClient
    from cluster.local_cluster import free_port
    from serve.app import build_app

    port = free_port()
    storage = tempfile.mkdtemp(prefix="engram-agreement-state-")
    keys_dir = tempfile.mkdtemp(prefix="engram-agreement-keys-")
    keys_file, key = admin_key(keys_dir)
    rows: list[dict] = []
    ray.init(include_dashboard=False, namespace="bench", log_to_driver=False)
    try:
        serve.start(http_options={"host": "127.0.0.1", "port": port})
        serve.run(build_app({"profile": profile, "config": {
            "admission": {"mode": "store_all"},  # NOTE: as bench.locomo's systems (episodic memory, not admission)
            "cluster": {"namespace": f"agreement-{port}", "storage_dir": storage},
            "auth": {"keys_file": str(keys_file)}}}), name="engram", route_prefix="/")
        with EngramClient(f"http://127.0.0.1:{port}", api_key=key, timeout=900) as client, \
                (out / "service.jsonl").open("w", encoding="utf-8") as sink:
            client.health()  # NOTE: answers once every actor is up and warm
            for conv in convs:
                todo = selection[conv.sample_id]
                if not todo:
                    continue
                user = user_id or conv.sample_id
                for _, session_id, turns in tqdm(list(locomo_batches(conv.turns, user, DEFAULT_BATCH)),
                                                 desc=f"ingest {conv.sample_id}", file=sys.stderr):
                    client.add_turns(user, turns, session_id=session_id)
                while client.health().background:
                    time.sleep(1.0)
                for index, q in tqdm(todo, desc=f"ask {conv.sample_id}", file=sys.stderr):
                    start = time.perf_counter()
                    reply = client.ask(user, q.question)
                    row = service_row(index, q, reply, time.perf_counter() - start)
                    sink.write(json.dumps(row) + "\n")
                    sink.flush()
                    rows.append(row)
                if user_id is not None:
                    client.delete_user(user_id)
    finally:
        serve.shutdown()
        ray.shutdown()
        shutil.rmtree(storage, ignore_errors=True)
        shutil.rmtree(keys_dir, ignore_errors=True)
    return rows


def markdown(payload: dict[str, Any]) -> str:
    """The agreement and both systems' F1 per category as a Markdown table."""
    a = payload["agreement"]
    lines = [f"Questions compared: {a['questions']} ({payload['split']} split, profile `{payload['profile']}`; "
             f"harness cache `{payload['harness_cache']}`, {payload['missing_in_harness']} selected questions "
             "not in it)", "",
             "| side | " + " | ".join(f"F1 {c}" for c in CATEGORIES) + " | F1 1–4 | evidence routed | master tokens "
             "| p50 / p95 ms |",
             "|---|" + "---|" * (len(CATEGORIES) + 4)]
    for side in ("service", "harness"):
        s = payload[side]
        if s is None:
            continue
        f1 = s["f1"]
        cells = [("–" if f1[str(c)] is None else f"{f1[str(c)]:.3f}") for c in CATEGORIES]
        nofive = "–" if f1["overall_no5"] is None else f"{f1['overall_no5']:.3f}"
        recall = "–" if s["evidence_recall"] is None else f"{s['evidence_recall']:.3f}"
        lines.append(f"| {side} | " + " | ".join(cells) + f" | {nofive} | {recall} | "
                     f"{s['tokens_per_question']['master']:.0f} | "
                     f"{s['latency_p50_ms']:.0f} / {s['latency_p95_ms']:.0f} |")
    lines += ["", "| agreement | value |", "|---|---|"]
    lines += [f"| {k} | {'–' if v is None else (f'{v:.3f}' if isinstance(v, float) else v)} |" for k, v in a.items()]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(prog="python -m bench.service_agreement", description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=None, help="locomo10.json (default: config data.locomo_path)")
    parser.add_argument("--split", choices=("train", "test", "all"), default="test")
    parser.add_argument("--categories", default="1,2,3,4", help="comma list of categories 1-5 (default 1-4)")
    parser.add_argument("--per-category", type=int, default=3,
                        help="first N questions of each category of each conversation (default 3)")
    parser.add_argument("--limit", type=int, default=None, help="first N selected questions of each conversation")
    parser.add_argument("--conversations", type=int, default=None, help="the split's first N conversations")
    parser.add_argument("--profile", default="cpu", help="config profile of both sides (default cpu)")
    parser.add_argument("--user-id", default=None,
                        help="post every conversation as this user, deleted between conversations (default: each "
                        f"conversation as its own sample id); {HARNESS_TENANT!r} is the harness's tenant, so that "
                        "segments land on the same assistant actors as in bench.locomo")
    parser.add_argument("--compare", type=Path, default=None,
                        help="bench.locomo cache to compare with (default: engram's for these settings)")
    parser.add_argument("--out", type=Path, default=None, help="results folder (default: results/service_agreement)")
    args = parser.parse_args(argv)
    categories = categories_arg(parser, args.categories)
    for flag, value in (("--limit", args.limit), ("--per-category", args.per_category),
                        ("--conversations", args.conversations)):
        if value is not None and value <= 0:
            parser.error(f"{flag} must be a positive integer")
    if args.compare is not None and not args.compare.is_file():
        parser.error(f"--compare: no file {args.compare}")

    setup_logging()
    logging.getLogger("httpx").setLevel(logging.WARNING)  # NOTE: one INFO line per request otherwise
    from core.config import load_config

    cfg = load_config(args.profile)
    data = Path(args.data or cfg.data.locomo_path)
    convs = split(load_locomo(data), args.split)[: args.conversations]
    selection = {c.sample_id: select_questions(c, categories, args.limit, args.per_category) for c in convs}
    compare = args.compare or harness_cache(cfg, data)
    cache = ResultCache(compare) if compare.is_file() else None
    out = args.out or Path(cfg.paths.results_dir) / "service_agreement"
    out.mkdir(parents=True, exist_ok=True)

    service = [score_row(r) for r in ask_service(convs, selection, args.profile, out, args.user_id)]
    harness, kept, missing = [], [], 0
    asked = {(cid, i): q for cid, chosen in selection.items() for i, q in chosen}
    for row in service:
        key = (row["conv_id"], row["q_index"])
        cached = cache.answered(*key, asked[key]) if cache is not None else None
        if cached is None:
            missing += 1
            continue
        harness.append(score_row(cached))
        kept.append(row)
    payload = {
        "split": args.split, "profile": args.profile, "user_id": args.user_id, "questions": len(service),
        "compared": len(kept),
        "missing_in_harness": missing, "harness_cache": str(compare),
        "service": summarise(kept, split_name=args.split, system="service") if kept else None,
        "harness": summarise(harness, split_name=args.split, system=SYSTEM) if harness else None,
        "service_all": summarise(service, split_name=args.split, system="service"),
        "agreement": agreement(kept, harness),
    }
    (out / "agreement.json").write_text(json.dumps(payload, indent=2))
    (out / "agreement.md").write_text(markdown(payload))
    emit_json(payload)
    return payload


if __name__ == "__main__":
    main()
