"""Routing alternatives that change the query or the segments, on LoCoMo's TRAIN split (conversations 1-7).

Every question of categories 1-4 with evidence is routed by the configured router (fusion, no summaries, the
newest segment not added) and the evidence recall of its first ``--depth`` segments is reported per variant:

- ``question``: the question as asked (the reference; ``bench.route_recall``'s configured row);
- ``hypothetical``: a chat message a model writes as the likely answer (HyDE), routed alone;
- ``question + hypothetical``: both as one query (BM25 and the dense path read the concatenation);
- ``interleaved``: the question's ranking and the ``question + hypothetical`` ranking taken in turn, each
  segment once;
- ``speaker segments``: each speaker's turns segmented on their own (same size and overlap); a question that
  names one speaker is routed over that speaker's segments only, any other over all;
- ``k mixed + d-k of the speaker's``: the question's first ``k`` segments and the first ``d - k`` speaker
  segments together (both views stored).

The hypothetical messages come from the ``--role`` model of the profile (``cpu-quality``'s ``summary``:
Qwen2.5-Coder-0.5B on vLLM-CPU), greedy, at most 40 tokens, cached per model under
``<cache_dir>/route_alternatives/`` (resumable). The test split is never read.

    python -m bench.route_alternatives --profile cpu-quality --role summary   # ~25 min on 2 cores, first run
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Sequence
from dataclasses import replace
from itertools import zip_longest
from pathlib import Path

import numpy as np
from tqdm import tqdm

from bench import encoding
from bench.common import read_jsonl, save_and_emit, setup_logging
from bench.route_recall import CachedEncoder, _with, evidence_recall, token_counter
from bench.route_signals import CATEGORIES, print_rows, row
from core.config import EngramConfig, load_config
from core.generation import ChatMessage, GenerationRequest
from corpora.locomo import Question, load_locomo, split
from memory.routing import EpisodicRouter
from memory.segmenter import Segment, named_speaker, segment_turns
from serve.embedder import Embedder

PROMPT = ("Two friends chat over many days. A question about their chats is given. Write the chat message "
          "one of them most likely sent that answers it: one short sentence in the first person, with "
          "concrete names, things, places or dates. Guess if you do not know.")
BATCH = 32


def hypothetical_request(question: str) -> GenerationRequest:
    return GenerationRequest(messages=[ChatMessage(role="system", content=PROMPT),
                                       ChatMessage(role="user", content=f"Question: {question}\nMessage:")],
                             max_tokens=40)


def hypothetical_messages(questions: Sequence[str], cfg: EngramConfig, role: str) -> dict[str, str]:
    """question -> the model's hypothetical answer message; cached per model, resumable."""
    engine_cfg = cfg.engine_for(role)  # type: ignore[arg-type]
    path = Path(cfg.paths.cache_dir) / "route_alternatives" / f"hypothetical-{Path(engine_cfg.model).name}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    done = {row["question"]: row["message"] for row in read_jsonl(path)}
    todo = list(dict.fromkeys(q for q in questions if q not in done))
    if todo:
        from serve.engine import build_engine

        engine = build_engine(engine_cfg)
        try:
            with path.open("a") as f:
                for i in tqdm(range(0, len(todo), BATCH), desc=f"hypothetical ({role})"):
                    batch = todo[i:i + BATCH]
                    results = engine.generate([hypothetical_request(q) for q in batch])
                    for q, result in zip(batch, results, strict=True):
                        done[q] = result.text.strip()
                        f.write(json.dumps({"question": q, "message": done[q]}) + "\n")
                    f.flush()
        finally:
            engine.close()
    return done


def interleave(*rankings: Sequence[int]) -> list[int]:
    """The rankings taken in turn, each id once: ``interleave([1, 2], [3, 1]) == [1, 3, 2]``."""
    out: list[int] = []
    for turn in zip_longest(*rankings):
        for x in turn:
            if x is not None and x not in out:
                out.append(x)
    return out


def speaker_segments(conv_turns: Sequence, speakers: Sequence[str], size: int, overlap: float,
                     count: Callable[[str], int]) -> tuple[list[Segment], dict[int, str]]:
    """Each speaker's turns segmented alone; ids renumbered; segment id -> its speaker."""
    segments, owner = [], {}
    for who in speakers:
        for seg in segment_turns([t for t in conv_turns if t.speaker == who], size, overlap, count_tokens=count):
            owner[len(segments)] = who
            segments.append(replace(seg, id=len(segments)))
    return segments, owner


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.route_alternatives", description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default=None, help="config profile (default: $ENGRAM_PROFILE or cpu)")
    parser.add_argument("--role", default="summary", choices=("assistant", "master", "summary"),
                        help="the model role that writes the hypothetical messages")
    parser.add_argument("--data", default=None, help="locomo10.json (default: data.locomo_path)")
    parser.add_argument("--size", type=int, default=1024, help="segment size in tokens (CPU profile: 1024)")
    parser.add_argument("--overlap", type=float, default=0.1, help="share of a segment replayed")
    parser.add_argument("--depth", type=int, default=5, help="segments read per question")
    args = parser.parse_args(argv)
    setup_logging()
    cfg = load_config(args.profile)
    conversations = split(load_locomo(args.data or cfg.data.locomo_path), "train")  # never the test split
    asked: dict[str, list[Question]] = {c.sample_id: [q for q in c.questions if q.category in CATEGORIES and q.evidence]
                                        for c in conversations}
    hyp = hypothetical_messages([q.question for qs in asked.values() for q in qs], cfg, args.role)
    count, counter = token_counter(cfg.paths.cache_dir)
    encoder = CachedEncoder(Embedder(cfg.embedder), cfg.paths.cache_dir)
    router_cfg = _with(cfg.router, mode="fusion", max_segments=1000, include_newest=False, chunking="turn")
    recall: dict[str, list[float]] = {}
    cats: list[int] = []
    for conv in tqdm(conversations, desc="route"):
        questions = asked[conv.sample_id]
        speakers = sorted({t.speaker for t in conv.turns})
        mixed = segment_turns(conv.turns, args.size, args.overlap, count_tokens=count)
        alone, owner = speaker_segments(conv.turns, speakers, args.size, args.overlap, count)
        encoder.prime([line for s in mixed + alone for line in s.lines], is_query=False)
        texts = {"question": [q.question for q in questions],
                 "hypothetical": [hyp[q.question] for q in questions],
                 "question + hypothetical": [f"{q.question} {hyp[q.question]}" for q in questions]}
        for t in texts.values():
            encoder.prime(t, is_query=True)
        router = EpisodicRouter(encoder.dim, router_cfg)
        encoding.add_segments(router, encoder, mixed)
        by_id = {s.id: s for s in mixed}
        ranked = {k: [[a.segment_id for a in acts] for acts in encoding.route_batch(router, encoder, v)]
                  for k, v in texts.items()}
        ranked["interleaved"] = [interleave(a, b) for a, b in
                                 zip(ranked["question"], ranked["question + hypothetical"], strict=True)]
        by_speaker = EpisodicRouter(encoder.dim, router_cfg)
        encoding.add_segments(by_speaker, encoder, alone)
        for i, q in enumerate(questions):
            cats.append(q.category)
            for name, ranks in ranked.items():
                recall.setdefault(name, []).append(evidence_recall([by_id[s] for s in ranks[i][: args.depth]], q))
            who = named_speaker(q.question, speakers)
            acts = encoding.route(by_speaker, encoder, q.question,
                                  None if who is None else [s for s, w in owner.items() if w == who])
            recall.setdefault("speaker segments", []).append(
                evidence_recall([alone[a.segment_id] for a in acts[: args.depth]], q))
            for k in range(1, args.depth):
                both = [by_id[s] for s in ranked["question"][i][:k]]
                both += [alone[a.segment_id] for a in acts[: args.depth - k]]
                recall.setdefault(f"{k} mixed + {args.depth - k} of the speaker's", []).append(evidence_recall(both, q))
    cat_arr = np.array(cats)
    rows = [row(name, np.array(r), cat_arr, key="variant") for name, r in recall.items()]
    print_rows(rows, key="variant")
    payload = {"split": "train", "questions": len(cats), "segment_tokens": args.size, "depth": args.depth,
               "counter": counter, "embedder": cfg.embedder.model, "role": args.role,
               "model": cfg.engine_for(args.role).model, "results": rows}  # type: ignore[arg-type]
    save_and_emit(cfg.paths.results_dir, "route_alternatives", payload)


if __name__ == "__main__":
    main()
