"""Content-type labels from a teacher model restricted to a choice::

    python -m training.content_teacher [--model qwen2.5-coder-1.5b] [--backend vllm|transformers]
        [--split train|test|all] [--turns evidence|all] [--out FILE] [--limit N]

The admission classifier's content-type head (``inference.admission.CONTENT_TYPES``) was trained on a keyword
rule's labels. This labels turns with an instruct model instead: one prompt per turn (the six types defined,
then the turn and the question), answered by the engine's ``choice`` constraint over the six type names, so
every answer is a valid type and nothing is parsed. The prompt was chosen on 32 cited turns of conv-26 (train
split) against labels written by hand first: 0.625 agreement; with six worked examples 0.22–0.31, with the
turn before as context 0.41–0.44. By default only the turns LoCoMo's questions cite (the ADD turns the head
trains and is evaluated on) of both splits are labelled: the train split's labels train the head, the test
split's only measure it (docs/admission.md).

Output: JSONL rows ``{"sample_id", "dia_id", "type", "model"}``; an existing file is resumed (rows already
there are kept, the rest appended), so an interrupted run loses at most one batch.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from tqdm import tqdm

from core.generation import ChatMessage, GenerationEngine, GenerationRequest
from inference.admission import CONTENT_TYPES

log = logging.getLogger(__name__)

TEACHER_MODEL = "qwen2.5-coder-1.5b"  # the quality profile's master (configs/cpu-quality.yaml)
PACKAGED_LABELS = Path(__file__).resolve().parents[1] / "bench" / "labels" / "content_types_teacher.jsonl"

SYSTEM = (
    "You sort turns of a chat between two friends by the kind of memory they hold, so that a memory system can "
    "file them. Answer with exactly one word:\n"
    "fact - a lasting fact about the speaker's life: who they are, their job, family, pets, home, health, "
    "possessions, background or skills.\n"
    "preference - what the speaker likes, dislikes, loves, prefers or values; favourites and opinions.\n"
    "plan - something the speaker intends, hopes or is scheduled to do later.\n"
    "emotion - how the speaker feels, when the feeling is the main point.\n"
    "event - something that happened: an activity, trip, meeting, purchase, achievement or experience.\n"
    "other - only greetings, thanks, compliments or questions that say nothing about anyone's life, feelings or "
    "plans.\n"
    "If several kinds apply, choose the main point of the turn."
)
QUESTION = "Which kind is it: fact, preference, plan, emotion, event or other?"


def teacher_request(turn: str) -> GenerationRequest:
    """The prompt for one turn (rendered text, e.g. ``[date] speaker: text``), its answer one of the six types."""
    return GenerationRequest(
        messages=[ChatMessage(role="system", content=SYSTEM),
                  ChatMessage(role="user", content=f"Turn to sort: {turn}\n{QUESTION}")],
        choice=list(CONTENT_TYPES), temperature=0.0,
    )


def label_texts(engine: GenerationEngine, turns: Sequence[str]) -> list[str]:
    """The teacher's type for each rendered turn; raises if the engine answers outside the choice."""
    results = engine.generate([teacher_request(turn) for turn in turns])
    labels = [r.text.strip() for r in results]
    for label in labels:
        if label not in CONTENT_TYPES:
            raise RuntimeError(f"teacher answered {label!r}, not one of {CONTENT_TYPES}")
    return labels


def typed_rows(path: str | Path, key: str = "type") -> list[dict[str, Any]]:
    """The rows of a JSONL label file; a row whose ``key`` is not a content type is an error."""
    rows = [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
    for row in rows:
        if row[key] not in CONTENT_TYPES:
            raise ValueError(f"{path}: {row[key]!r} is not a content type")
    return rows


def load_labels(path: str | Path) -> dict[tuple[str, str], str]:
    """``(sample_id, dia_id)`` → type from a teacher-label file (later rows win)."""
    return {(row["sample_id"], row["dia_id"]): row["type"] for row in typed_rows(path)}


def pending_turns(conversations: Iterable[Any], turns: str, done: set[tuple[str, str]]) -> list[tuple[Any, Any]]:
    """``(conversation, turn)`` still to label, in stream order: every turn, or only the cited ones."""
    out = []
    for conv in conversations:
        cited = {d for q in conv.questions for d in q.evidence}
        out += [(conv, turn) for turn in conv.turns
                if (conv.sample_id, turn.dia_id) not in done and (turns == "all" or turn.dia_id in cited)]
    return out


def run(args: argparse.Namespace) -> dict[str, Any]:
    from core.config import load_config
    from corpora.locomo import load_locomo, split
    from memory.segmenter import render_turn
    from serve.engine import build_engine

    cfg = load_config(args.profile)
    convs = load_locomo(cfg.data.locomo_path)
    if args.split != "all":
        convs = split(convs, args.split)
    out = Path(args.out)
    done = set(load_labels(out)) if out.exists() else set()
    todo = pending_turns(convs, args.turns, done)[: args.limit]
    print(f"{len(done)} labelled already in {out}; {len(todo)} to label with {args.model} ({args.backend})",
          flush=True)
    if not todo:
        return {"labelled": 0, "file": str(out)}
    engine = build_engine(cfg.engine.model_copy(update={
        "backend": args.backend, "model": args.model, "cache_dir": str(cfg.paths.cache_dir),
        "num_threads": args.threads}))
    out.parent.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    try:
        with out.open("a") as fh, tqdm(total=len(todo), desc="teacher labels", unit="turn", file=sys.stderr) as bar:
            for i in range(0, len(todo), args.batch):
                batch = todo[i : i + args.batch]
                texts = [render_turn(turn) for _, turn in batch]
                for (conv, turn), label in zip(batch, label_texts(engine, texts), strict=True):
                    fh.write(json.dumps({"sample_id": conv.sample_id, "dia_id": turn.dia_id, "type": label,
                                         "model": args.model}) + "\n")
                fh.flush()
                bar.update(len(batch))
    finally:
        engine.close()
    seconds = time.perf_counter() - start
    return {"labelled": len(todo), "seconds": round(seconds, 1), "turns_per_s": round(len(todo) / seconds, 3),
            "file": str(out), "model": args.model, "backend": args.backend}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m training.content_teacher", description=__doc__.split("\n\n")[0])
    parser.add_argument("--profile", default=None, help="config profile (default: $ENGRAM_PROFILE or cpu)")
    parser.add_argument("--model", default=TEACHER_MODEL, help=f"registry name, hub name or folder ({TEACHER_MODEL})")
    parser.add_argument("--backend", choices=("vllm", "transformers"), default="vllm")
    parser.add_argument("--split", choices=("train", "test", "all"), default="all")
    parser.add_argument("--turns", choices=("evidence", "all"), default="evidence",
                        help="'evidence': only turns some question cites (the head's ADD turns); 'all': every turn")
    parser.add_argument("--out", default=str(PACKAGED_LABELS), help=f"JSONL labels, resumed if present "
                        f"(default {PACKAGED_LABELS.relative_to(PACKAGED_LABELS.parents[2])})")
    parser.add_argument("--batch", type=int, default=32, help="turns per engine call")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (transformers backend)")
    parser.add_argument("--limit", type=int, default=None, help="label at most N more turns")
    args = parser.parse_args(argv)
    if args.batch < 1:
        parser.error("--batch must be >= 1")
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(name)s: %(message)s")
    print(json.dumps(run(args)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
