"""Model-facing deployment classes: embedder, admission classifier, master. No decorators here;
``serve.app.build_app`` wraps them with ``serve.deployment``. Each loads its model once per replica."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import numpy as np
from ray import serve

from core import tracing
from core.config import EngramConfig
from core.evidence import Evidence
from inference.admission import Decision
from inference.master import Master, MasterAnswer
from inference.question_kind import QuestionKind
from serve.pool import PoolEngine, TokenizerCounter, use_cores


class EmbedderService:
    """Sentence embeddings; concurrent calls are merged into one forward pass (``serve.batch``)."""

    def __init__(self, config: dict[str, Any]) -> None:
        from serve.embedder import Embedder

        cfg = EngramConfig.model_validate(config)
        use_cores(cfg.embedder.num_threads)
        self.embedder = Embedder(cfg.embedder)

    def dim(self) -> int:
        return self.embedder.dim

    async def encode(self, texts: list[str], is_query: bool = False) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.embedder.dim), dtype=np.float32)
        return await self._batched((tuple(texts), is_query))

    @serve.batch(max_batch_size=32, batch_wait_timeout_s=0.002)
    async def _batched(self, items: list[tuple[tuple[str, ...], bool]]) -> list[np.ndarray]:
        out: list[np.ndarray | None] = [None] * len(items)
        for flag in (False, True):
            idx = [i for i, (_, q) in enumerate(items) if q == flag]
            if not idx:
                continue
            flat = [t for i in idx for t in items[i][0]]
            vecs = await asyncio.to_thread(self.embedder.encode, flat, is_query=flag)
            start = 0
            for i in idx:
                n = len(items[i][0])
                out[i] = vecs[start : start + n]
                start += n
        return out


class AdmissionService:
    """The trained admission classifier (``python -m training.train_admission`` writes its weights)."""

    def __init__(self, config: dict[str, Any]) -> None:
        from inference.admission import AdmissionClassifier

        cfg = EngramConfig.model_validate(config)
        use_cores(None)
        self.classifier = AdmissionClassifier.from_config(cfg)

    async def classify(self, chunks: list[np.ndarray]) -> list[Decision]:
        return await asyncio.to_thread(self.classifier.classify, chunks)


class MasterService:
    """The master core (``inference.master.Master``) on the pool model: merges, cuts to the window, answers."""

    def __init__(self, config: dict[str, Any]) -> None:
        cfg = EngramConfig.model_validate(config)
        tracing.configure(cfg.tracing)
        engine = PoolEngine.for_role(cfg, "master", serve.get_replica_context().app_name)
        count = TokenizerCounter(cfg.engine_for("master"))
        count("warm up")  # NOTE: load the tokenizer now, not under the first requests
        self.master = Master(engine, cfg.episodic, count)

    async def answer(self, question: str, evidence: Sequence[Evidence], kind: QuestionKind | None = None,
                     trace: dict[str, str] | None = None) -> MasterAnswer:
        """``trace``: the caller's span context (``core.tracing.carrier``); the model calls become its children."""
        with tracing.attach(trace):  # NOTE: to_thread copies the context, so the pool's spans join the trace
            return await asyncio.to_thread(self.master.answer, question, list(evidence), kind)
