"""Routing evidence recall of the episodic router on LoCoMo's TRAIN split (conversations 1-7).

Each train conversation is segmented (sliding window, ``--overlap`` of the segment size replayed)
and indexed by an :class:`~memory.routing.EpisodicRouter`; every question of categories
1-4 with evidence is routed. No summaries exist yet, so only P_vec and P_kw run (P_global has
nothing to score). Reported per setting:

- ``evidence_recall``: mean over questions of the share of their evidence turn ids that lie in
  some activated segment; ``all_evidence_share``: questions with every evidence turn covered;
- ``segments_per_question`` (mean) and ``segments_max`` activated, the newest included (``best_at_most_5``: the
  best setting within 5 segments, or within 5 segments' tokens for lines mode);
- ``tokens_per_question`` the assistants would read, and ``conversation_share``: that over the
  conversation's tokens (a large share makes recall cheap: 5 of 6 segments covers nearly all).

Settings: segment size x chunking x {union with (k_vec, k_kw) pairs, fusion with max_segments,
lines with (line_window, line_budget) pairs (``--lines``, turn chunking only; a segment counts with its routed
lines only)} x newest handling. Tokens are counted with SmolLM2's tokenizer (the converted model's
``tokenizer.json`` in the cache, see ``cluster.smollm``), else with the segmenter's estimate;
the JSON says which. Texts are embedded once per distinct text (MiniLM, cached on disk), so
``route_ms`` is routing without the query's embedding. The train split unless ``--split test`` (for a
final table only: nothing is tuned on it).

    python -m bench.route_recall                       # ~3-5 min on 2 cores, first run
    python -m bench.route_recall --sizes 1024 --union 2:2,3:2 --fusion-max 5 --chunking turn
    python -m bench.route_recall --sizes 1024 --chunking turn --union "" --fusion-max 5 --lines 2:5120 --newest off
    ENGRAM_ROUTER__BM25_STEM=true ENGRAM_ROUTER__BM25_STOP_WORDS=questions python -m bench.route_recall
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tqdm import tqdm

from bench import encoding
from bench.common import emit_json, parse_int_list, setup_logging
from cluster.embedding_cache import embed_cached
from core.config import RouterConfig, load_config
from core.model_store import converted_dir, known
from corpora.locomo import Conversation, Question, load_locomo, split
from memory.routing import Activation, EpisodicRouter
from memory.segmenter import Segment, estimate_tokens, segment_turns
from serve.embedder import Embedder

CATEGORIES = (1, 2, 3, 4)
NEWEST = ("extra", "within", "off")


class CachedEncoder:
    """Embeds each distinct text once (passages and queries kept apart); what embeds for the router here."""

    def __init__(self, embedder: Embedder, cache_dir: Path) -> None:
        self.embedder, self.cache_dir, self.dim = embedder, cache_dir, embedder.dim
        self._vectors: dict[bool, dict[str, np.ndarray]] = {False: {}, True: {}}

    def prime(self, texts: Sequence[str], *, is_query: bool, label: str = "route-recall") -> None:
        store = self._vectors[is_query]
        missing = list(dict.fromkeys(t for t in texts if t not in store))
        if not missing:
            return
        if is_query:  # NOTE: queries may carry a prefix (e5); the disk cache holds passages only.
            vectors = self.embedder.encode(missing, is_query=True)
        else:
            vectors, _ = embed_cached(self.embedder, missing, self.cache_dir, label=label)
        store.update(zip(missing, vectors, strict=True))

    def encode(self, texts: Sequence[str], *, is_query: bool = False) -> np.ndarray:
        self.prime(texts, is_query=is_query)
        store = self._vectors[is_query]
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return np.stack([store[t] for t in texts])


def token_counter(cache_dir: Path) -> tuple[Callable[[str], int], str]:
    """SmolLM2's tokenizer when the converted model is cached, else the segmenter's estimate."""
    path = converted_dir(known("smollm2-135m"), cache_dir) / "tokenizer.json"
    if not path.is_file():
        return estimate_tokens, "estimate"
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(path))
    memo: dict[str, int] = {}

    def count(text: str) -> int:
        if text not in memo:
            memo[text] = len(tok.encode(text, add_special_tokens=False).ids)
        return memo[text]

    return count, "smollm2"


@dataclass(frozen=True)
class Variant:
    """One routing setting over an index built with a given chunking."""

    name: str
    config: RouterConfig


def _with(base: RouterConfig, **update) -> RouterConfig:
    """A validated copy of ``base`` with ``update`` applied."""
    return RouterConfig.model_validate({**base.model_dump(), **update})


def variants(base: RouterConfig, union: list[tuple[int, int]], fusion_max: list[int], newest: list[str],
             chunking: str, lines: Sequence[tuple[int, int]] = ()) -> list[Variant]:
    out = []
    for nw in newest:
        flags = {"include_newest": nw != "off", "newest_extra": nw == "extra", "chunking": chunking}
        for kv, kk in union if nw != "within" else ():  # newest_extra only matters under a cap (fusion)
            cfg = _with(base, mode="union", k_global=0, k_vec=kv, k_kw=kk, **flags)
            out.append(Variant(f"union vec{kv}+kw{kk} newest={nw}", cfg))
        for m in fusion_max:
            cfg = _with(base, mode="fusion", max_segments=m, **flags)
            out.append(Variant(f"fusion max{m} newest={nw}", cfg))
        for window, budget in lines if chunking == "turn" and nw != "within" else ():
            cfg = _with(base, mode="lines", line_window=window, line_budget=budget, **flags)
            out.append(Variant(f"lines w{window} {budget}tok newest={nw}", cfg))
    return out


def routed_lines(acts: Sequence[Activation], by_id: dict[int, Segment]) -> list[tuple[str, int]]:
    """(turn id, tokens) of every routed line: a segment's routed lines (``Activation.lines``) or all of it."""
    out = []
    for a in acts:
        seg = by_id[a.segment_id]
        picked = a.lines or range(len(seg.lines))
        out += [(seg.turn_ids[i], seg.token_counts[i]) for i in picked]
    return out


def evidence_recall(activated: list[Segment] | list[tuple[str, int]], question: Question) -> float:
    """Share of ``question``'s evidence turns among ``activated`` segments (or routed (turn id, tokens) lines)."""
    covered = {tid for s in activated for tid in (s.turn_ids if isinstance(s, Segment) else s[:1])}
    return sum(e in covered for e in question.evidence) / len(question.evidence)


def run_setting(conversations: list[Conversation], segments: dict[str, list[Segment]], encoder: CachedEncoder,
                vs: list[Variant], desc: str) -> list[dict]:
    keys = ("recall", "n", "cat", "ms", "tokens", "share")
    per: dict[str, dict[str, list]] = {v.name: {k: [] for k in keys} for v in vs}
    for conv in tqdm(conversations, desc=desc):
        questions = [q for q in conv.questions if q.category in CATEGORIES and q.evidence]
        by_id = {s.id: s for s in segments[conv.sample_id]}
        conv_tokens = sum(sum(s.token_counts[s.overlap :]) for s in by_id.values())
        for v in vs:
            router = EpisodicRouter(encoder.dim, v.config)
            encoding.add_segments(router, encoder, segments[conv.sample_id])
            t0 = time.perf_counter()
            routed = encoding.route_batch(router, encoder, [q.question for q in questions])
            ms = (time.perf_counter() - t0) * 1000 / max(len(questions), 1)
            acc = per[v.name]
            for q, acts in zip(questions, routed, strict=True):
                lines = routed_lines(acts, by_id)
                acc["recall"].append(evidence_recall(lines, q))
                acc["n"].append(len(acts))
                acc["cat"].append(q.category)
                acc["tokens"].append(sum(n for _, n in lines))
                acc["share"].append(acc["tokens"][-1] / conv_tokens)
            acc["ms"].append(ms)
    rows = []
    for v in vs:
        acc = per[v.name]
        recall, n, cat = np.array(acc["recall"]), np.array(acc["n"]), np.array(acc["cat"])
        rows.append({
            "setting": v.name, "mode": v.config.mode, "k_vec": v.config.k_vec, "k_kw": v.config.k_kw,
            "max_segments": v.config.max_segments if v.config.mode == "fusion" else None,
            **({"line_window": v.config.line_window, "line_budget": v.config.line_budget}
               if v.config.mode == "lines" else {}),
            "newest": _newest_name(v.config),
            "evidence_recall": round(float(recall.mean()), 4),
            "all_evidence_share": round(float((recall >= 1).mean()), 4),
            "segments_per_question": round(float(n.mean()), 3), "segments_max": int(n.max()),
            "tokens_per_question": round(float(np.mean(acc["tokens"])), 1),
            "tokens_max": int(np.max(acc["tokens"])),
            "conversation_share": round(float(np.mean(acc["share"])), 4),
            "recall_by_category": {str(c): round(float(recall[cat == c].mean()), 4) for c in CATEGORIES},
            "route_ms": round(float(np.mean(acc["ms"])), 3),
        })
    return rows


def depth_curve(conversations: list[Conversation], segments: dict[str, list[Segment]], encoder: CachedEncoder,
                base: RouterConfig, depths: Sequence[int]) -> dict[str, dict]:
    """Evidence recall of the first ``d`` segments of ``base``'s whole ranking (fusion with no cap, the newest
    not added) for each depth ``d``, overall and per category: how deep the evidence lies, so what a re-ranker of
    the top ``d`` could reach at best with 5 segments."""
    full = _with(base, mode="fusion", max_segments=1000, include_newest=False)
    recall: dict[int, list[float]] = {d: [] for d in depths}
    cats: list[int] = []
    for conv in conversations:
        questions = [q for q in conv.questions if q.category in CATEGORIES and q.evidence]
        by_id = {s.id: s for s in segments[conv.sample_id]}
        router = EpisodicRouter(encoder.dim, full)
        encoding.add_segments(router, encoder, segments[conv.sample_id])
        for q, acts in zip(questions, encoding.route_batch(router, encoder, [q.question for q in questions]),
                           strict=True):
            cats.append(q.category)
            for d in depths:
                recall[d].append(evidence_recall([by_id[a.segment_id] for a in acts[:d]], q))
    cat = np.array(cats)
    return {str(d): {"evidence_recall": round(float(np.mean(r)), 4),
                     "recall_by_category": {str(c): round(float(np.array(r)[cat == c].mean()), 4) for c in CATEGORIES}}
            for d, r in recall.items()}


def parse_pairs(text: str) -> list[tuple[int, int]]:
    """'2:2,3:1' -> [(2, 2), (3, 1)] (k_vec:k_kw)."""
    pairs = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        kv, _, kk = part.partition(":")
        pairs.append((int(kv), int(kk or kv)))
    return pairs


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default=None, help="config profile (default: $ENGRAM_PROFILE or cpu)")
    parser.add_argument("--data", default=None, help="locomo10.json (default: data.locomo_path)")
    parser.add_argument("--sizes", default="512,1024,2048,4096", help="segment sizes in tokens")
    parser.add_argument("--overlap", type=float, default=0.1, help="share of a segment replayed (E-mem: 0.1)")
    parser.add_argument("--chunking", default="turn,chars", help="P_vec chunkings: turn, chars")
    parser.add_argument("--union", default="1:1,2:2,3:3,5:5,3:1,1:3,3:2,2:3,4:1",
                        help="union settings as k_vec:k_kw pairs")
    parser.add_argument("--fusion-max", default="3,4,5", help="fusion max_segments values")
    parser.add_argument("--lines", default="", help="lines-mode settings as line_window:line_budget pairs, e.g. "
                        "2:5120,0:5120 (turn chunking only)")
    parser.add_argument("--split", choices=["train", "test"], default="train",
                        help="LoCoMo split (test: for a final table only; tune on train)")
    parser.add_argument("--newest", default="extra,off", help=f"newest handling, from {','.join(NEWEST)}")
    parser.add_argument("--depths", default="", help="also: evidence recall of the first d segments of the "
                        "configured ranking, e.g. 5,8,10,15 (per segment size and chunking; JSON key depth_curve)")
    parser.add_argument("--counter", choices=["auto", "estimate"], default="auto",
                        help="token counter: auto = SmolLM2's tokenizer when cached, else the estimate")
    args = parser.parse_args(argv)
    newest = [n.strip() for n in args.newest.split(",") if n.strip()]
    chunkings = [c.strip() for c in args.chunking.split(",") if c.strip()]
    if bad := [n for n in newest if n not in NEWEST]:
        parser.error(f"--newest: unknown {bad}; choose from {NEWEST}")
    if bad := [c for c in chunkings if c not in ("turn", "chars")]:
        parser.error(f"--chunking: unknown {bad}")
    union, fusion_max = parse_pairs(args.union), parse_int_list(args.fusion_max)
    setup_logging()
    cfg = load_config(args.profile)
    conversations = split(load_locomo(args.data or cfg.data.locomo_path), args.split)
    if args.counter == "estimate":
        count, counter = estimate_tokens, "estimate"
    else:
        count, counter = token_counter(cfg.paths.cache_dir)
    encoder = CachedEncoder(Embedder(cfg.embedder), cfg.paths.cache_dir)
    questions = [q for c in conversations for q in c.questions if q.category in CATEGORIES and q.evidence]
    encoder.prime([q.question for q in questions], is_query=True)

    results, segment_stats, curves = [], [], []
    for size in parse_int_list(args.sizes):
        segments = {
            c.sample_id: segment_turns(c.turns, size, args.overlap, count_tokens=count) for c in conversations
        }
        n_segs = [len(s) for s in segments.values()]
        tokens = [seg.tokens for segs in segments.values() for seg in segs]
        segment_stats.append({"size": size, "segments_per_conversation": round(float(np.mean(n_segs)), 2),
                              "tokens_per_segment": round(float(np.mean(tokens)), 1)})
        for chunking in chunkings:
            vs = variants(cfg.router, union, fusion_max, newest, chunking, parse_pairs(args.lines))
            probe = EpisodicRouter(encoder.dim, vs[0].config)
            encoder.prime([c for segs in segments.values() for s in segs for c in probe.chunks_of(s)],
                          is_query=False, label=f"route-recall-{chunking}")
            for row in run_setting(conversations, segments, encoder, vs, desc=f"size {size}, {chunking}"):
                results.append({"size": size, "chunking": chunking, **row})
            if args.depths:
                curves.append({"size": size, "chunking": chunking, "depths": depth_curve(
                    conversations, segments, encoder, _with(cfg.router, chunking=chunking),
                    parse_int_list(args.depths))})

    within5 = [r for r in results if r["segments_max"] <= 5
               or (r["mode"] == "lines" and r["tokens_max"] <= 5 * r["size"])]  # lines: 5 segments' tokens
    best = max(within5, key=lambda r: r["evidence_recall"]) if within5 else None
    out_dir = Path(cfg.paths.results_dir) / "route_recall"
    out_dir.mkdir(parents=True, exist_ok=True)
    payload = {
        "split": args.split, "conversations": len(conversations), "questions": len(questions),
        "categories": list(CATEGORIES), "counter": counter, "overlap": args.overlap,
        "embedder": cfg.embedder.model,
        "bm25": {"idf": cfg.router.bm25_idf, "stop_words": cfg.router.bm25_stop_words, "stem": cfg.router.bm25_stem},
        "segments": segment_stats, "best_at_most_5": best, "results": results,
        **({"depth_curve": curves} if curves else {}),
    }
    (out_dir / "results.json").write_text(json.dumps(payload, indent=1))
    _print_table(results)
    emit_json(payload)


def _newest_name(cfg: RouterConfig) -> str:
    if not cfg.include_newest:
        return "off"
    return "extra" if cfg.newest_extra else "within"


def _print_table(results: list[dict]) -> None:
    """The results as a fixed-width table on stderr (stdout ends with the JSON line)."""
    head = (f"{'size':>5} {'chunk':>5} {'setting':<30} {'recall':>7} {'all':>6} {'segs':>5} {'max':>4} "
            f"{'share':>6} ms")
    print(head, file=sys.stderr)
    for r in results:
        print(f"{r['size']:>5} {r['chunking']:>5} {r['setting']:<30} {r['evidence_recall']:>7.3f} "
              f"{r['all_evidence_share']:>6.3f} {r['segments_per_question']:>5.2f} {r['segments_max']:>4} "
              f"{r['conversation_share']:>6.3f} {r['route_ms']:.2f}", file=sys.stderr)


if __name__ == "__main__":
    main()
