"""Embeddings of stored texts, computed once per (model, texts) and kept in the cache dir.

Used by admission training (``training.train_admission``) and the benchmarks; queries are never cached.
"""

from __future__ import annotations

import hashlib
import re
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from serve.embedder import Embedder


def embed_cached(embedder: Embedder, texts: Sequence[str], cache_dir: Path, *, label: str) -> tuple[np.ndarray, float]:
    """Embed stored texts once per (model, texts); returns (vectors, texts/s of the encoding, 0 if cached).

    The key hashes the model name and every text, so a changed generator or model never
    reads a stale file. Queries are never cached: their encoding is part of measured latency.
    """
    digest = hashlib.sha256(embedder.name.encode())
    for t in texts:
        digest.update(t.encode())
        digest.update(b"\0")
    slug = re.sub(r"[^A-Za-z0-9]+", "-", f"{embedder.name}-{label}").strip("-")
    path = cache_dir / "embeddings" / f"{slug}-{digest.hexdigest()[:16]}.npy"
    if path.is_file():
        vectors = np.load(path)
        if vectors.shape == (len(texts), embedder.dim):
            return vectors, 0.0
    start = time.perf_counter()
    vectors = embedder.encode(texts, progress=True)
    rate = len(texts) / (time.perf_counter() - start)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp.npy")
    np.save(tmp, vectors)
    tmp.replace(path)
    return vectors, rate
