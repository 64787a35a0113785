"""One memory tier: a vector index (exact while small, HNSW above) plus per-item metadata in column arrays.

A ``TierShard`` stores up to ``capacity`` items in numbered slots. ``capacity`` is a bound, not an allocation:
the columns and the HNSW index start with room for ``initial_slots`` items and double as items arrive, so a
tenant with 20 memories costs 20 memories' worth of space, whatever its tiers' bounds (a shard holds
thousands of tenants; a single tenant's archive may be bounded at millions). Adding to a full shard
first evicts a batch chosen by the eviction policy (lowest score first, ties in the order
items entered this shard) and hands the evicted items back to the caller, who may move
them to the next tier. Freed slots are reused. Metadata lives in numpy columns so that
scoring candidates and choosing victims are vector operations, not Python loops.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from core.config import EvictionConfig, TierConfig
from memory.hnsw_index import AdaptiveIndex, VectorIndex

logger = logging.getLogger(__name__)

ItemId = str | int
EXACT_FILTERED_UP_TO = 4096  # a filtered search over at most this many allowed items reads them exactly
IndexFactory = Callable[..., VectorIndex]


@dataclass
class MemoryItem:
    """One stored memory, as it travels between tiers."""

    id: ItemId
    text: str
    vector: np.ndarray
    importance: float = 0.5
    entity_ids: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    entities: tuple[str, ...] = ()
    usage: int = 0
    last_access: int = 0
    created_at: float | None = None
    metadata: dict[str, Any] | None = None


def eviction_scores(importance: np.ndarray, usage: np.ndarray, cfg: EvictionConfig) -> np.ndarray:
    """HTM-EAR: S = w_i * importance + w_u * min(usage / saturation, 1); lower is evicted first.

    >>> float(eviction_scores(np.array([0.5]), np.array([20]), EvictionConfig())[0])
    0.625
    """
    return cfg.importance_weight * importance + cfg.usage_weight * np.minimum(usage / cfg.usage_saturation, 1.0)


class TierShard:
    """A bounded tier. ``last_tier`` marks the tier whose evictions are permanent deletions."""

    def __init__(
        self,
        dim: int,
        tier: TierConfig,
        eviction: EvictionConfig,
        *,
        name: str = "tier",
        last_tier: bool = False,
        index_factory: IndexFactory = AdaptiveIndex,
        initial_slots: int = 16,
    ) -> None:
        self.dim, self.name, self.last_tier = dim, name, last_tier
        self.capacity = tier.capacity
        self.eviction = eviction
        self.allocated = min(self.capacity, initial_slots)  # rows held now; doubled on demand up to capacity
        self._index = index_factory(dim, self.allocated, M=tier.M, ef_construction=tier.ef_construction, ef=tier.ef)
        self._alloc(self.allocated)
        self._free: list[int] = list(range(self.allocated - 1, -1, -1))  # pop() hands out slot 0 first
        self._slot_of: dict[ItemId, int] = {}
        self._seq = 0  # order in which items entered this shard (eviction tie-break)

    # -- storage ---------------------------------------------------------------------------
    _COLUMNS = ("vectors", "importance", "usage", "last_access", "seq", "occupied", "entity_ids")
    _LISTS = ("ids", "texts", "entities", "created_at", "metadata")

    def _alloc(self, n: int, entity_width: int = 4) -> None:
        self.vectors = np.zeros((n, self.dim), dtype=np.float32)
        self.importance = np.zeros(n, dtype=np.float64)
        self.usage = np.zeros(n, dtype=np.int64)
        self.last_access = np.zeros(n, dtype=np.int64)
        self.seq = np.zeros(n, dtype=np.int64)
        self.occupied = np.zeros(n, dtype=bool)
        self.entity_ids = np.full((n, entity_width), -1, dtype=np.int64)  # padded with -1; widened on demand
        self.ids: list[ItemId | None] = [None] * n
        self.texts: list[str] = [""] * n
        self.entities: list[tuple[str, ...]] = [()] * n
        self.created_at: list[float | None] = [None] * n
        self.metadata: list[dict[str, Any] | None] = [None] * n

    def __setstate__(self, state: dict[str, Any]) -> None:
        state.setdefault("allocated", state["capacity"])  # a snapshot from before lazy allocation
        self.__dict__.update(state)

    def _reserve(self, n: int) -> None:
        """Make room for ``n`` more items (at most up to ``capacity``): double the rows until they fit."""
        need = min(len(self) + n, self.capacity)
        if need <= self.allocated:
            return
        rows = self.allocated
        while rows < need:
            rows *= 2
        self._reallocate(min(rows, self.capacity))

    def _reallocate(self, rows: int) -> None:
        old = self.allocated
        saved = {name: getattr(self, name) for name in (*self._COLUMNS, *self._LISTS)}
        self._index.resize(rows)
        self._alloc(rows, entity_width=saved["entity_ids"].shape[1])
        for name, column in saved.items():
            getattr(self, name)[:old] = column
        # NOTE: new slots go behind the free ones, so that freed slots are reused first (as before)
        self._free[:0] = range(rows - 1, old - 1, -1)
        self.allocated = rows

    def _grow(self, new_capacity: int) -> None:
        logger.warning("%s: full of protected items, growing %d -> %d", self.name, self.capacity, new_capacity)
        self.capacity = new_capacity  # the rows follow on demand (_reserve)

    def __len__(self) -> int:
        return len(self._slot_of)

    def __contains__(self, item_id: ItemId) -> bool:
        return item_id in self._slot_of

    def slot_of(self, item_id: ItemId) -> int | None:
        return self._slot_of.get(item_id)

    # -- writes ----------------------------------------------------------------------------
    def add(self, items: Sequence[MemoryItem]) -> list[MemoryItem]:
        """Store ``items`` in order; returns the items evicted to make room (oldest decision first).

        Semantics equal adding one at a time: a shard that is full when an item arrives
        evicts one batch, then takes the item.
        """
        self.remove([it.id for it in items if it.id in self._slot_of])  # re-adding an id replaces it
        evicted: list[MemoryItem] = []
        pos = 0
        while pos < len(items):
            if len(self) >= self.capacity:
                evicted.extend(self._evict(self._batch_size()))
            chunk = items[pos : pos + self.capacity - len(self)]
            self._insert(chunk)
            pos += len(chunk)
        return evicted

    def _batch_size(self) -> int:
        return max(1, int(self.eviction.batch_fraction * self.capacity))

    def _insert(self, items: Sequence[MemoryItem]) -> None:
        if not items:
            return
        self._reserve(len(items))
        slots = np.asarray([self._free.pop() for _ in items], dtype=np.int64)
        width = max(len(it.entity_ids) for it in items)
        if width > self.entity_ids.shape[1]:
            pad = np.full((len(self.entity_ids), width - self.entity_ids.shape[1]), -1, dtype=np.int64)
            self.entity_ids = np.hstack([self.entity_ids, pad])
        vectors = np.stack([it.vector for it in items]).astype(np.float32, copy=False)
        self.vectors[slots] = vectors
        self.entity_ids[slots] = -1
        for slot, it in zip(slots.tolist(), items, strict=True):
            self.importance[slot] = it.importance
            self.usage[slot] = it.usage
            self.last_access[slot] = it.last_access
            self.seq[slot] = self._seq
            self._seq += 1
            self.entity_ids[slot, : len(it.entity_ids)] = it.entity_ids
            self.ids[slot], self.texts[slot], self.entities[slot] = it.id, it.text, it.entities
            self.created_at[slot], self.metadata[slot] = it.created_at, it.metadata
            self._slot_of[it.id] = slot
        self.occupied[slots] = True
        self._index.add(slots, vectors)

    def victims(self, n: int) -> np.ndarray:
        """The n slots the policy evicts next: lowest score first, ties in shard insertion order."""
        occ = np.flatnonzero(self.occupied)
        if self.eviction.protect_last_tier and self.last_tier:
            occ = occ[self.importance[occ] < self.eviction.essential_threshold]
        if self.eviction.policy == "lru":
            score = self.last_access[occ].astype(np.float64)
        else:
            score = eviction_scores(self.importance[occ], self.usage[occ], self.eviction)
        order = np.lexsort((self.seq[occ], score))
        return occ[order[:n]]

    def _evict(self, n: int) -> list[MemoryItem]:
        slots = self.victims(n)
        if len(slots) == 0:  # only protected items left: the guard forbids deleting any
            self._grow(self.capacity * 2)
            return []
        items = [self.item_at(int(s)) for s in slots]
        self._release(slots)
        return items

    def remove(self, item_ids: Sequence[ItemId]) -> list[MemoryItem]:
        """Remove items by id (unknown ids are ignored); returns what was removed."""
        slots = np.asarray([self._slot_of[i] for i in item_ids if i in self._slot_of], dtype=np.int64)
        items = [self.item_at(int(s)) for s in slots]
        self._release(slots)
        return items

    def _release(self, slots: np.ndarray) -> None:
        if len(slots) == 0:
            return
        self._index.remove(slots)
        self.occupied[slots] = False
        for s in slots.tolist():
            del self._slot_of[self.ids[s]]
            self.ids[s], self.texts[s], self.entities[s], self.metadata[s] = None, "", (), None
            self._free.append(s)

    def item_at(self, slot: int) -> MemoryItem:
        row = self.entity_ids[slot]
        return MemoryItem(
            id=self.ids[slot], text=self.texts[slot], vector=self.vectors[slot].copy(),
            importance=float(self.importance[slot]), entity_ids=row[row >= 0].copy(), entities=self.entities[slot],
            usage=int(self.usage[slot]), last_access=int(self.last_access[slot]),
            created_at=self.created_at[slot], metadata=self.metadata[slot],
        )

    def annotate(self, item_id: ItemId, fields: dict[str, Any]) -> bool:
        """Merge ``fields`` into an item's metadata; False when the item is not in this tier."""
        slot = self._slot_of.get(item_id)
        if slot is None:
            return False
        self.metadata[slot] = {**(self.metadata[slot] or {}), **fields}
        return True

    def get(self, item_id: ItemId) -> MemoryItem | None:
        slot = self._slot_of.get(item_id)
        return None if slot is None else self.item_at(slot)

    def items(self, start: int = 0, stop: int | None = None) -> list[MemoryItem]:
        """Items in insertion order; ``start``/``stop`` slice that order before any item is built."""
        slots = sorted(self._slot_of.values(), key=lambda s: self.seq[s])[start:stop]
        return [self.item_at(s) for s in slots]

    def records(self) -> list[tuple[ItemId, str, dict[str, Any] | None, float]]:
        """(id, text, metadata, created_at) of every item in insertion order, without building items."""
        slots = sorted(self._slot_of.values(), key=lambda s: self.seq[s])
        return [(self.ids[s], self.texts[s], self.metadata[s], self.created_at[s] or 0.0) for s in slots]

    def replace(self, item_id: ItemId, text: str, vector: np.ndarray, entities: tuple[str, ...],
                entity_ids: np.ndarray, metadata: dict[str, Any] | None) -> bool:
        """Give a stored item new text, vector, entities and metadata in place (same slot, usage and place in the
        eviction order); False when the item is not in this tier."""
        slot = self._slot_of.get(item_id)
        if slot is None:
            return False
        if len(entity_ids) > self.entity_ids.shape[1]:
            pad = np.full((len(self.entity_ids), len(entity_ids) - self.entity_ids.shape[1]), -1, dtype=np.int64)
            self.entity_ids = np.hstack([self.entity_ids, pad])
        self.entity_ids[slot] = -1
        self.entity_ids[slot, : len(entity_ids)] = entity_ids
        self.texts[slot], self.entities[slot], self.metadata[slot] = text, entities, metadata
        vec = np.asarray(vector, dtype=np.float32).reshape(1, -1)
        self.vectors[slot] = vec[0]
        self._index.remove(np.array([slot]))
        self._index.add(np.array([slot]), vec)
        return True

    # -- reads -----------------------------------------------------------------------------
    def allowed(self, where: Callable[[dict[str, Any] | None], bool]) -> np.ndarray:
        """A mask over the slots: occupied and ``where(metadata)`` true (a filtered search's candidates)."""
        mask = np.zeros(self.allocated, dtype=bool)
        for slot in self._slot_of.values():
            mask[slot] = where(self.metadata[slot])
        return mask

    def search(self, vector: np.ndarray, k: int, allowed: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Up to k (slots, cosine similarities), most similar first; with ``allowed`` (a slot mask) among those
        slots only."""
        if allowed is None:
            return self._index.search(vector, k)
        slots = np.flatnonzero(allowed[: self.allocated] & self.occupied)
        filtered = getattr(self._index, "search_filtered", None)
        if filtered is None or len(slots) <= EXACT_FILTERED_UP_TO:
            # NOTE: a few allowed rows are read directly (exact, and faster than steering a graph search past
            # every other point); einsum as in ExactIndex, so a row's score does not depend on its neighbours.
            sims = np.einsum("ij,j->i", self.vectors[slots], np.asarray(vector, dtype=np.float32))
            order = np.argsort(-sims, kind="stable")[:k]
            return slots[order], sims[order]
        return filtered(vector, min(k, len(slots)), allowed)

    def entity_overlap(self, slots: np.ndarray, query_entity_ids: np.ndarray) -> np.ndarray:
        """|query entities ∩ item entities| per slot, vectorised over the padded id matrix."""
        if len(query_entity_ids) == 0 or len(slots) == 0:
            return np.zeros(len(slots), dtype=np.int64)
        return np.isin(self.entity_ids[slots], query_entity_ids).sum(axis=1)

    def touch(self, slots: np.ndarray, clock: int) -> None:
        """Record a retrieval: usage + 1 and last access = clock."""
        self.usage[slots] += 1
        self.last_access[slots] = clock
