"""Routing signals beyond the router's three scores, on LoCoMo's TRAIN split (conversations 1-7).

Each train conversation is segmented as ``bench.route_recall`` does (1,024 SmolLM2 tokens by default, 10%
overlap, no summaries) and every question of categories 1-4 with evidence ranks all segments by one scoring;
the evidence recall of its first ``--depth`` segments is reported per scoring (the newest segment not added).
Signals per (question, segment), each min-max normalised over the conversation's segments:

- ``kw``: BM25 of the segment's text (the router's tokenizer: stemming, question stop words as configured);
- ``vec_mean``: the router's P_vec (mean cosine of the segment's lines among the question's top ``top_chunks``);
- ``vec_max``: the best line's cosine;
- ``*_speaker``: the same over the lines of the one speaker the question names (a question naming exactly one
  of the conversation's speakers by first name); other questions read every line;
- ``stripped``: lines embedded without their ``[date] speaker:`` header (the stored lines carry it);
- ``prf``: a second round — BM25 of each segment for the text of the question's ``m`` best lines of the first
  round (``kw + vec_max_speaker``), added with weight ``beta``;
- ``line_hybrid_max``: the best line by plain RAG's line score (``bench.systems.RagBaseline``: min-max cosine +
  min-max BM25, each over the conversation's lines, the lines with their header);
- ``learned``: logistic regression on all signals, trained leave-one-conversation-out (segment holds evidence).

``router`` is the configured router itself (``EpisodicRouter``, fusion with its BM25 boost, no cap): the
reference. The test split is never read here.

    python -m bench.route_signals                   # ~2 min on 2 cores with cached line embeddings
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from tqdm import tqdm

from bench import encoding
from bench.common import save_and_emit, setup_logging
from bench.route_recall import CachedEncoder, _with, evidence_recall, token_counter
from core.config import RouterConfig, load_config
from corpora.locomo import Question, load_locomo, split
from memory.bm25 import bm25_index
from memory.route_scoring import minmax
from memory.routing import EpisodicRouter
from memory.segmenter import Segment, named_speaker, segment_turns
from serve.embedder import Embedder

CATEGORIES = (1, 2, 3, 4)
HEADER = re.compile(r"^\[[^\]]*\] ([^:]+): (.*)$", re.S)


@dataclass
class ConversationSignals:
    """One conversation's segments, its lines (segment order, overlaps repeated) and its questions' signals."""

    sample_id: str
    segments: list[Segment]
    questions: list[Question]
    signals: dict[str, np.ndarray]  # name -> (questions, segments)
    labels: np.ndarray  # (questions, segments): the segment holds some of the question's evidence


def _segment_max(sims: np.ndarray, starts: np.ndarray) -> np.ndarray:
    return np.maximum.reduceat(sims, starts, axis=1)


def _top_mean(sims: np.ndarray, owner: np.ndarray, n: int, top: int) -> np.ndarray:
    """Per segment: mean of its lines' scores among each row's ``top`` best (0 when none is)."""
    nq = len(sims)
    idx = np.argsort(-sims, axis=1, kind="stable")[:, :top]
    keys = (np.arange(nq)[:, None] * n + owner[idx]).ravel()
    sums = np.bincount(keys, weights=np.take_along_axis(sims, idx, 1).ravel(), minlength=nq * n).reshape(nq, n)
    counts = np.bincount(keys, minlength=nq * n).reshape(nq, n)
    return np.divide(sums, counts, out=np.zeros_like(sums), where=counts > 0)


def conversation_signals(sample_id: str, segments: list[Segment], questions: list[Question],
                         encoder: CachedEncoder, config: RouterConfig, prf_lines: int) -> ConversationSignals:
    lines = [line for s in segments for line in s.lines]
    parts = [HEADER.match(line) for line in lines]
    speaker = np.array([p.group(1) if p else "" for p in parts])
    bare = [p.group(2) if p else line for p, line in zip(parts, lines, strict=True)]
    speakers = sorted(set(speaker) - {""})
    owner = np.repeat(np.arange(len(segments)), [len(s.lines) for s in segments])
    starts = np.concatenate([[0], np.cumsum([len(s.lines) for s in segments])[:-1]])
    texts = [q.question for q in questions]
    q = encoder.encode(texts, is_query=True)
    mask = np.ones((len(questions), len(lines)), dtype=bool)
    for i, text in enumerate(texts):
        if (who := named_speaker(text, speakers)) is not None:
            mask[i] = speaker == who
    seg_bm25 = bm25_index(config)
    seg_bm25.add([s.text for s in segments])
    kw = np.vstack([seg_bm25.scores(t) for t in texts])
    n = len(segments)
    signals = {"kw": minmax(kw)}
    full_sims, bare_sims = q @ encoder.encode(lines).T, q @ encoder.encode(bare).T
    for name, sims in (("", full_sims), ("_stripped", bare_sims)):
        masked = np.where(mask, sims, -1.0)
        signals[f"vec_mean{name}"] = minmax(_top_mean(sims, owner, n, config.top_chunks))
        signals[f"vec_max{name}"] = minmax(_segment_max(sims, starts))
        signals[f"vec_max{name}_speaker"] = minmax(_segment_max(masked, starts))
    line_bm25 = bm25_index(config)
    line_bm25.add(lines)
    line_kw = np.vstack([line_bm25.scores(t) for t in texts])
    signals["line_hybrid_max"] = minmax(_segment_max(minmax(full_sims) + minmax(line_kw), starts))
    # NOTE: the second round starts from the best first-round lines of the named speaker (dense + BM25 per line)
    expansion = np.zeros_like(kw)
    for i in range(len(texts)):
        line_score = minmax(np.where(mask[i], bare_sims[i], -1.0)[None])[0] + minmax(line_kw[i][None])[0]
        best = np.argsort(-np.where(mask[i], line_score, -np.inf), kind="stable")[:prf_lines]
        expansion[i] = seg_bm25.scores(" ".join(bare[j] for j in best))
    signals["prf_kw"] = minmax(expansion)
    labels = np.array([[bool(set(qq.evidence) & set(s.turn_ids)) for s in segments] for qq in questions])
    return ConversationSignals(sample_id, segments, questions, signals, labels)


def fit_logistic(x: np.ndarray, y: np.ndarray, l2: float = 1e-2, steps: int = 50) -> np.ndarray:
    """Weights (last: bias) of an L2-regularised logistic regression, by Newton steps."""
    xb = np.hstack([x, np.ones((len(x), 1))])
    theta = np.zeros(xb.shape[1])
    for _ in range(steps):
        p = 1 / (1 + np.exp(-xb @ theta))
        grad = xb.T @ (p - y) / len(y) + l2 * theta
        hess = (xb.T * (p * (1 - p))) @ xb / len(y) + l2 * np.eye(len(theta))
        theta -= np.linalg.solve(hess, grad)
    return theta


Scoring = Callable[[int, ConversationSignals], np.ndarray]


def scorings(convs: list[ConversationSignals], weights: list[float], beta: float) -> dict[str, Scoring]:
    out: dict[str, Scoring] = {"kw": lambda _, c: c.signals["kw"]}
    for w in weights:
        for vec in ("vec_mean", "vec_max", "vec_max_speaker", "vec_max_stripped", "vec_max_stripped_speaker"):
            out[f"kw + {w} {vec}"] = lambda _, c, w=w, vec=vec: c.signals["kw"] + w * c.signals[vec]
    out["line_hybrid_max"] = lambda _, c: c.signals["line_hybrid_max"]
    for w in weights:
        out[f"kw + {w} line_hybrid_max"] = lambda _, c, w=w: c.signals["kw"] + w * c.signals["line_hybrid_max"]
    for w in weights:
        out[f"kw + {w} vec_max_stripped_speaker + {beta} prf_kw"] = (
            lambda _, c, w=w: c.signals["kw"] + w * c.signals["vec_max_stripped_speaker"] + beta * c.signals["prf_kw"])
    names = sorted(convs[0].signals)

    def learned(held: int, conv: ConversationSignals) -> np.ndarray:
        train = [c for j, c in enumerate(convs) if j != held]
        x = np.concatenate([np.stack([c.signals[k] for k in names], -1).reshape(-1, len(names)) for c in train])
        y = np.concatenate([c.labels.reshape(-1) for c in train]).astype(float)
        theta = fit_logistic(x, y)
        return np.stack([conv.signals[k] for k in names], -1) @ theta[:-1]

    out["learned (leave one conversation out)"] = learned
    return out


def recall_rows(convs: list[ConversationSignals], score: Scoring, depth: int) -> tuple[np.ndarray, np.ndarray]:
    recall, cats = [], []
    for j, conv in enumerate(convs):
        s = score(j, conv)
        for i, q in enumerate(conv.questions):
            top = np.argsort(-s[i], kind="stable")[:depth]
            recall.append(evidence_recall([conv.segments[k] for k in top], q))
            cats.append(q.category)
    return np.array(recall), np.array(cats)


def row(name: str, recall: np.ndarray, cats: np.ndarray, key: str = "scoring") -> dict:
    """One result: ``name`` under ``key``, the mean recall overall and per category."""
    return {key: name, "evidence_recall": round(float(recall.mean()), 4),
            "recall_by_category": {str(c): round(float(recall[cats == c].mean()), 4) for c in CATEGORIES}}


def print_rows(rows: list[dict], key: str = "scoring") -> None:
    """The results as a plain table on stderr: name, recall, recall per category."""
    width = max((len(r[key]) for r in rows), default=0)
    for r in rows:
        cats = " ".join(f"{r['recall_by_category'][str(c)]:.3f}" for c in CATEGORIES)
        print(f"{r[key]:<{width}} {r['evidence_recall']:.4f}  {cats}", file=sys.stderr)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.route_signals", description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default=None, help="config profile (default: $ENGRAM_PROFILE or cpu)")
    parser.add_argument("--data", default=None, help="locomo10.json (default: data.locomo_path)")
    parser.add_argument("--size", type=int, default=1024, help="segment size in tokens (CPU profile: 1024)")
    parser.add_argument("--overlap", type=float, default=0.1, help="share of a segment replayed")
    parser.add_argument("--depth", type=int, default=5, help="segments read per question")
    parser.add_argument("--weights", default="0.3,0.5,0.7,1.0", help="weights of the dense signal beside kw")
    parser.add_argument("--prf-lines", type=int, default=5, help="first-round lines the second round reads")
    parser.add_argument("--prf-weight", type=float, default=0.5, help="weight of the second round's BM25")
    args = parser.parse_args(argv)
    weights = [float(w) for w in args.weights.split(",") if w.strip()]
    setup_logging()
    cfg = load_config(args.profile)
    conversations = split(load_locomo(args.data or cfg.data.locomo_path), "train")  # never the test split
    count, counter = token_counter(cfg.paths.cache_dir)
    encoder = CachedEncoder(Embedder(cfg.embedder), cfg.paths.cache_dir)
    router_cfg = _with(cfg.router, mode="fusion", max_segments=1000, include_newest=False, chunking="turn")
    convs, reference = [], ([], [])
    speaker_stats = {"questions_naming_one_speaker": 0, "evidence_turns_of_named": 0, "evidence_turns_of_other": 0}
    for conv in tqdm(conversations, desc="signals"):
        segments = segment_turns(conv.turns, args.size, args.overlap, count_tokens=count)
        questions = [q for q in conv.questions if q.category in CATEGORIES and q.evidence]
        lines = [line for s in segments for line in s.lines]
        encoder.prime(lines, is_query=False)
        encoder.prime([m.group(2) if (m := HEADER.match(x)) else x for x in lines], is_query=False,
                      label="route-signals-stripped")
        encoder.prime([q.question for q in questions], is_query=True)
        said_by = {t.turn_id: t.speaker for t in conv.turns}
        for q in questions:
            if (who := named_speaker(q.question, sorted(set(said_by.values())))) is not None:
                speaker_stats["questions_naming_one_speaker"] += 1
                for e in (e for e in q.evidence if e in said_by):
                    speaker_stats["evidence_turns_of_named" if said_by[e] == who else "evidence_turns_of_other"] += 1
        router = EpisodicRouter(encoder.dim, router_cfg)
        encoding.add_segments(router, encoder, segments)
        by_id = {s.id: s for s in segments}
        for q, acts in zip(questions, encoding.route_batch(router, encoder, [q.question for q in questions]),
                           strict=True):
            reference[0].append(evidence_recall([by_id[a.segment_id] for a in acts[: args.depth]], q))
            reference[1].append(q.category)
        convs.append(conversation_signals(conv.sample_id, segments, questions, encoder, router_cfg, args.prf_lines))
    rows = [row("router (configured fusion)", np.array(reference[0]), np.array(reference[1]))]
    for name, score in scorings(convs, weights, args.prf_weight).items():
        rows.append(row(name, *recall_rows(convs, score, args.depth)))
    print_rows(rows)
    payload = {"split": "train", "conversations": len(convs), "questions": sum(len(c.questions) for c in convs),
               "segment_tokens": args.size, "depth": args.depth, "counter": counter, "embedder": cfg.embedder.model,
               "speakers": speaker_stats, "results": rows}
    save_and_emit(cfg.paths.results_dir, "route_signals", payload)


if __name__ == "__main__":
    main()
