"""Markdown table and PNG plot for bench.tiers, with HTM-EAR's published scenario-B numbers beside ours."""

from __future__ import annotations

from pathlib import Path

# HTM-EAR, scenario B (REFERENCE.md): active MRR, historical MRR, essential lost, latency ms.
PAPER_B = {
    "full": (1.000, 0.215, 0, 39.7),
    "lru": (1.000, 0.000, 2416, 21.1),
    "no_rerank": (1.000, 0.218, 0, 20.9),
    "no_gate": (0.432, 0.000, 0, 41.1),
    "oracle": (0.997, 0.990, 0, 37.4),
}


def markdown_table(payload: dict) -> str:
    by_mode = payload["summary"]["by_mode"]
    paper = PAPER_B if payload["scenario"] == "B" else {}
    lines = [
        f"Scenario {payload['scenario']}: n={payload['n']}, L1={payload['l1']}, L2={payload['l2']} "
        f"(mean over {max(m['seeds'] for m in by_mode.values())} seeds; paper = HTM-EAR's scenario B table)",
        "",
        "| mode | active MRR@5 | paper | historical MRR@5 | paper | essential lost | paper | pruned "
        "| p50 ms | p95 ms | paper ms | ingest facts/s |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for mode, m in by_mode.items():
        ref = paper.get(mode.split("@")[0]) if "@" not in mode else None
        p = [f"{ref[0]:.3f}", f"{ref[1]:.3f}", f"{ref[2]}", f"{ref[3]}"] if ref else ["–"] * 4
        lines.append(
            f"| {mode} | {m['active_mrr']:.3f} | {p[0]} | {m['historical_mrr']:.3f} | {p[1]} | "
            f"{m['essential_lost']:.1f} | {p[2]} | {m['pruned']:.0f} | {m['latency_p50_ms']:.1f} | "
            f"{m['latency_p95_ms']:.1f} | {p[3]} | {m['ingest_per_s']:.0f} |"
        )
    ratio = payload["summary"].get("latency_ratio_full_vs_lru_p50")
    if ratio is not None:
        lines += ["", f"p50 latency full / lru: {ratio:.2f}× (paper: 1.9×)"]
    return "\n".join(lines)


def write_report(payloads: list[dict], meta: dict, out_dir: Path) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    head = (f"Embedder {meta['embedder']}; re-ranker {meta['reranker']}; seeds {meta['seeds']}; "
            f"fact embedding {meta['embed_facts_per_s'] or 0:.0f} facts/s (0 = read from cache).")
    text = "\n\n".join([head, *(markdown_table(p) for p in payloads)])
    (out_dir / "tiers.md").write_text(text + "\n")
    plot(payloads, out_dir / "tiers.png")


def plot(payloads: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(payloads), figsize=(5.5 * len(payloads), 4), squeeze=False)
    for ax, payload in zip(axes[0], payloads, strict=True):
        by_mode = payload["summary"]["by_mode"]
        modes = list(by_mode)
        x = range(len(modes))
        ax.bar([i - 0.2 for i in x], [by_mode[m]["active_mrr"] for m in modes], width=0.4, label="active")
        ax.bar([i + 0.2 for i in x], [by_mode[m]["historical_mrr"] for m in modes], width=0.4, label="historical")
        ax.set_xticks(list(x), modes, rotation=30, ha="right")
        ax.set_ylim(0, 1.05)
        ax.set_ylabel("MRR@5")
        ax.set_title(f"Scenario {payload['scenario']} (n={payload['n']})")
        ax.legend(loc="upper right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
