"""``rag``: plain retrieval over single turns, answered with the master's prompts."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from bench.systems.common import MASTER_READS, Answer, ConfigReads, Engines, answer_of, per_role, turn_evidence
from core.config import EngramConfig
from core.encoding import Encoder
from inference.master import Master
from inference.question_kind import QuestionKind
from memory.bm25 import BM25_SETTINGS, bm25_index
from memory.segmenter import render_turn


class RagBaseline:
    """Plain RAG over single turns: dense cosine + BM25, min-max normalised, equal weights."""

    name = "rag"
    config_reads: ConfigReads = {**MASTER_READS, "embedder": None, "router": BM25_SETTINGS, "bench": ("rag_top_k",)}

    def __init__(self, config: EngramConfig, *, encoder: Encoder, engine: Engines) -> None:
        self.config, self.encoder = config, encoder
        self.master = Master(per_role(engine)["master"], config.episodic)

    def ingest(self, turns: Sequence[Any]) -> None:
        self.turns = list(turns)
        lines = [render_turn(t) for t in self.turns]
        self.vectors = self.encoder.encode(lines)
        self.bm25 = bm25_index(self.config.router)  # same BM25 settings as the router's keyword path
        self.bm25.add(lines)

    def rank(self, question: str) -> np.ndarray:
        """Indices of the ingested turns, best first (dense + BM25, min-max normalised, equal weights)."""
        q = self.encoder.encode([question], is_query=True)[0]
        score = _minmax(self.vectors @ q) + _minmax(self.bm25.scores(question))
        return np.argsort(-score, kind="stable")

    def ask(self, question: str, *, kind: QuestionKind | None = None) -> Answer:
        top = self.rank(question)[: self.config.bench.rag_top_k]
        evidence = self.master.fit([turn_evidence(self.turns[i]) for i in top], question)
        return answer_of(self.master.respond(question, evidence, kind),
                       [e.turn_id for e in evidence], 0)


def _minmax(x: np.ndarray) -> np.ndarray:
    span = float(x.max() - x.min()) if len(x) else 0.0
    return (x - x.min()) / span if span > 0 else np.zeros_like(x, dtype=np.float64)
