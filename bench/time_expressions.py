"""The relative-date resolver (``memory/time_expressions.py``) on LoCoMo turns: precision and recall against hand
labels.

    python -m bench.time_expressions --dump sample.jsonl          # draw the sample (train split) to label
    python -m bench.time_expressions                              # score against bench/labels/time_expressions.jsonl

The sample: turns of the train split (conversations 1–7) that hold a time word (``CANDIDATE``: ago, last, next,
yesterday, week, month, a weekday, a season, ...), drawn with a fixed seed. A label line is one turn:
``{"conv_id", "dia_id", "anchor", "text", "gold": [{"expression": "last Friday", "value": "Friday, 5 May 2023"}]}``
where ``gold`` lists every expression a careful reader can pin to dates from the turn's session date alone (in the
resolver's value format), and nothing vague ("recently", "a few days ago", a bare month).

Scoring: a resolved expression is right when a gold item has the same expression text (case-insensitive) and the
same value. precision = right / resolved; recall = right / gold items; ``wrong_value`` counts expressions found
with another value, ``spurious`` those no gold item names.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
from datetime import date
from pathlib import Path
from typing import Any

from bench.common import emit_json, setup_logging
from core.config import load_config
from corpora.locomo import load_locomo, split
from memory.time_expressions import resolve

LABELS = Path(__file__).parent / "labels" / "time_expressions.jsonl"
CANDIDATE = re.compile(r"\b(?:ago|last|next|yesterday|tomorrow|today|tonight|weeks?|weekends?|months?|years?|"
                       r"monday|tuesday|wednesday|thursday|friday|saturday|sunday|spring|summer|fall|autumn|winter)\b",
                       re.IGNORECASE)


def draw(data: Path, n: int, seed: int, exclude: set[tuple[str, str]]) -> list[dict[str, Any]]:
    turns = [t for conv in split(load_locomo(data), "train") for t in conv.turns
             if CANDIDATE.search(t.text) and (t.conv_id, t.dia_id) not in exclude]
    picked = random.Random(seed).sample(turns, min(n, len(turns)))
    return [{"conv_id": t.conv_id, "dia_id": t.dia_id, "anchor": t.timestamp.date().isoformat(), "text": t.text,
             "resolved": [{"expression": r.expression, "value": r.value}
                          for r in resolve(t.text, t.timestamp.date())]} for t in picked]


def score(labels: list[dict[str, Any]]) -> dict[str, Any]:
    right = resolved = gold = wrong_value = spurious = 0
    misses: list[dict[str, str]] = []
    for row in labels:
        found = {(r.expression.lower(), r.value) for r in resolve(row["text"], date.fromisoformat(row["anchor"]))}
        wanted = {(g["expression"].lower(), g["value"]) for g in row["gold"]}
        hits = found & wanted
        right, resolved, gold = right + len(hits), resolved + len(found), gold + len(wanted)
        named = {e for e, _ in wanted}
        wrong_value += sum(1 for e, _ in found - hits if e in named)
        spurious += sum(1 for e, _ in found - hits if e not in named)
        misses += [{"dia_id": f"{row['conv_id']}:{row['dia_id']}", "expression": e, "value": v}
                   for e, v in sorted(wanted - hits)]
    return {"turns": len(labels), "gold": gold, "resolved": resolved, "right": right,
            "precision": round(right / resolved, 3) if resolved else 0.0,
            "recall": round(right / gold, 3) if gold else 0.0,
            "wrong_value": wrong_value, "spurious": spurious, "missed": misses}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", type=Path, default=None, help="locomo10.json (default: config data.locomo_path)")
    p.add_argument("--labels", type=Path, default=LABELS, help="hand-labelled turns (JSON lines)")
    p.add_argument("--dump", type=Path, default=None,
                   help="write a fresh sample to label here (none of the --labels turns), and stop")
    p.add_argument("--sample", type=int, default=200, help="turns in a --dump sample")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    setup_logging()
    if args.dump:
        labelled = [json.loads(line) for line in args.labels.read_text().splitlines()] if args.labels.is_file() else []
        exclude = {(r["conv_id"], r["dia_id"]) for r in labelled}
        rows = draw(args.data or load_config().data.locomo_path, args.sample, args.seed, exclude)
        args.dump.write_text("".join(json.dumps(r) + "\n" for r in rows))
        print(f"bench.time_expressions: {len(rows)} turns written to {args.dump}", file=sys.stderr)
        out: dict[str, Any] = {"dumped": len(rows), "file": str(args.dump)}
    else:
        if not args.labels.is_file():
            p.error(f"--labels: {args.labels} not found (make a sample with --dump and label it)")
        out = score([json.loads(line) for line in args.labels.read_text().splitlines() if line.strip()])
    emit_json(out)
    return out


if __name__ == "__main__":
    main()
