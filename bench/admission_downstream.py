"""Admission downstream on LoCoMo: how well questions are answered when only the admitted turns are stored.

    python -m bench.admission_downstream --split test [--system rag] [--limit N] [--per-category N] [--seed 0]
                                         [--category predicted|gold] [--profile cpu|cpu-quality] [--threshold P]

Storage policies, one run, the same questions:
- ``store_all``: every turn.
- ``classifier``: the trained MemRouter classifier (``inference/admission.py``; ``python -m training.train_admission``
  first), each conversation streamed in order through ``ChunkStream`` as the service does; a turn is kept when its
  p_add reaches ``--threshold`` (default: the threshold trained with the heads).
- ``random``: per conversation, a seeded random choice of as many turns as the classifier kept.
- ``keyword``: per conversation, as many turns as the classifier kept, those with the most memory keywords
  (the content-type rules' patterns of ``inference/admission.py``; ties: longer text first, then stream order).
- ``keyword_rule``: what the service's ``admission.mode: keyword`` admits, turn by turn with no hindsight: turns
  holding at least ``admission.keyword_min`` memory keywords (its own budget).

``--policies`` runs a subset (default: all); the differences to the classifier are null when a side is not run.

Each policy's conversations are cut to the turns it keeps and handed to the LoCoMo harness's system
(``--system``, default ``rag``: dense + BM25 top turns, then the master; the same small model as every
other system), which ingests them and answers every selected question. Reported per policy: the share of
turns stored, ``evidence_stored`` (share of the evidence turns of categories 1–4 that were stored — the
ceiling of any recall), ``evidence_recall`` and official F1 as ``bench.locomo`` computes them. Questions are asked
as ``bench.locomo --category`` says: ``predicted`` (the default) without LoCoMo's category, as ``/v1/ask`` is asked;
``gold`` with LoCoMo's category as the kind hint. ``--profile`` picks the answering models (``cpu-quality``:
the 1.5B master). Answers are cached per (system, policy, kept turns, config, code, category mode) like
``bench.locomo``'s (resumable, ``--answers-dir`` as there); ``store_all`` shares ``bench.locomo --system``'s
answers file, since both read every turn.
The last stdout line is the JSON summary; the markdown table goes to ``<results_dir>/admission/``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from bench import locomo
from bench.common import emit_json, setup_logging
from core.config import load_config
from corpora.locomo import SPLITS, Conversation, load_locomo, split
from inference.admission import AdmissionClassifier, ChunkStream, keyword_count, rule_decision

POLICIES = ("store_all", "classifier", "random", "keyword", "keyword_rule")
Keep = dict[str, set[str]]  # conversation id -> dia_ids stored


def budget_policies(convs: Sequence[Conversation], classifier: Keep, seed: int, keyword_min: int = 1
                    ) -> dict[str, Keep]:
    """Every policy's kept turns; random and keyword keep per conversation as many as the classifier; keyword_rule
    keeps what ``admission.mode: keyword`` admits (turns with at least ``keyword_min`` memory keywords)."""
    rng = np.random.default_rng(seed)
    out: dict[str, Keep] = {"store_all": {c.sample_id: {t.dia_id for t in c.turns} for c in convs},
                            "classifier": classifier, "random": {}, "keyword": {},
                            "keyword_rule": {c.sample_id: {t.dia_id for t in c.turns
                                                           if rule_decision(t.text, keyword_min).op == "ADD"}
                                             for c in convs}}
    for c in convs:
        n = len(classifier[c.sample_id])
        ids = [t.dia_id for t in c.turns]
        out["random"][c.sample_id] = {ids[i] for i in rng.choice(len(ids), size=n, replace=False)}
        ranked = sorted(c.turns, key=lambda t: (-keyword_count(t.text), -len(t.text), t.index))
        out["keyword"][c.sample_id] = {t.dia_id for t in ranked[:n]}
    return out


def cut(conv: Conversation, keep: set[str]) -> Conversation:
    """The conversation as a memory that stored only ``keep`` (questions unchanged)."""
    return Conversation(conv.sample_id, conv.speakers, [t for t in conv.turns if t.dia_id in keep], conv.questions)


def evidence_stored(convs: Sequence[Conversation], keep: Keep) -> float:
    """Share of the evidence turns of category 1–4 questions that the policy stored."""
    cited = [(c.sample_id, d) for c in convs for q in c.questions if q.category in locomo.RECALL_CATEGORIES
             for d in q.evidence]
    return float(np.mean([d in keep[cid] for cid, d in cited])) if cited else 0.0


def classifier_keep(convs: Sequence[Conversation], cfg: Any) -> Keep:
    """The trained classifier's ADD turns, each conversation streamed in order (batches of 16)."""
    from serve.embedder import Embedder

    clf = AdmissionClassifier.from_config(cfg)
    stream = ChunkStream(Embedder(cfg.embedder), cfg.admission.max_turns)
    keep: Keep = {}
    for c in convs:
        kept = keep[c.sample_id] = set()
        for start in tqdm(range(0, len(c.turns), 16), desc=f"admission {c.sample_id}", file=sys.stderr):
            batch = c.turns[start : start + 16]
            kept.update(t.dia_id for t, d in zip(batch, clf.classify(stream.push(batch)), strict=True)
                        if d.op == "ADD")
    return keep


def _keep_digest(keep: Keep) -> str:
    h = hashlib.sha256()
    for cid in sorted(keep):
        h.update(cid.encode() + b"\0" + "\0".join(sorted(keep[cid])).encode() + b"\1")
    return h.hexdigest()[:12]


def _cache_path(cfg: Any, system: str, policy: str, keep: Keep, factory: Callable, data_digest: str, category: str,
                with_models: bool, answers_dir: Path | None) -> Path:
    """Where a policy's answers are cached. ``store_all`` keeps every turn, so its answers are ``bench.locomo``'s for
    ``system`` and share that file; the other policies are keyed by the turns they keep."""
    shared = policy == "store_all"
    digest = locomo.cache_key(cfg, system, factory,
                              data_digest=data_digest if shared else data_digest + _keep_digest(keep),
                              category=category, with_models=with_models,
                              label=None if shared else f"{system}@{policy}")
    return locomo.cache_file(cfg, system if shared else f"admission-{system}-{policy}", digest, answers_dir)


def _group(group: dict) -> str:
    return f"{group['f1'] or 0:.3f} ({group['questions']})"


def markdown(out: dict) -> str:
    rows = ["| policy | stored | evidence stored | evidence recall | F1 (official) | F1 without cat. 5 | "
            "F1, all evidence read (n) | F1, none read (n) | questions |",
            "|---|---|---|---|---|---|---|---|---|"]
    for r in out["results"]:
        f1, by_read = r["f1"], r["f1_by_evidence_read"]
        rows.append(f"| {r['policy']} | {r['stored_share']:.3f} | {r['evidence_stored']:.3f} | "
                    f"{r['evidence_recall'] or 0:.3f} | {f1['overall'] or 0:.3f} | {f1['overall_no5'] or 0:.3f} | "
                    f"{_group(by_read['all'])} | {_group(by_read['none'])} | {r['questions']} |")
    gaps = ["–" if g is None else f"{g:+.3f}" for g in (out["f1_classifier_minus_random"],
                                                          out["f1_classifier_minus_store_all"])]
    return "\n".join(rows) + (
        f"\n\nsplit {out['split']}, system {out['system']}, profile {out['profile']}, categories {out['category']}, "
        f"classifier threshold {'trained' if out.get('threshold') is None else out['threshold']}, "
        f"budget {out['budget']:.3f} of turns; classifier "
        f"minus random {gaps[0]} F1, minus store-all {gaps[1]}.\n")


def main(argv: list[str] | None = None, *, factory: Callable | None = None,
         decide: Callable[[Sequence[Conversation], Any], Keep] | None = None) -> dict:
    """``factory`` replaces ``bench.systems.build_system`` and ``decide`` the classifier (tests)."""
    parser = argparse.ArgumentParser(prog="python -m bench.admission_downstream", description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=None, help="locomo10.json (default: data.locomo_path)")
    parser.add_argument("--split", choices=SPLITS, default="test")
    parser.add_argument("--system", choices=locomo.SYSTEMS, default="rag", help="the harness system that answers")
    parser.add_argument("--limit", type=int, default=None, help="first N selected questions of each conversation")
    parser.add_argument("--categories", default="1,2,3,4,5", help="comma list of categories 1-5")
    parser.add_argument("--per-category", type=int, default=None,
                        help="first N questions of each category of each conversation (as bench.locomo)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random policy")
    parser.add_argument("--policies", default=",".join(POLICIES), help=f"comma list of {', '.join(POLICIES)}")
    parser.add_argument("--threshold", type=float, default=None,
                        help="the classifier's p_add cut (admission.threshold; default: the trained threshold); a "
                        "lower cut stores more turns, and random and keyword keep as many")
    parser.add_argument("--category", choices=locomo.CATEGORY_MODES, default="predicted",
                        help="predicted: the master reads the question's kind from its words (as /v1/ask without a "
                        "kind hint); gold: LoCoMo's labels as kind hints")
    parser.add_argument("--profile", default=None, help="config profile (default: $ENGRAM_PROFILE or cpu)")
    parser.add_argument("--results-dir", type=Path, default=None)
    locomo.add_answers_dir(parser)
    args = parser.parse_args(argv)
    categories = locomo.categories_arg(parser, args.categories)
    locomo.positive_counts(parser, args)
    chosen = [p.strip() for p in args.policies.split(",") if p.strip()]
    if not chosen or set(chosen) - set(POLICIES):
        parser.error(f"--policies takes a comma list of {', '.join(POLICIES)}, got {args.policies!r}")
    if args.threshold is not None and not 0 < args.threshold < 1:
        parser.error(f"--threshold must lie strictly between 0 and 1, got {args.threshold}")

    setup_logging()
    cfg = load_config(args.profile)
    if args.threshold is not None:
        cfg = cfg.model_copy(update={"admission": cfg.admission.model_copy(update={"threshold": args.threshold})})
    data = args.data or cfg.data.locomo_path
    convs = split(load_locomo(data), args.split)
    selection = {c.sample_id: locomo.select_questions(c, categories, args.limit, args.per_category) for c in convs}
    policies = budget_policies(convs, (decide or classifier_keep)(convs, cfg), args.seed, cfg.admission.keyword_min)
    load_models = factory is None
    if factory is None:
        from bench.systems import build_system

        factory = build_system
    models = locomo._Models(cfg, None, None, load=load_models)
    data_digest = locomo.file_digest(data)
    turns = sum(len(c.turns) for c in convs)
    results = []
    try:
        for policy in (p for p in POLICIES if p in chosen):
            keep = policies[policy]
            cache = locomo.ResultCache(_cache_path(cfg, args.system, policy, keep, factory, data_digest,
                                                   args.category, load_models, args.answers_dir))
            locomo.run_system(args.system, [cut(c, keep[c.sample_id]) for c in convs], selection, cfg, factory,
                              models, cache, args.category)
            rows = [locomo.score_row(cache.answered(c.sample_id, i, q))
                    for c in convs for i, q in selection[c.sample_id]]
            summary = locomo.summarise(rows, split_name=args.split, system=args.system)
            results.append({"policy": policy, "stored_share": sum(len(v) for v in keep.values()) / turns,
                            "evidence_stored": evidence_stored(convs, keep), **summary, "cache": str(cache.path)})
    finally:
        models.close()
    f1 = {r["policy"]: r["f1"]["overall"] or 0.0 for r in results}

    def minus(other: str) -> float | None:
        return f1["classifier"] - f1[other] if {"classifier", other} <= f1.keys() else None

    out = {"split": args.split, "system": args.system, "turns": turns,
           "budget": sum(len(v) for v in policies["classifier"].values()) / turns,
           "f1_classifier_minus_random": minus("random"), "f1_classifier_minus_store_all": minus("store_all"),
           "threshold": cfg.admission.threshold, "keyword_min": cfg.admission.keyword_min,
           "limit": args.limit, "per_category": args.per_category, "seed": args.seed, "category": args.category,
           "profile": cfg.profile,
           "results": results}
    out_dir = (args.results_dir or cfg.paths.results_dir) / "admission"
    out_dir.mkdir(parents=True, exist_ok=True)
    cut_at = cfg.admission.threshold  # the flag or ENGRAM_ADMISSION__THRESHOLD
    stem = f"downstream-{args.split}-{args.system}" + ("" if cut_at is None else f"-t{cut_at:g}")
    (out_dir / f"{stem}.md").write_text(markdown(out))
    (out_dir / f"{stem}.json").write_text(json.dumps(out, indent=2))
    emit_json(out)
    return out


if __name__ == "__main__":
    main()
