"""Approximate nearest-neighbour index over integer slots, backed by hnswlib.

Slots are the caller's row numbers (0..capacity-1). A freed slot is marked deleted and
reused by the next add: hnswlib then updates the stored point in place and unmarks it
(``allow_replace_deleted`` stays off, so labels and slots never drift apart).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import hnswlib
import numpy as np


class VectorIndex(Protocol):
    """Nearest neighbours by inner product of unit vectors: similarity = cosine, higher = closer, in [-1, 1]."""

    def add(self, slots: np.ndarray, vectors: np.ndarray) -> None: ...

    def remove(self, slots: np.ndarray) -> None: ...

    def search(self, vector: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Up to k (slots, similarities), best first."""
        ...

    def resize(self, capacity: int) -> None: ...

    def __len__(self) -> int: ...


class HnswIndex:
    """hnswlib ``Index(space="ip")``; similarity = 1 - hnswlib distance."""

    def __init__(self, dim: int, capacity: int, *, M: int = 16, ef_construction: int = 200, ef: int = 50) -> None:
        self.dim = dim
        self._index = hnswlib.Index(space="ip", dim=dim)
        self._index.init_index(max_elements=capacity, ef_construction=ef_construction, M=M)
        self._index.set_ef(ef)
        self._ef = ef
        self._live = 0

    def add(self, slots: np.ndarray, vectors: np.ndarray) -> None:
        if len(slots):
            # NOTE: a slot that was marked deleted is updated in place and unmarked by hnswlib.
            self._index.add_items(np.asarray(vectors, dtype=np.float32), np.asarray(slots, dtype=np.int64))
            self._live += len(slots)

    def remove(self, slots: np.ndarray) -> None:
        for slot in np.asarray(slots, dtype=np.int64):
            self._index.mark_deleted(int(slot))
        self._live -= len(slots)

    def search(self, vector: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        k = min(k, self._live)
        if k <= 0:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
        query = np.asarray(vector, dtype=np.float32).reshape(1, -1)
        try:
            labels, distances = self._index.knn_query(query, k=k)
        except RuntimeError:
            labels, distances = self._search_wide(query, k)
        return labels[0].astype(np.int64), (1.0 - distances[0]).astype(np.float32)

    def search_filtered(self, vector: np.ndarray, k: int, allowed: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`search` among the slots where ``allowed`` (a bool mask over slots) is true: hnswlib skips the
        others during the graph search."""
        k = min(k, self._live)
        if k <= 0:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
        query = np.asarray(vector, dtype=np.float32).reshape(1, -1)
        size = len(allowed)

        def keep(label: int) -> bool:
            return label < size and bool(allowed[label])

        try:
            labels, distances = self._index.knn_query(query, k=k, num_threads=1, filter=keep)
        except RuntimeError:
            labels, distances = self._search_wide(query, k, keep)
        return labels[0].astype(np.int64), (1.0 - distances[0]).astype(np.float32)

    def _search_wide(self, query: np.ndarray, k: int,
                     keep: Callable[[int], bool] | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Retry with a beam as wide as the index, then with smaller k.

        NOTE: deleted points stay in the graph; when k is close to the number of live points the
        default beam can end with fewer than k live results and hnswlib raises instead of answering.
        """
        self._index.set_ef(max(self._ef, self._index.get_current_count()))
        try:
            while True:
                try:
                    if keep is None:
                        return self._index.knn_query(query, k=k)
                    return self._index.knn_query(query, k=k, num_threads=1, filter=keep)
                except RuntimeError:
                    if k <= 1:
                        raise
                    k = max(1, k * 3 // 4)
        finally:
            self._index.set_ef(self._ef)

    def resize(self, capacity: int) -> None:
        self._index.resize_index(capacity)

    def __len__(self) -> int:
        return self._live


class ExactIndex:
    """Brute-force inner product over a dense matrix: the reference that HnswIndex is tested against."""

    def __init__(self, dim: int, capacity: int, **_: object) -> None:
        self.dim = dim
        self._vectors = np.zeros((capacity, dim), dtype=np.float32)
        self._live = np.zeros(capacity, dtype=bool)

    def add(self, slots: np.ndarray, vectors: np.ndarray) -> None:
        self._vectors[slots] = vectors
        self._live[slots] = True

    def remove(self, slots: np.ndarray) -> None:
        self._live[slots] = False

    def live(self) -> tuple[np.ndarray, np.ndarray]:
        """(slots, vectors) of the live points."""
        slots = np.flatnonzero(self._live)
        return slots, self._vectors[slots]

    def search(self, vector: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        live = np.flatnonzero(self._live)
        # NOTE: einsum, not BLAS: a row's similarity must not depend on how many rows are live (BLAS's kernels
        # round a row differently by its position in the block), or an imported copy would score differently.
        sims = np.einsum("ij,j->i", self._vectors[live], np.asarray(vector, dtype=np.float32))
        order = np.argsort(-sims, kind="stable")[:k]
        return live[order], sims[order]

    def resize(self, capacity: int) -> None:
        grown = np.zeros((capacity, self.dim), dtype=np.float32)
        grown[: len(self._vectors)] = self._vectors
        live = np.zeros(capacity, dtype=bool)
        live[: len(self._live)] = self._live
        self._vectors, self._live = grown, live

    def __len__(self) -> int:
        return int(self._live.sum())


class AdaptiveIndex:
    """Exact search while small, HNSW once ``hnsw_from`` points are live: what a tier uses by default.

    NOTE: an hnswlib index has a fixed memory cost whatever its size (hnswlib 0.8 allocates 65,536 label locks
    per index), so one per tier per tenant would cost a user with a few memories far more than the memories
    themselves (bench.scale: docs/results/2026-12-02-scale.md). Below ``hnsw_from`` points a brute-force inner
    product is exact and as fast: one matrix-vector product over so few rows costs next to nothing.
    """

    def __init__(self, dim: int, capacity: int, *, hnsw_from: int = 1000, **hnsw: object) -> None:
        self.dim, self._capacity, self._hnsw_from, self._hnsw_args = dim, capacity, hnsw_from, hnsw
        self._index: VectorIndex = ExactIndex(dim, capacity)

    @property
    def promoted(self) -> bool:
        return isinstance(self._index, HnswIndex)

    def add(self, slots: np.ndarray, vectors: np.ndarray) -> None:
        self._index.add(slots, vectors)
        if not self.promoted and len(self._index) >= self._hnsw_from:
            assert isinstance(self._index, ExactIndex)
            slots, vectors = self._index.live()
            self._index = HnswIndex(self.dim, self._capacity, **self._hnsw_args)  # type: ignore[arg-type]
            self._index.add(slots, vectors)

    def remove(self, slots: np.ndarray) -> None:
        self._index.remove(slots)

    def search(self, vector: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        return self._index.search(vector, k)

    def search_filtered(self, vector: np.ndarray, k: int, allowed: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Among the ``allowed`` slots: the graph's filtered search once promoted, else exact."""
        if isinstance(self._index, HnswIndex):
            return self._index.search_filtered(vector, k, allowed)
        assert isinstance(self._index, ExactIndex)
        slots, vectors = self._index.live()
        mask = allowed[slots]  # NOTE: a mask over every slot of the index (its capacity)
        slots, vectors = slots[mask], vectors[mask]
        sims = np.einsum("ij,j->i", vectors, np.asarray(vector, dtype=np.float32))
        order = np.argsort(-sims, kind="stable")[:k]
        return slots[order], sims[order]

    def resize(self, capacity: int) -> None:
        self._capacity = capacity
        self._index.resize(capacity)

    def __len__(self) -> int:
        return len(self._index)
