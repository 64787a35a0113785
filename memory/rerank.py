"""Re-ranking stage of tiered retrieval: pluggable, off unless a trained model is configured.

HTM-EAR re-ranks the top 20 hybrid candidates with an MS MARCO cross-encoder and fuses
``0.85 * CE + 0.15 * hybrid``. No such weights exist offline here, so the CPU profile runs
without this stage rather than pretend an untrained head is a re-ranker.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Protocol

import numpy as np

from core.config import RerankConfig


class Reranker(Protocol):
    """Relevance of each text to the query: higher = more relevant, on the model's own scale."""

    def score(self, query: str, texts: Sequence[str]) -> np.ndarray: ...


class CrossEncoderReranker:
    """A sentence-transformers ``CrossEncoder`` (hub name or local folder), loaded once."""

    def __init__(self, model: str, *, device: str = "cpu", batch_size: int = 32) -> None:
        if os.path.isdir(model):
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
        from sentence_transformers import CrossEncoder

        self._model = CrossEncoder(model, device=device)
        self.batch_size = batch_size

    def score(self, query: str, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros(0, dtype=np.float32)
        pairs = [(query, t) for t in texts]
        scores = self._model.predict(pairs, batch_size=self.batch_size, show_progress_bar=False)
        return np.asarray(scores, dtype=np.float32)


def build_reranker(config: RerankConfig) -> Reranker | None:
    """None when the stage is off (``kind: none``)."""
    if config.kind == "none":
        return None
    assert config.model is not None  # enforced by RerankConfig's validator
    return CrossEncoderReranker(config.model, device=config.device)
