"""Weights for the fusion of the assistants' candidate lines, learned on LoCoMo's TRAIN split (the dev set).

The read path ranks every candidate line the assistants offer for a question by one score (``inference.assistant.fuse``:
each raw signal standardised over the question's candidates, summed with equal weights) and the master reads the
best ``episodic.master_evidence`` of them. This tool measures what other weights would keep, in two steps:

1. **collect** (models, ~10-20 min on 2 cores): each dev conversation is ingested as ``bench.locomo``'s engram
   system does (``InProcessService``: the write path, summaries, the configured router), and for each question the
   read path's own :meth:`ReadPath.candidates` are kept with their raw signals, the segment's place in the routing
   order and whether the line holds a grounded date; no master is called. Rows go to a JSONL under
   ``<paths.cache_dir>/fusion_fit/`` (one file per profile, router mode and code; resumed per conversation).
2. **fit** (no model, seconds): per question, the lines the master would read (each feature standardised over the
   question's candidates, weighted, summed; best first, each turn once, the first ``cap``) and the share of its
   gold evidence among them. A grid of weights is scored on all questions and, to say what it generalises to,
   leave-one-conversation-out: the weights that do best on 6 conversations are scored on the 7th.

Features (each standardised per question): ``rank`` (router cosine + term match, the shortlist's signal),
``likelihood`` (the small model's score), ``routing`` (minus the segment's place in the routing order; the open
segment last), ``open`` (the line is in the open segment), ``dated`` (a temporal question by its words and a line
holding a grounded date). Today's fusion is ``rank 1, likelihood 1``, the rest 0.

    loopback-only env RAY_AUTH_MODE=disabled python -m bench.fusion_fit                      # cpu profile, dev set
    ENGRAM_ROUTER__MODE=lines python -m bench.fusion_fit --caps 5,7

The test split is never read. The gold category is kept for the per-category report only; the features use the
question's words alone (``inference.question_kind.predict_kind``).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np
from tqdm import tqdm

from bench.common import emit_json, parse_int_list, read_jsonl, setup_logging
from bench.locomo import _Models, code_digest_of, config_hash, file_digest
from core.config import load_config
from corpora.locomo import DEV_PER_CATEGORY, load_locomo, select_questions, split
from inference.assistant import _standardise
from inference.question_kind import TEMPORAL, predict_kind
from memory.time_expressions import grounded_values

FEATURES = ("rank", "likelihood", "routing", "open", "dated")
TODAY = (1.0, 1.0, 0.0, 0.0, 0.0)
CATEGORIES = (1, 2, 3, 4)
# The grid the fit searches (one axis per feature); today's weights are on it.
GRID = ((0.0, 0.5, 1.0, 1.5, 2.0), (0.0, 0.5, 1.0, 1.5, 2.0), (0.0, 0.25, 0.5, 1.0), (-0.5, 0.0, 0.5),
        (0.0, 0.25, 0.5, 1.0))


# -- collect -----------------------------------------------------------------------------------
def candidate_rows(groups: Sequence[Sequence], n_routed: int, temporal: bool) -> list[dict]:
    """One row per candidate line: turn id and raw features (``groups``: the read path's candidates, the routed
    segments' in routing order first, then the open segment's)."""
    rows = []
    for g, group in enumerate(groups):
        for e in group:
            if len(e.signals) < 2:
                continue  # NOTE: the ``choose`` method's picks carry no signals and are not ranked by fusion
            rows.append({"turn_id": e.turn_id, "rank": float(e.signals[0]), "likelihood": float(e.signals[1]),
                         "routing": -float(min(g, n_routed)), "open": float(g >= n_routed),
                         "dated": float(temporal and bool(grounded_values(e.content)))})
    return rows


def collect(cfg, convs, selection, path: Path, models: _Models) -> list[dict]:
    """Each question's candidates (see the module doc), appended to ``path``; conversations already there are
    read back instead."""
    from bench.systems import TENANT, build_system, per_role

    done = {}
    for row in read_jsonl(path):
        done.setdefault(row["conv_id"], []).append(row)
    todo = [c for c in convs if selection[c.sample_id] and c.sample_id not in done]
    path.parent.mkdir(parents=True, exist_ok=True)
    for conv in tqdm(todo, desc="conversations", file=sys.stderr):
        encoder, engine = models.get(("assistant", "summary"))
        engine = per_role(engine)
        engine.setdefault("master", engine["assistant"])  # NOTE: no answer is asked for
        system = build_system("engram", cfg, encoder=encoder, engine=engine)
        system.ingest(list(conv.turns))
        rows = []
        for index, q in tqdm(selection[conv.sample_id], desc=conv.sample_id, file=sys.stderr, leave=False):
            vector = encoder.encode([q.question], is_query=True)[0]
            route = asyncio.run(system.memory.reads.route(TENANT, q.question, vector))
            groups, _ = asyncio.run(system.memory.reads.candidates(TENANT, q.question, route))
            rows.append({"conv_id": conv.sample_id, "q_index": index, "category": q.category,
                         "question": q.question, "evidence": list(q.evidence),
                         "routed": sorted({t for a in route.activations for t in route.segments[a.segment_id][2]}
                                          | set(route.open_segment.turn_ids if route.open_segment else ())),
                         "candidates": candidate_rows(groups, len(route.activations),
                                                      predict_kind(q.question) == TEMPORAL)})
        with path.open("a", encoding="utf-8") as f:  # NOTE: a conversation at a time, so a rerun resumes
            f.writelines(json.dumps(r) + "\n" for r in rows)
        done[conv.sample_id] = rows
    return [r for c in convs for r in done.get(c.sample_id, [])]


# -- fit -----------------------------------------------------------------------------------------
class Question:
    """One question's candidates as a standardised feature matrix, and its gold evidence."""

    def __init__(self, row: dict) -> None:
        self.conv_id, self.category, self.evidence = row["conv_id"], row["category"], set(row["evidence"])
        cands = row["candidates"]
        self.turn_ids = [c["turn_id"] for c in cands]
        raw = np.array([[c[f] for f in FEATURES] for c in cands], dtype=np.float64).reshape(len(cands), len(FEATURES))
        # NOTE: each column standardised over the question's candidates by fuse's own function
        self.z = np.column_stack([_standardise(raw[:, j]) for j in range(len(FEATURES))])
        self.offered = len(self.evidence & set(self.turn_ids)) / len(self.evidence)

    def recall(self, weights: np.ndarray, cap: int) -> float:
        """Share of the gold evidence among the ``cap`` best distinct turns by the weighted score (ties keep the
        candidates' order, as ``fuse`` and ``by_score``)."""
        order = np.argsort(-(self.z @ weights), kind="stable")
        kept: list[str] = []
        for k in order:
            if self.turn_ids[k] not in kept:
                kept.append(self.turn_ids[k])
                if len(kept) == cap:
                    break
        return len(self.evidence.intersection(kept)) / len(self.evidence)


def grid(axes: Sequence[Sequence[float]] = GRID) -> np.ndarray:
    """Every weight vector of the grid, without the all-zero one."""
    points = np.array(list(itertools.product(*axes)), dtype=np.float64)
    return points[np.abs(points).sum(axis=1) > 0]


def recall_table(questions: Sequence[Question], weights: np.ndarray, cap: int) -> np.ndarray:
    """recall[w, q] for every weight vector and question."""
    return np.array([[q.recall(w, cap) for q in questions] for w in weights])


def leave_one_out(table: np.ndarray, groups: Sequence[str], baseline: int) -> dict:
    """For each group (conversation): the weights best on the others (ties: the one nearest today's, then the
    first), scored on it. Returns the held-out recall per question and the weights chosen per fold."""
    groups = np.asarray(groups)
    held = np.empty(table.shape[1])
    chosen = {}
    for g in dict.fromkeys(groups.tolist()):
        inside = groups != g
        means = table[:, inside].mean(axis=1)
        best = int(baseline) if means[baseline] >= means.max() - 1e-12 else int(np.argmax(means))
        held[~inside] = table[best, ~inside]
        chosen[g] = best
    return {"held_out": held, "chosen": chosen}


def by_category(values: np.ndarray, questions: Sequence[Question]) -> dict[str, float]:
    cats = np.array([q.category for q in questions])
    return {str(c): round(float(values[cats == c].mean()), 4) for c in CATEGORIES if (cats == c).any()}


def fit(questions: Sequence[Question], caps: Iterable[int], axes: Sequence[Sequence[float]] = GRID) -> list[dict]:
    """Per cap: today's recall, the best grid weights on all questions and leave-one-conversation-out."""
    weights = grid(axes)
    today = int(np.flatnonzero((weights == np.array(TODAY)).all(axis=1))[0])
    offered = np.array([q.offered for q in questions])
    out = []
    for cap in caps:
        table = recall_table(questions, weights, cap)
        means = table.mean(axis=1)
        best = int(np.argmax(means))
        loo = leave_one_out(table, [q.conv_id for q in questions], today)
        held = loo["held_out"]
        diff = held - table[today]
        rng = np.random.default_rng(0)
        boots = [diff[rng.integers(0, len(diff), len(diff))].mean() for _ in range(2000)]
        out.append({
            "cap": cap, "questions": len(questions), "offered": round(float(offered.mean()), 4),
            "today": round(float(means[today]), 4), "today_by_category": by_category(table[today], questions),
            "best_in_sample": round(float(means[best]), 4),
            "best_weights": dict(zip(FEATURES, weights[best].tolist(), strict=True)),
            "held_out": round(float(held.mean()), 4), "held_out_by_category": by_category(held, questions),
            "held_out_minus_today": round(float(diff.mean()), 4),
            "held_out_minus_today_95": [round(float(np.percentile(boots, 2.5)), 4),
                                        round(float(np.percentile(boots, 97.5)), 4)],
            "fold_weights": {g: dict(zip(FEATURES, weights[i].tolist(), strict=True))
                             for g, i in loo["chosen"].items()},
        })
    return out


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default=None, help="config profile (default: $ENGRAM_PROFILE or cpu)")
    parser.add_argument("--data", type=Path, default=None, help="locomo10.json (default: data.locomo_path)")
    parser.add_argument("--per-category", type=int, default=DEV_PER_CATEGORY,
                        help=f"first N questions of each category of each train conversation (default "
                        f"{DEV_PER_CATEGORY}: the dev set)")
    parser.add_argument("--conversations", type=int, default=7, help="first N train conversations (at most 7)")
    parser.add_argument("--caps", default=None, help="lines the master reads, comma list (default: "
                        "episodic.master_evidence)")
    parser.add_argument("--candidates", type=Path, default=None,
                        help="the collected candidates' JSONL (default under <paths.cache_dir>/fusion_fit/)")
    args = parser.parse_args(argv)
    if args.per_category < 1 or not 1 <= args.conversations <= 7:
        parser.error("--per-category must be positive and --conversations within 1-7")
    cfg = load_config(args.profile)
    try:
        caps = parse_int_list(args.caps) if args.caps else [cfg.episodic.master_evidence]
    except ValueError as exc:
        parser.error(str(exc))
    if not caps or min(caps) < 1:
        parser.error("--caps must be positive")

    setup_logging()
    from bench.systems import InProcessService

    data = args.data or cfg.data.locomo_path
    convs = split(load_locomo(data), "train")[: args.conversations]
    selection = {c.sample_id: select_questions(c, list(CATEGORIES), None, args.per_category) for c in convs}
    selection = {k: [(i, q) for i, q in v if q.evidence] for k, v in selection.items()}
    key = config_hash(cfg, "fusion-candidates", data_digest=file_digest(data),
                      code_digest=code_digest_of(InProcessService), category=f"per-category-{args.per_category}")
    path = args.candidates or Path(cfg.paths.cache_dir) / "fusion_fit" / f"candidates-{key}.jsonl"
    models = _Models(cfg, None, None, load=True)
    try:
        rows = collect(cfg, convs, selection, path, models)
    finally:
        models.close()
    questions = [Question(r) for r in rows]
    results = fit(questions, caps)
    for r in results:
        lo, hi = r["held_out_minus_today_95"]
        print(f"cap {r['cap']}: offered {r['offered']:.3f}; today {r['today']:.3f}; best in sample "
              f"{r['best_in_sample']:.3f} {r['best_weights']}; held out {r['held_out']:.3f} "
              f"({r['held_out_minus_today']:+.3f} [{lo:+.3f}, {hi:+.3f}])", file=sys.stderr)
    payload = {"split": "train", "per_category": args.per_category, "conversations": len(convs),
               "questions": len(questions), "router_mode": cfg.router.mode, "candidates": str(path),
               "features": list(FEATURES), "today": dict(zip(FEATURES, TODAY, strict=True)), "results": results}
    out_dir = Path(cfg.paths.results_dir) / "fusion_fit"
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / f"results-{cfg.router.mode}.json").write_text(json.dumps(payload, indent=1))
    emit_json(payload)
    return payload


if __name__ == "__main__":
    main()
