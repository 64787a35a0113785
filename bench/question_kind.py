"""The question-kind rules (``inference/question_kind.py``) against LoCoMo's gold categories, per split.

    python -m bench.question_kind --split train

Prints, per gold category, how many of its questions were predicted as each kind (list, temporal, inference,
fact; LoCoMo's categories 1–4 are these kinds, ``bench.common.LOCOMO_KINDS``; category 5 is no kind), and
``accuracy_1_4``: the share of category 1–4 questions whose predicted kind is their category's. The rules were
read off the train split; the test split is for reporting.
"""

from __future__ import annotations

import argparse
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from bench.common import LOCOMO_KINDS, emit_json, setup_logging
from core.config import load_config
from corpora.locomo import SPLITS, load_locomo, split
from inference.question_kind import predict_kind


def confusion(questions: list[tuple[int, str]]) -> dict[str, Any]:
    table: dict[int, Counter] = defaultdict(Counter)
    for category, text in questions:
        table[category][predict_kind(text).value] += 1
    scored = [c for c in LOCOMO_KINDS if c in table]
    total = sum(sum(table[c].values()) for c in scored)
    hits = {c: table[c][LOCOMO_KINDS[c].value] for c in scored}
    return {"questions": sum(sum(t.values()) for t in table.values()),
            "predicted": {str(c): dict(sorted(table[c].items())) for c in sorted(table)},
            "recall": {str(c): round(hits[c] / sum(table[c].values()), 3) for c in scored},
            "accuracy_1_4": round(sum(hits.values()) / total, 3) if total else 0.0}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", type=Path, default=None, help="locomo10.json (default: config data.locomo_path)")
    p.add_argument("--split", choices=SPLITS, default="train")
    args = p.parse_args(argv)
    setup_logging()
    convs = split(load_locomo(args.data or load_config().data.locomo_path), args.split)
    out = {"split": args.split, **confusion([(q.category, q.question) for c in convs for q in c.questions])}
    emit_json(out)
    return out


if __name__ == "__main__":
    main()
