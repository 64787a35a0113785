"""Two-tier memory (HTM-EAR): L1 working tier, L2 archive, importance eviction, gate, re-ranking.

Writes enter L1; L1 evictions move to L2; L2 evictions are deleted for good (counted, and
counted as *essential* when importance >= the essential threshold). A read searches L1
(k=100); the gate brings in L2 (k=200) when L1 has nothing, its best similarity is below
the threshold, or the query's entities are not all in L1's most similar item. Candidates
are scored ``sim^3 + 0.8 * shared entities + 0.1 * importance`` and optionally re-ranked.
With ``config.l2 = None`` the memory is a single tier (the unbounded "oracle" baseline).
No model inside: writes bring their items' vectors and reads their query's (``dim`` wide, unit length).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from core.config import TierMemoryConfig
from memory.entities import EntityExtractor, EntityVocab
from memory.hnsw_index import AdaptiveIndex
from memory.rerank import Reranker
from memory.tier import IndexFactory, ItemId, MemoryItem, TierShard


@dataclass
class Hit:
    id: ItemId
    text: str
    score: float
    similarity: float
    tier: str
    importance: float
    entities: tuple[str, ...]
    metadata: dict[str, Any] | None = None


@dataclass
class MemoryStats:
    added: int = 0
    moved_to_l2: int = 0
    pruned: int = 0
    essential_lost: int = 0
    queries: int = 0
    gate_fired: int = 0


class TieredMemory:
    def __init__(
        self,
        config: TierMemoryConfig,
        dim: int,
        *,
        reranker: Reranker | None = None,
        index_factory: IndexFactory = AdaptiveIndex,
    ) -> None:
        self.config = config
        self.reranker = reranker
        self.stats = MemoryStats()
        self._extract = EntityExtractor(config.entities.patterns)
        self._vocab = EntityVocab()
        self._clock = 0
        single = config.l2 is None
        self.l1 = TierShard(dim, config.l1, config.eviction, name="l1", last_tier=single,
                            index_factory=index_factory)
        self.l2 = None if single else TierShard(dim, config.l2, config.eviction, name="l2",
                                                last_tier=True, index_factory=index_factory)

    @property
    def dim(self) -> int:
        """Width of the vectors the memory takes."""
        return self.l1.dim

    def _tick(self) -> int:
        self._clock += 1
        return self._clock

    @property
    def tiers(self) -> list[TierShard]:
        return [self.l1] if self.l2 is None else [self.l1, self.l2]

    # -- writes ----------------------------------------------------------------------------
    def add(
        self,
        texts: Sequence[str],
        *,
        vectors: np.ndarray,
        ids: Sequence[ItemId] | None = None,
        importance: Sequence[float] | None = None,
        metadata: Sequence[dict[str, Any] | None] | None = None,
        created_at: float | None = None,
    ) -> list[ItemId]:
        """Store texts with their ``vectors`` (one row each); returns their ids. ``created_at``: the items'
        creation time (default: now; a journal replay passes the time of the original write)."""
        n = len(texts)
        ids = list(ids) if ids is not None else [self.stats.added + i for i in range(n)]
        importance = list(importance) if importance is not None else [0.5] * n
        for name, seq in (("ids", ids), ("importance", importance), ("metadata", metadata)):
            if seq is not None and len(seq) != n:
                raise ValueError(f"{name} has {len(seq)} entries for {n} texts")
        if vectors.shape != (n, self.dim):
            raise ValueError(f"vectors must have shape ({n}, {self.dim}), got {vectors.shape}")
        now = time.time() if created_at is None else float(created_at)
        items = []
        for i, text in enumerate(texts):
            entities = self._extract(text)
            items.append(MemoryItem(
                id=ids[i], text=text, vector=vectors[i], importance=float(importance[i]),
                entities=entities, entity_ids=self._vocab.intern(entities), last_access=self._tick(),
                created_at=now, metadata=metadata[i] if metadata is not None else None,
            ))
        if self.l2 is not None:
            self.l2.remove(ids)  # a re-added id leaves the archive and starts again in L1
        evicted = self.l1.add(items)
        if self.l2 is not None:
            self.stats.moved_to_l2 += len(evicted)
            evicted = self.l2.add(evicted)
        self._count_deleted(evicted)
        self.stats.added += n
        return ids

    def restore(self, items: Sequence[tuple[str, MemoryItem]]) -> int:
        """Put exported items back into their tiers (``(tier name, item)``, each tier's items in the order they
        entered it) with their usage counters; entities are extracted again. A tier this memory lacks sends
        its items to the last tier; a smaller tier evicts as a write would. Returns how many were stored."""
        by_tier: dict[str, list[MemoryItem]] = {t.name: [] for t in self.tiers}
        for name, item in items:
            item.entities = self._extract(item.text)
            item.entity_ids = self._vocab.intern(item.entities)
            by_tier.get(name, by_tier[self.tiers[-1].name]).append(item)
            self._clock = max(self._clock, item.last_access)
        evicted = self.l1.add(by_tier["l1"])
        if self.l2 is not None:
            self.stats.moved_to_l2 += len(evicted)
            evicted = self.l2.add(by_tier["l2"] + evicted)
        self._count_deleted(evicted)
        self.stats.added += len(items)
        return len(items) - len(evicted)

    def _count_deleted(self, deleted: list[MemoryItem]) -> None:
        self.stats.pruned += len(deleted)
        threshold = self.config.eviction.essential_threshold
        self.stats.essential_lost += sum(1 for it in deleted if it.importance >= threshold)

    def delete(self, ids: Sequence[ItemId]) -> int:
        return sum(len(t.remove(ids)) for t in self.tiers)

    def get(self, item_id: ItemId) -> tuple[str, MemoryItem] | None:
        for tier in self.tiers:
            item = tier.get(item_id)
            if item is not None:
                return tier.name, item
        return None

    def annotate(self, item_id: ItemId, fields: dict[str, Any]) -> bool:
        """Merge ``fields`` into the metadata of a stored item (whichever tier holds it)."""
        return any(tier.annotate(item_id, fields) for tier in self.tiers)

    def update(self, item_id: ItemId, text: str, vector: np.ndarray, metadata: dict[str, Any] | None) -> bool:
        """Give a stored item new text (and its vector) and metadata where it is, entities extracted again; False
        when no tier holds it."""
        entities = self._extract(text)
        ids = self._vocab.intern(entities)
        return any(t.replace(item_id, text, vector, entities, ids, metadata) for t in self.tiers)

    def records(self) -> list[tuple[ItemId, str, dict[str, Any] | None]]:
        """(id, text, metadata) of every item, oldest first (by creation time, then tier order); no vectors."""
        rows = [(it_created, n, item_id, text, meta) for n, tier in enumerate(self.tiers)
                for item_id, text, meta, it_created in tier.records()]
        rows.sort(key=lambda r: (r[0], r[1]))
        return [(item_id, text, meta) for _, _, item_id, text, meta in rows]

    def nearest(self, vector: np.ndarray, k: int) -> list[tuple[MemoryItem, float]]:
        """Up to ``k`` most similar items of each tier with their cosine, without touching usage (a write's
        dedup check is not a retrieval)."""
        out = []
        for tier in self.tiers:
            if len(tier):
                slots, sims = tier.search(vector, min(k, len(tier)))
                out += [(tier.item_at(int(s)), float(sim)) for s, sim in zip(slots, sims, strict=True)]
        return out

    def __len__(self) -> int:
        return sum(len(t) for t in self.tiers)

    # -- reads -----------------------------------------------------------------------------
    def _gate_fires(self, slots: np.ndarray, sims: np.ndarray, query_entities: np.ndarray) -> bool:
        gate = self.config.gate
        if len(slots) == 0 or sims[0] < gate.similarity_threshold:
            return True
        return gate.check_entities and not np.isin(query_entities, self.l1.entity_ids[slots[0]]).all()

    def retrieve(self, query: str, k: int | None = None, *, vector: np.ndarray,
                 where: Callable[[dict[str, Any] | None], bool] | None = None) -> list[Hit]:
        """The k best memories for ``query`` (``vector``: its query embedding; the text gives the query's entities
        and the re-ranker's input); with ``where`` (a test of an item's metadata, e.g.
        ``memory.scope.MemoryFilter.matches``) among the items it accepts only — the gate then judges L1 by its
        accepted items."""
        cfg = self.config
        k = k or cfg.k
        clock = self._tick()
        self.stats.queries += 1
        q = vector
        q_entities = self._vocab.lookup(self._extract(query))
        allowed = {t.name: None if where is None else t.allowed(where) for t in self.tiers}

        l1_k = cfg.gate.l1_k if self.l2 is not None else cfg.oracle_k
        slots, sims = self.l1.search(q, l1_k, allowed["l1"])
        parts = [(self.l1, slots, sims)]
        if self.l2 is not None and cfg.gate.enabled and self._gate_fires(slots, sims, q_entities):
            self.stats.gate_fired += 1
            slots2, sims2 = self.l2.search(q, cfg.gate.l2_k, allowed["l2"])
            if len(slots2):
                part = (self.l2, slots2, sims2)
                parts = [part] if cfg.gate.mode == "replace" else [*parts, part]

        shards = [shard for shard, s, _ in parts for _ in range(len(s))]
        all_slots = np.concatenate([s for _, s, _ in parts])
        all_sims = np.concatenate([x for _, _, x in parts]).astype(np.float64)
        if len(all_slots) == 0:
            return []
        sc = cfg.scoring
        overlap = np.concatenate([shard.entity_overlap(s, q_entities) for shard, s, _ in parts])
        importance = np.concatenate([shard.importance[s] for shard, s, _ in parts])
        score = np.sign(all_sims) * np.abs(all_sims) ** sc.similarity_power
        score += sc.entity_weight * overlap + sc.importance_weight * importance
        order = np.argsort(-score, kind="stable")
        final = score
        if self.reranker is not None:
            top = order[: cfg.rerank.top_n]
            texts = [shards[i].texts[all_slots[i]] for i in top]
            ce = self.reranker.score(query, texts)
            final = np.full_like(score, -np.inf)
            final[top] = cfg.rerank.ce_weight * ce + cfg.rerank.hybrid_weight * score[top]
            order = top[np.argsort(-final[top], kind="stable")]

        hits = []
        for i in order[:k]:
            shard, slot = shards[i], int(all_slots[i])
            shard.touch(np.array([slot]), clock)
            hits.append(Hit(
                id=shard.ids[slot], text=shard.texts[slot], score=float(final[i]), similarity=float(all_sims[i]),
                tier=shard.name, importance=float(shard.importance[slot]), entities=shard.entities[slot],
                metadata=shard.metadata[slot],
            ))
        return hits
