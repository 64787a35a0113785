"""Markdown table, PNG bar plot and per-question JSONL for bench.locomo.

Written under ``<results_dir>/locomo/``: ``locomo-<split>.md`` (one row per system of the run),
``locomo-<split>.png`` (official F1 per category per system), ``locomo-<split>.json`` (the
summaries) and ``locomo-<split>-<system>.jsonl`` (one scored row per question). Only the systems
of the run appear; run several with ``--system a,b`` (cached answers make that cheap).

The same report from answer files alone, e.g. those behind docs' tables (no model loaded, no key checked: the
files may come from different commits)::

    python -m bench.locomo_report bench/answers/engram-3642dcdc2928.jsonl bench/answers/rag-e5ceb4c723b6.jsonl \
        --categories 1,2,3,4 --out results   # results/locomo/locomo-test.{md,png,json}

Each file is one system (named by its rows' ``system``); its question rows of ``--categories`` are scored
(``bench.locomo.score_row``). The last stdout line is the JSON object ``{"split": NAME, "systems": [summary, ...]}``
(``bench.locomo``'s form for several systems).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path

from bench.locomo_score import CATEGORIES

CATEGORY_NAMES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}


def fmt(x: float | None, digits: int = 3) -> str:
    return "–" if x is None else f"{x:.{digits}f}"


def markdown_table(summaries: Sequence[dict], split_name: str) -> str:
    """One row per system: official F1 by category, overall, E-mem's overall, recall, cost and latency."""
    cats = " | ".join(f"F1 {c} {CATEGORY_NAMES[c]}" for c in CATEGORIES)
    lines = [
        f"LoCoMo, {split_name} split. F1: official LoCoMo scorer (overall = micro average; no5 = without "
        "category 5); E-mem: E-mem's own F1 variant. Evidence recall: share of a question's gold evidence "
        "turns inside the routed segments / retrieved turns / context window, mean over category 1–4 "
        "questions with evidence. Tokens: prompt + completion per question.",
        "",
        f"| system | n | {cats} | overall | overall no5 | E-mem overall | E-mem no5 | evidence recall | segments/q "
        "| tokens assistants | tokens master | tokens total | p50 ms | p95 ms |",
        "|---|---|" + "---|" * (len(CATEGORIES) + 11),
    ]
    for s in summaries:
        f1, em, tok = s["f1"], s["f1_emem"], s["tokens_per_question"]
        cells = [
            s["system"], str(s["questions"]), *(fmt(f1[str(c)]) for c in CATEGORIES),
            fmt(f1["overall"]), fmt(f1["overall_no5"]), fmt(em["overall"]), fmt(em["overall_no5"]),
            fmt(s["evidence_recall"]), fmt(s["segments_per_question"], 2),
            fmt(tok["assistants"], 0), fmt(tok["master"], 0), fmt(tok["total"], 0),
            fmt(s["latency_p50_ms"], 0), fmt(s["latency_p95_ms"], 0),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    lines.append("Questions per category: " + "; ".join(
        f"{s['system']} " + ", ".join(f"{c}: {s['counts'][str(c)]}" for c in CATEGORIES) for s in summaries))
    return "\n".join(lines)


def plot(summaries: Sequence[dict], path: Path) -> None:
    """Grouped bars: official F1 per category (and overall) for each system."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = [str(c) for c in CATEGORIES] + ["overall", "overall_no5"]
    labels = [f"{c}\n{CATEGORY_NAMES[c]}" for c in CATEGORIES] + ["overall", "overall\nno 5"]
    width = 0.8 / max(len(summaries), 1)
    fig, ax = plt.subplots(figsize=(9, 4))
    for k, s in enumerate(summaries):
        xs = [i - 0.4 + width * (k + 0.5) for i in range(len(groups))]
        ax.bar(xs, [s["f1"][g] or 0.0 for g in groups], width=width, label=s["system"])
    ax.set_xticks(range(len(groups)), labels)
    ax.set_ylim(0, 1.0)
    ax.set_ylabel("official F1")
    ax.set_title(f"LoCoMo ({summaries[0]['split'] if summaries else ''} split)")
    ax.legend(loc="upper right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_report(summaries: Sequence[dict], rows: dict[str, Sequence[dict]], *, split_name: str,
                 out_dir: Path) -> Path:
    """Write table, plot, summaries and per-question rows; returns the ``locomo`` folder."""
    folder = Path(out_dir) / "locomo"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"locomo-{split_name}.md").write_text(markdown_table(summaries, split_name) + "\n")
    (folder / f"locomo-{split_name}.json").write_text(json.dumps(list(summaries), indent=1) + "\n")
    for system, system_rows in rows.items():
        with (folder / f"locomo-{split_name}-{system}.jsonl").open("w", encoding="utf-8") as f:
            for row in system_rows:
                f.write(json.dumps(row) + "\n")
    plot(summaries, folder / f"locomo-{split_name}.png")
    return folder


def summaries_from_files(paths: Sequence[Path], categories: set[int], split_name: str) -> tuple[list[dict], dict]:
    """One summary (``bench.locomo.summarise``) and the scored rows per answers file, over ``categories``."""
    from bench import locomo

    summaries, scored = [], {}
    for path in paths:
        cache = locomo.ResultCache(path)
        rows = [locomo.score_row(r) for r in cache.questions.values() if int(r["category"]) in categories]
        if not rows:
            raise ValueError(f"{path}: no answered question of categories {sorted(categories)}")
        system = rows[0]["system"]
        if system in scored:
            raise ValueError(f"{path}: a second file of system {system!r}")
        summary = locomo.summarise(rows, split_name=split_name, system=system)
        summary.update(cache=str(path), conversations=len({r["conv_id"] for r in rows}),
                       categories=sorted(categories))
        summaries.append(summary)
        scored[system] = rows
    return summaries, scored


def main(argv: list[str] | None = None) -> dict:
    from bench import locomo
    from bench.common import emit_json

    parser = argparse.ArgumentParser(prog="python -m bench.locomo_report",
                                     description="Table and plot of LoCoMo answer files (one system each).")
    parser.add_argument("files", nargs="+", type=Path, help="answers files (bench.locomo's caches)")
    parser.add_argument("--categories", default="1,2,3,4", help="comma list of categories 1-5 (default 1,2,3,4)")
    parser.add_argument("--name", default="test", help="the report's name in its file names (default test)")
    parser.add_argument("--out", type=Path, default=Path("results"), help="results folder (default results)")
    args = parser.parse_args(argv)
    categories = set(locomo.categories_arg(parser, args.categories))
    for path in args.files:
        if not path.is_file():
            parser.error(f"no answers file at {path}")
    try:
        summaries, scored = summaries_from_files(args.files, categories, args.name)
    except ValueError as err:
        parser.error(str(err))
    folder = write_report(summaries, scored, split_name=args.name, out_dir=args.out)
    print(f"report in {folder}", flush=True)
    out = {"split": args.name, "systems": summaries}
    emit_json(out)
    return out


if __name__ == "__main__":
    main()
