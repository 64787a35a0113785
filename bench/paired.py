"""Paired comparison of two LoCoMo answer files: official F1 of A minus B on the questions both answered.

    python -m bench.paired A.jsonl B.jsonl [--categories 1,2,3,4] [--resamples 2000] [--seed 0]

A and B are ``bench.locomo`` answer caches (``bench/answers/<system>-<key>.jsonl`` or
``<paths.cache_dir>/locomo/``; ``bench.admission_downstream``'s too). Questions are paired by conversation and
question index and must ask the same question on both sides. Reported: the questions paired, each side's official
F1 over them, the mean difference A − B with a 95% interval from a paired bootstrap (``--resamples`` resamples of the
paired questions, seeded), the same per category, and how often A scored above, level with or below B. Scores are
computed from the rows (``bench.locomo.score_row``); no model is loaded.
The last stdout line is the JSON summary.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from bench import locomo
from bench.common import emit_json


def paired_rows(a: Path, b: Path, categories: set[int]) -> list[tuple[dict, dict]]:
    """The scored question rows of ``a`` and ``b`` that share a (conversation, index), in ``a``'s order."""
    sides = [locomo.ResultCache(p).questions for p in (a, b)]
    pairs = []
    for key, row_a in sides[0].items():
        row_b = sides[1].get(key)
        if row_b is None or int(row_a["category"]) not in categories:
            continue
        if row_a["question"] != row_b["question"]:
            raise ValueError(f"{key[0]} question {key[1]} differs: {row_a['question']!r} in {a}, "
                             f"{row_b['question']!r} in {b} (answers of different data files?)")
        pairs.append((locomo.score_row(row_a), locomo.score_row(row_b)))
    return pairs


def bootstrap_interval(diff: np.ndarray, resamples: int, seed: int) -> tuple[float, float]:
    """95% interval of the mean of ``diff`` over ``resamples`` resamples with replacement."""
    rng = np.random.default_rng(seed)
    means = diff[rng.integers(0, len(diff), size=(resamples, len(diff)))].mean(axis=1)
    low, high = np.percentile(means, [2.5, 97.5])
    return float(low), float(high)


def compare(pairs: list[tuple[dict, dict]], resamples: int, seed: int) -> dict:
    """F1 of each side, A − B and its interval, per category and overall."""
    def block(chosen: list[tuple[dict, dict]]) -> dict:
        f1_a = np.array([x["f1"] for x, _ in chosen], dtype=np.float64)
        f1_b = np.array([y["f1"] for _, y in chosen], dtype=np.float64)
        diff = f1_a - f1_b
        low, high = bootstrap_interval(diff, resamples, seed)
        return {"questions": len(chosen), "f1_a": float(f1_a.mean()), "f1_b": float(f1_b.mean()),
                "difference": float(diff.mean()), "ci95": [low, high],
                "a_higher": int((diff > 0).sum()), "level": int((diff == 0).sum()), "b_higher": int((diff < 0).sum())}

    categories = sorted({int(x["category"]) for x, _ in pairs})
    return {**block(pairs), "by_category": {str(c): block([p for p in pairs if int(p[0]["category"]) == c])
                                            for c in categories}}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(prog="python -m bench.paired", description=__doc__.split("\n\n")[0])
    parser.add_argument("a", type=Path, help="answers file A")
    parser.add_argument("b", type=Path, help="answers file B")
    parser.add_argument("--categories", default="1,2,3,4", help="comma list of categories 1-5 (default 1,2,3,4)")
    parser.add_argument("--resamples", type=int, default=2000, help="bootstrap resamples (default 2000)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    categories = set(locomo.categories_arg(parser, args.categories))
    if args.resamples < 1:
        parser.error(f"--resamples must be positive, got {args.resamples}")
    for path in (args.a, args.b):
        if not path.is_file():
            parser.error(f"no answers file at {path}")
    try:
        pairs = paired_rows(args.a, args.b, categories)
    except ValueError as err:
        parser.error(str(err))
    if not pairs:
        parser.error(f"{args.a} and {args.b} share no answered question of categories {args.categories}")
    out = {"a": str(args.a), "b": str(args.b), "categories": sorted(categories), "resamples": args.resamples,
           "seed": args.seed, **compare(pairs, args.resamples, args.seed)}
    print(f"A − B over {out['questions']} questions: {out['difference']:+.3f} "
          f"[{out['ci95'][0]:+.3f}, {out['ci95'][1]:+.3f}] (A {out['f1_a']:.3f}, B {out['f1_b']:.3f})")
    for cat, row in out["by_category"].items():
        print(f"  category {cat} ({row['questions']}): {row['difference']:+.3f} "
              f"[{row['ci95'][0]:+.3f}, {row['ci95'][1]:+.3f}]")
    emit_json(out)
    return out


if __name__ == "__main__":
    main()
