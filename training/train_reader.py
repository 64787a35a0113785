"""Tune the master's reader on LoCoMo's train split: a LoRA adapter on SmolLM2-135M that answers in LoCoMo's short
form from the master's own prompt::

    python -m training.train_reader [--epochs N] [--max-minutes M] [--limit N] [--out DIR]

Examples: every question of the train conversations (1–7) **except the dev set's** (``bench.locomo --split dev``:
the first 5 of each category of each conversation, kept out so the dev loop measures the tuned reader on questions
it never saw), whose kind read from its words (``inference.question_kind.predict_kind``, what ``/v1/ask`` does without
a kind hint) gets a free answer — not the temporal kind (the master answers those with a chosen line's date) and not
category 5 (no answer to learn). The prompt is the master's request (``inference.master.Master.request``: system
text, the worked example, the evidence lines oldest first with grounded dates, the question, the kind's
instruction), so the reader is tuned on exactly what it reads in the service. Its evidence: the question's gold
turns (at most ``--lines``) and, to fill ``--lines``, the conversation's other turns BM25 ranks highest for the
question (what routing and extraction put beside them). The target: LoCoMo's answer (category 3: the text before
';') and the end-of-turn token; the loss is on those tokens alone. The test split is never read.

Output (``--out``, default ``<cache_dir>/reader``): ``adapter.safetensors`` (the A/B matrices) and
``adapter.json`` (base model, rank, layers, examples, losses, the commit and data hash it was trained from),
written last. ``models.master: smollm2-135m-reader`` loads the adapter committed in
``inference/reader_adapters/smollm2-135m-locomo`` merged into the base weights (``core.model_store.merge_adapter``).
"""

from __future__ import annotations

import argparse
import json
import logging
import random
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import torch
from tqdm import tqdm

from core.config import EngramConfig, EpisodicConfig, RouterConfig, load_config
from core.evidence import Evidence
from core.lora import adapter_state, attach
from core.model_store import ADAPTER_FILE, ADAPTER_SETTINGS, resolve_model
from corpora.locomo import DEV_PER_CATEGORY, Conversation, Question, Turn, select_questions
from inference.master import Master, dialogue_order
from inference.question_kind import TEMPORAL, QuestionKind, predict_kind
from memory.bm25 import bm25_index
from memory.segmenter import render_turn
from memory.time_expressions import anchor_of

log = logging.getLogger(__name__)

TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


@dataclass(frozen=True)
class ReaderExample:
    """One training item: the question, the evidence lines the master reads, the answer it should write."""

    conv_id: str
    question: str
    kind: QuestionKind
    evidence: list[Evidence]
    answer: str


def gold_answer(q: Question) -> str:
    """LoCoMo's answer as scored (category 3: the text before ';')."""
    return q.answer.split(";")[0].strip() if q.category == 3 else q.answer.strip()


def as_evidence(turn: Turn) -> Evidence:
    """A turn as the master reads it: rendered with its relative dates grounded (``episodic.ground_dates``)."""
    return Evidence(turn.dia_id, render_turn(turn, anchor_of(turn.timestamp)), turn.timestamp, turn.session)


def reader_examples(conversations: Sequence[Conversation], skip: set[tuple[str, int]], lines: int = 5,
                    seed: int = 0, router: RouterConfig | None = None) -> list[ReaderExample]:
    """Examples from every question of ``conversations`` with a free-answer kind, not in ``skip`` (``(conv id,
    question index)``) and with gold evidence: the gold turns (at most ``lines``) plus the best BM25 turns to fill
    ``lines``, shuffled (the master reads them in dialogue order). BM25 has the router's settings."""
    rng = random.Random(seed)
    out = []
    for conv in conversations:
        index = bm25_index(router or RouterConfig())
        index.add([t.text for t in conv.turns])
        turns = conv.turn_map()
        for i, q in enumerate(conv.questions):
            kind = predict_kind(q.question)
            gold = [turns[e] for e in q.evidence if e in turns][:lines]
            if (conv.sample_id, i) in skip or q.category == 5 or kind == TEMPORAL or not gold or not gold_answer(q):
                continue
            taken = {t.dia_id for t in gold}
            ranked = [conv.turns[j] for j in index.scores(q.question).argsort()[::-1]]
            chosen = gold + [t for t in ranked if t.dia_id not in taken][: lines - len(gold)]
            rng.shuffle(chosen)
            out.append(ReaderExample(conv.sample_id, q.question, kind, [as_evidence(t) for t in chosen],
                                     gold_answer(q)))
    return out


class _Frame:
    """What :class:`inference.master.Master` reads from an engine to build prompts: the window and the tokenizer."""

    def __init__(self, tokenizer: Any, max_model_len: int) -> None:
        self.tokenizer, self.max_model_len = tokenizer, max_model_len


def encode(example: ReaderExample, master: Master, tokenizer: Any, end_id: int) -> tuple[list[int], list[int]]:
    """(prompt ids as the engine renders the master's request, answer ids + end-of-turn)."""
    from serve.request_tokens import render_prompt

    evidence = master.fit(example.evidence, example.question)
    request = master.request(example.question, sorted(evidence, key=dialogue_order), example.kind)
    return render_prompt(tokenizer, request), [*tokenizer(example.answer, add_special_tokens=False).input_ids, end_id]


def answer_loss(model: Any, prompt: list[int], answer: list[int]) -> torch.Tensor:
    """Mean cross-entropy of the answer tokens after the prompt (the output head runs on the answer's positions
    only: on a ~550-token prompt the 49k-word head would cost a fifth of the pass)."""
    ids = torch.tensor([prompt + answer])
    hidden = model.model(ids).last_hidden_state[0, len(prompt) - 1: -1]
    return torch.nn.functional.cross_entropy(model.lm_head(hidden).float(), torch.tensor(answer))


def mean_loss(model: Any, items: Sequence[tuple[list[int], list[int]]]) -> float:
    with torch.no_grad():
        return float(sum(answer_loss(model, p, a).item() for p, a in items) / max(len(items), 1))


def fit(model: Any, train: list[tuple[list[int], list[int]]], *, epochs: int, lr: float, accumulate: int,
        max_minutes: float, seed: int, progress: bool = True) -> dict[str, Any]:
    """AdamW on the adapters, ``accumulate`` examples per step, linear warm-up then linear decay; stops at
    ``max_minutes``. Returns the loss history (mean per epoch) and the seconds spent."""
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=0.0)
    total = max(1, epochs * len(train) // accumulate)
    warm = max(1, total // 20)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min((s + 1) / warm, max(0.0, (total - s) / max(1, total - warm))))
    rng, t0, history, stopped = random.Random(seed), time.perf_counter(), [], False
    model.train()
    for epoch in range(epochs):
        order = list(range(len(train)))
        rng.shuffle(order)
        losses = []
        bar = tqdm(order, desc=f"reader epoch {epoch + 1}/{epochs}", disable=not progress, mininterval=5)
        for n, i in enumerate(bar, start=1):
            loss = answer_loss(model, *train[i])
            (loss / accumulate).backward()
            losses.append(loss.item())
            if n % accumulate == 0 or n == len(order):
                torch.nn.utils.clip_grad_norm_(params, 1.0)
                opt.step()
                sched.step()
                opt.zero_grad()
                bar.set_postfix(loss=f"{sum(losses[-50:]) / len(losses[-50:]):.3f}")
            if time.perf_counter() - t0 > max_minutes * 60:
                stopped = True
                break
        history.append({"epoch": epoch + 1, "examples": len(losses), "train_loss": sum(losses) / len(losses)})
        if stopped:
            log.warning("stopped after %.0f min (--max-minutes) in epoch %d", max_minutes, epoch + 1)
            break
    model.eval()
    return {"history": history, "seconds": round(time.perf_counter() - t0, 1), "stopped_early": stopped}


def dev_skip(conversations: Sequence[Conversation]) -> set[tuple[str, int]]:
    """The dev set's questions (``bench.locomo --split dev``), left out of training."""
    return {(c.sample_id, i) for c in conversations for i, _ in select_questions(c, range(1, 6), None,
                                                                                   DEV_PER_CATEGORY)}


def run(cfg: EngramConfig, *, base: str, rank: int, alpha: float, layers: int, epochs: int, lr: float,
        accumulate: int, lines: int, max_minutes: float, limit: int | None, seed: int, out_dir: Path,
        progress: bool = True) -> dict[str, Any]:
    """Build the examples, tune, save to ``out_dir``; returns the saved settings."""
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from corpora.locomo import load_locomo, split
    from training.train_admission import provenance

    convs = split(load_locomo(cfg.data.locomo_path), "train")
    dev = dev_skip(convs)
    examples = reader_examples(convs, dev, lines=lines, seed=seed)
    dev_examples = reader_examples(convs, {(c.sample_id, i) for c in convs for i in range(len(c.questions))} - dev,
                                   lines=lines, seed=seed)
    if limit:
        examples, dev_examples = examples[:limit], dev_examples[:limit]
    path = resolve_model(base, cfg.paths.cache_dir)
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    torch.manual_seed(seed)
    n_layers = model.config.num_hidden_layers
    tuned = list(range(n_layers - layers, n_layers))
    wrapped = attach(model, TARGETS, rank, alpha, tuned)
    master = Master(_Frame(tokenizer, cfg.engine.max_model_len), EpisodicConfig.model_validate(
        {**cfg.episodic.model_dump(), "answer_form": "free"}))
    end_id = tokenizer.convert_tokens_to_ids("<|im_end|>")
    train = [encode(e, master, tokenizer, end_id) for e in examples]
    held = [encode(e, master, tokenizer, end_id) for e in dev_examples]
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    print(f"{len(train)} train examples ({len(dev)} dev questions left out), {len(held)} dev examples; "
          f"LoRA rank {rank} on {len(wrapped)} linear layers of the last {layers} decoder layers ({trainable:,} "
          f"parameters); prompt tokens mean "
          f"{sum(len(p) for p, _ in train) / len(train):.0f}", flush=True)
    before = mean_loss(model, held)
    result = fit(model, train, epochs=epochs, lr=lr, accumulate=accumulate, max_minutes=max_minutes, seed=seed,
                 progress=progress)
    after = mean_loss(model, held)
    settings = {
        "base": base, "rank": rank, "alpha": alpha, "scale": alpha / rank, "targets": list(TARGETS),
        "layers": tuned, "lines": lines, "epochs": epochs, "lr": lr, "accumulate": accumulate, "seed": seed,
        "train_examples": len(train), "dev_examples": len(held), "limit": limit, "trainable_params": trainable,
        "dev_loss_before": round(before, 4), "dev_loss_after": round(after, 4), **result,
        "trained_from": provenance(Path(cfg.data.locomo_path)), "written": datetime.now().isoformat(timespec="seconds"),
    }
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / ADAPTER_SETTINGS).unlink(missing_ok=True)
    save_file(adapter_state(model), str(out_dir / ADAPTER_FILE))
    (out_dir / ADAPTER_SETTINGS).write_text(json.dumps(settings, indent=2))
    print(f"wrote {out_dir / ADAPTER_FILE}: dev answer loss {before:.3f} -> {after:.3f} ({result['seconds']:.0f} s)",
          flush=True)
    return settings


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m training.train_reader", description=__doc__.split("\n\n")[0])
    parser.add_argument("--profile", default=None, help="config profile (default: $ENGRAM_PROFILE or cpu)")
    parser.add_argument("--base", default="smollm2-135m", help="registry name of the model to adapt")
    parser.add_argument("--rank", type=int, default=8)
    parser.add_argument("--alpha", type=float, default=16.0)
    parser.add_argument("--layers", type=int, default=12, help="adapt the last N decoder layers")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--lr", type=float, default=3e-4)
    parser.add_argument("--accumulate", type=int, default=8, help="examples per optimiser step")
    parser.add_argument("--lines", type=int, default=5, help="evidence lines per example")
    parser.add_argument("--max-minutes", type=float, default=60.0, help="stop training after this long")
    parser.add_argument("--limit", type=int, default=None, help="smoke run: the first N examples")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=None, help="output folder (default <cache_dir>/reader)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(name)s: %(message)s")
    cfg = load_config(args.profile)
    settings = run(cfg, base=args.base, rank=args.rank, alpha=args.alpha, layers=args.layers, epochs=args.epochs,
                   lr=args.lr, accumulate=args.accumulate, lines=args.lines, max_minutes=args.max_minutes,
                   limit=args.limit, seed=args.seed, out_dir=args.out or Path(cfg.paths.cache_dir) / "reader")
    print(json.dumps({k: settings[k] for k in ("train_examples", "trainable_params", "dev_loss_before",
                                               "dev_loss_after", "seconds")}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
