"""How good are the content-type labels the admission head trains on? Teacher and keyword rule vs hand labels::

    python -m bench.content_types [--teacher FILE] [--hand FILE]

- ``--teacher``: labels of ``python -m training.content_teacher`` (default: the committed
  ``bench/labels/content_types_teacher.jsonl``).
- ``--hand``: turns labelled by hand, blind to the teacher and the rule (default: the committed
  ``bench/labels/content_types_hand.jsonl``: 100 cited LoCoMo turns drawn at random, seed 2026, from both splits,
  leaving out the 32 turns the teacher's prompt was chosen on).

Reports (stderr, and ``<results_dir>/content_types/content_types.json``), on the hand-labelled turns, the
teacher's and the rule's agreement with the hand labels (accuracy, macro-F1, per type), and over every
teacher-labelled turn the rule's agreement with the teacher and the teacher's type counts. The JSON's last
line: ``teacher_vs_hand``, ``rule_vs_hand``, ``rule_vs_teacher``, ``teacher_counts``.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from bench.admission import type_agreement
from bench.common import emit_json
from inference.admission import content_type_rule
from training.content_teacher import PACKAGED_LABELS, load_labels, typed_rows

HAND_LABELS = PACKAGED_LABELS.with_name("content_types_hand.jsonl")


def load_hand(path: str | Path) -> list[dict[str, str]]:
    """Rows ``{"sample_id", "dia_id", "text", "hand"}``; an unknown type is an error."""
    return typed_rows(path, "hand")


def compare(hand: list[dict[str, str]], teacher: dict[tuple[str, str], str], texts: dict[tuple[str, str], str]
            ) -> dict[str, Any]:
    """Agreements from hand rows, teacher labels and the text of every teacher-labelled turn."""
    checked = [r for r in hand if (r["sample_id"], r["dia_id"]) in teacher]
    gold = [r["hand"] for r in checked]
    keys = sorted(teacher)
    return {
        "hand_rows": len(hand),
        "teacher_vs_hand": type_agreement([teacher[(r["sample_id"], r["dia_id"])] for r in checked], gold),
        "rule_vs_hand": type_agreement([content_type_rule(r["text"]) for r in checked], gold),
        "rule_vs_teacher": type_agreement([content_type_rule(texts[k]) for k in keys], [teacher[k] for k in keys]),
        "teacher_counts": dict(Counter(teacher.values()).most_common()),
        "hand_counts": dict(Counter(gold).most_common()),
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(prog="python -m bench.content_types", description=__doc__.split("\n\n")[0])
    parser.add_argument("--teacher", default=str(PACKAGED_LABELS))
    parser.add_argument("--hand", default=str(HAND_LABELS))
    parser.add_argument("--data", default=None, help="LoCoMo JSON (default: data.locomo_path of the config)")
    args = parser.parse_args(argv)
    from core.config import REPO_ROOT, load_config
    from corpora.locomo import load_locomo

    cfg = load_config()
    teacher = load_labels(args.teacher)
    convs = load_locomo(args.data or cfg.data.locomo_path)
    texts = {(c.sample_id, t.dia_id): t.text for c in convs for t in c.turns}
    missing = [k for k in teacher if k not in texts]
    if missing:
        raise SystemExit(f"{len(missing)} teacher-labelled turns are not in the data, e.g. {missing[0]}")
    summary = compare(load_hand(args.hand), teacher, texts)
    for key in ("teacher_vs_hand", "rule_vs_hand", "rule_vs_teacher"):
        v = summary[key]
        print(f"{key}: n {v['n']}, accuracy {v['accuracy']:.3f}, macro-F1 {v['macro_f1']:.3f}, per type (F1 / "
              f"support): " + ", ".join(f"{t} {p['f1']:.2f}/{p['support']}" for t, p in v["per_type"].items()),
              file=sys.stderr)
    out = Path(cfg.paths.results_dir)
    out = (out if out.is_absolute() else REPO_ROOT / out) / "content_types"
    out.mkdir(parents=True, exist_ok=True)
    (out / "content_types.json").write_text(json.dumps(summary, indent=1) + "\n")
    emit_json(summary)
    return summary


if __name__ == "__main__":
    main()
