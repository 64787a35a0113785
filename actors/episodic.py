"""Episodic memory (E-mem) over one conversation stream, and the baselines it is measured against.

``EpisodicMemory`` cuts the turn stream into overlapping raw segments, has the small model write
a one-line summary of each (for the router's global path), indexes them in the three-path
router and hands them to an ``AssistantHost``. A question activates segments; their assistants
extract verbatim evidence in one engine batch; the master answers from it.

Baselines, with the same engine and master prompts (``build_system``):

- ``direct_read``: the master reads the routed segments' raw lines itself (no assistants), cut to
  the model's window (best-routed segments first);
- ``rag``: the top ``rag_top_k`` turns by dense + BM25 (min-max normalised, equal weights);
- ``full_context``: the conversation's most recent turns that fit the model's window.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from actors.assistant import AssistantHost, Evidence, SegmentQuery, by_score
from actors.episodic_router import Encoder, EpisodicRouter, bm25_index, line_terms
from actors.segmenter import Segment, estimate_tokens, render_turn, segment_turns
from cluster.config import EngramConfig
from serve.engine import GenerationEngine, GenerationRequest, TokenBill
from serve.master import Master

SUMMARY_PROMPT = (
    "Summarise this part of a conversation in one sentence that names the people, the events and the topics."
)
# NOTE: the master's system prompt, evidence header, instruction and chat template take ~110 tokens
# besides the question (counted exactly); each evidence line adds "[12] " and a newline.
PROMPT_MARGIN_TOKENS = 160
LINE_OVERHEAD_TOKENS = 6


@dataclass
class Answer:
    text: str
    evidence_turn_ids: list[str]
    routed_turn_ids: list[str]
    segments: int
    assistant_bill: TokenBill = field(default_factory=TokenBill)
    master_bill: TokenBill = field(default_factory=TokenBill)


def assistant_host(config: EngramConfig, engine: GenerationEngine) -> AssistantHost:
    """An assistant host with the configured extraction, matching words as the router's BM25 does."""
    ep = config.episodic
    return AssistantHost(engine, evidence_per_segment=ep.evidence_per_segment, method=ep.extraction,
                         shortlist=ep.shortlist, terms=line_terms(config.router))


def summary_request(segment: Segment, max_tokens: int) -> GenerationRequest:
    """The small model's request for a segment's one-line summary (the router's global path)."""
    return GenerationRequest(messages=[{"role": "user", "content": f"{segment.text}\n\n{SUMMARY_PROMPT}"}],
                             max_tokens=max_tokens)


def prompt_budget(max_model_len: int, answer_max_tokens: int) -> int:
    """Tokens the master's evidence and question may take in one prompt."""
    return max_model_len - answer_max_tokens - PROMPT_MARGIN_TOKENS


def fit_evidence(evidence: Sequence[Evidence], question: str, budget: int,
                 count: Callable[[str], int]) -> list[Evidence]:
    """The longest prefix of ``evidence`` whose lines (and the question) fit ``budget`` tokens."""
    left = budget - count(question)
    out = []
    for e in evidence:
        left -= count(e.content) + LINE_OVERHEAD_TOKENS
        if left < 0:
            break
        out.append(e)
    return out


def token_counter(engine: GenerationEngine) -> Callable[[str], int]:
    """Token count with the engine's tokenizer (the estimate of the segmenter when it has none)."""
    tokenizer = getattr(engine, "tokenizer", None)
    if tokenizer is None:
        return estimate_tokens

    @functools.lru_cache(maxsize=1 << 16)  # NOTE: fit() counts the same turn lines for every question
    def count(text: str) -> int:
        return len(tokenizer(text, add_special_tokens=False).input_ids)

    return count


def turn_evidence(turn, segment_id: int = -1) -> Evidence:
    return Evidence(turn.turn_id, render_turn(turn), turn.timestamp, segment_id)


class _System:
    """Shared by all systems: the master and the budget of evidence tokens one prompt can hold."""

    name = "base"

    def __init__(self, config: EngramConfig, *, encoder: Encoder, engine: GenerationEngine) -> None:
        self.config, self.encoder, self.engine = config, encoder, engine
        ep = config.episodic
        self.master = Master(engine, max_tokens=ep.answer_max_tokens, not_mentioned=ep.not_mentioned)
        self.count = token_counter(engine)
        self.budget = prompt_budget(engine.max_model_len, ep.answer_max_tokens)

    def fit(self, evidence: Sequence[Evidence], question: str) -> list[Evidence]:
        return fit_evidence(evidence, question, self.budget, self.count)

    def _answer(self, question: str, evidence: list[Evidence], category: int, adversarial: str | None,
                routed: list[str], segments: int, assistant_bill: TokenBill | None = None) -> Answer:
        res = self.master.answer(question, evidence, category, adversarial)
        return Answer(res.text, [e.turn_id for e in res.evidence], routed, segments,
                      assistant_bill or TokenBill(), res.bill)


class EpisodicMemory(_System):
    """Segments + router + assistants + master (``direct_read=True``: the master reads segments itself)."""

    def __init__(self, config: EngramConfig, *, encoder: Encoder, engine: GenerationEngine,
                 direct_read: bool = False) -> None:
        super().__init__(config, encoder=encoder, engine=engine)
        self.name = "direct_read" if direct_read else "engram"
        self.direct_read = direct_read
        self.router = EpisodicRouter(encoder, config.router)
        self.host = assistant_host(config, engine)
        self.segments: list[Segment] = []

    def ingest(self, turns: Sequence) -> None:
        ep = self.config.episodic
        segments = segment_turns(turns, ep.segment_tokens, ep.overlap_ratio, self.count)
        self.summarise(segments)
        self.segments.extend(segments)
        self.host.add(segments)
        self.router.add(segments)

    def summarise(self, segments: Sequence[Segment]) -> TokenBill:
        """One-line summaries for the router's global path, one engine batch."""
        requests = [summary_request(seg, self.config.episodic.summary_max_tokens) for seg in segments]
        results = self.engine.generate(requests)
        for seg, res in zip(segments, results, strict=True):
            seg.summary = res.text.strip()
        return TokenBill.of(results)

    def ask(self, question: str, *, category: int, adversarial: str | None = None) -> Answer:
        activations = self.router.route(question)
        routed_segments = [self.host.segment(a.segment_id) for a in activations]
        routed = list(dict.fromkeys(t for seg in routed_segments for t in seg.turn_ids))
        if self.direct_read:
            lines = [Evidence(t, line, ts, seg.id) for seg in routed_segments
                     for t, line, ts in zip(seg.turn_ids, seg.lines, seg.timestamps, strict=True)]
            evidence, bill = self.fit(dedupe_evidence(lines), question), TokenBill()
        else:
            found, bill = self.host.extract([SegmentQuery(a.segment_id, question, a.line_scores) for a in activations])
            kept = dedupe_evidence(by_score([e for group in found for e in group]))
            kept = kept[: self.config.episodic.master_evidence]
            evidence = self.fit(kept, question)
        return self._answer(question, evidence, category, adversarial, routed, len(activations), bill)


class RagBaseline(_System):
    """Plain RAG over single turns: dense cosine + BM25, min-max normalised, equal weights."""

    name = "rag"

    def ingest(self, turns: Sequence) -> None:
        self.turns = list(turns)
        lines = [render_turn(t) for t in self.turns]
        self.vectors = self.encoder.encode(lines)
        self.bm25 = bm25_index(self.config.router)  # same BM25 settings as the router's keyword path
        self.bm25.add(lines)

    def ask(self, question: str, *, category: int, adversarial: str | None = None) -> Answer:
        q = self.encoder.encode([question], is_query=True)[0]
        score = _minmax(self.vectors @ q) + _minmax(self.bm25.scores(question))
        top = np.argsort(-score, kind="stable")[: self.config.episodic.rag_top_k]
        evidence = self.fit([turn_evidence(self.turns[i]) for i in top], question)
        return self._answer(question, evidence, category, adversarial, [e.turn_id for e in evidence], 0)


class FullContextBaseline(_System):
    """The whole conversation, cut to the model's window: the most recent turns that fit."""

    name = "full_context"

    def ingest(self, turns: Sequence) -> None:
        self.turns = list(turns)

    def ask(self, question: str, *, category: int, adversarial: str | None = None) -> Answer:
        newest_first = [turn_evidence(t) for t in reversed(self.turns)]
        evidence = self.fit(newest_first, question)
        return self._answer(question, evidence, category, adversarial, [e.turn_id for e in evidence], 0)


def _minmax(x: np.ndarray) -> np.ndarray:
    span = float(x.max() - x.min()) if len(x) else 0.0
    return (x - x.min()) / span if span > 0 else np.zeros_like(x, dtype=np.float64)


def dedupe_evidence(evidence: list[Evidence]) -> list[Evidence]:
    """Overlapping segments can yield the same turn twice: keep its first occurrence."""
    seen: set[str] = set()
    return [e for e in evidence if not (e.turn_id in seen or seen.add(e.turn_id))]


SYSTEMS = ("engram", "rag", "full_context", "direct_read")


def build_system(name: str, config: EngramConfig, *, encoder: Encoder, engine: GenerationEngine) -> _System:
    """A fresh system for one conversation."""
    if name == "engram":
        return EpisodicMemory(config, encoder=encoder, engine=engine)
    if name == "direct_read":
        return EpisodicMemory(config, encoder=encoder, engine=engine, direct_read=True)
    if name == "rag":
        return RagBaseline(config, encoder=encoder, engine=engine)
    if name == "full_context":
        return FullContextBaseline(config, encoder=encoder, engine=engine)
    raise ValueError(f"unknown system {name!r}; known: {', '.join(SYSTEMS)}")
