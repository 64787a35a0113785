"""Tier memories of many tenants in one process: the core of a tier-shard actor.

Each tenant (``user_id``) owns a separate :class:`TieredMemory` (its own L1/L2 HNSW shards), created on
its first write, so no search can reach another tenant's items. The shard never runs a model: vectors
arrive already embedded (the embedder deployment embeds once per turn for every consumer) and are passed
on to the memories, which take vectors only.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from core.config import TierMemoryConfig
from cores.tenant_export import memory_item, memory_record
from memory.scope import MemoryFilter
from memory.tier import MemoryItem
from memory.tiered_memory import Hit, TieredMemory
from memory.write_links import Known, WriteLink, fact_slots, judge, latest_holders


def known(item_id: Any, text: str, metadata: dict[str, Any] | None, similarity: float) -> Known:
    meta = metadata or {}
    return Known(str(item_id), text, meta.get("speaker"), similarity, meta.get("facts") or {})


@dataclass
class StoredMemory:
    id: str
    text: str
    tier: str
    importance: float
    created_at: float
    metadata: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, tier: str, item: MemoryItem) -> StoredMemory:
        return cls(str(item.id), item.text, tier, float(item.importance), float(item.created_at or 0.0),
                   dict(item.metadata or {}))


@dataclass
class AddReport:
    stored: int
    evicted: int  # left the last tier for good during this write
    links: list[dict[str, Any] | None] = field(default_factory=list)  # per offered item: duplicate / supersedes


class TenantTiers:
    """``{tenant: TieredMemory}`` with tenant-scoped add / search / get / list / delete."""

    durable_state = "_memories"  # the tenant data a snapshot holds (cores/durable.py)

    def __init__(self, config: TierMemoryConfig, dim: int) -> None:
        self.config = config
        self.dim = dim
        self._memories: dict[str, TieredMemory] = {}

    def ping(self) -> bool:
        return True

    def tenants(self) -> list[str]:
        return sorted(self._memories)

    def _memory(self, tenant: str, create: bool = False) -> TieredMemory | None:
        mem = self._memories.get(tenant)
        if mem is None and create:
            mem = self._memories[tenant] = TieredMemory(self.config, self.dim)
        return mem

    def add(
        self,
        tenant: str,
        ids: Sequence[str],
        texts: Sequence[str],
        vectors: np.ndarray,
        importance: Sequence[float],
        metadata: Sequence[dict[str, Any]],
        at: float | None = None,
    ) -> AddReport:
        """Store admitted items (``at``: when they were written, Unix seconds; default now — the service passes
        it, so that a journal replay gives them the same ``created_at``). With ``dedup.enabled``
        (memory/write_links.py) an item that duplicates one of its speaker's memories (``metadata['speaker']``) is
        not stored; one that changes a fact slot is stored with ``supersedes`` in its metadata and the older
        memory gets ``superseded_by``. ``links`` says which, per offered item (None: stored as new)."""
        if not ids:
            return AddReport(0, 0)
        mem = self._memory(tenant, create=True)
        vectors = np.asarray(vectors, np.float32)
        metadata = [dict(m or {}) for m in metadata]  # NOTE: copies: the journal keeps the caller's arguments
        links: list[WriteLink | None] = [None] * len(ids)
        if self.config.dedup.enabled:
            links = self._judge(mem, ids, texts, vectors, metadata)
        keep = [i for i, link in enumerate(links) if link is None or link.kind != "duplicate"]
        for i in keep:
            facts = fact_slots(texts[i])
            if facts:
                metadata[i]["facts"] = facts
            if links[i] is not None:
                metadata[i]["supersedes"] = links[i].target
        pruned = mem.stats.pruned
        mem.add([texts[i] for i in keep], ids=[ids[i] for i in keep], importance=[importance[i] for i in keep],
                vectors=vectors[keep], metadata=[metadata[i] for i in keep], created_at=at)
        for i in keep:
            if links[i] is not None:
                mem.annotate(links[i].target, {"superseded_by": ids[i]})
        return AddReport(len(keep), mem.stats.pruned - pruned, [None if x is None else x.as_dict() for x in links])

    def _judge(self, mem: TieredMemory, ids: Sequence[str], texts: Sequence[str], vectors: np.ndarray,
               metadata: Sequence[dict[str, Any]]) -> list[WriteLink | None]:
        """The write link of each offered item against the stored memories and the batch's earlier items."""
        cfg = self.config.dedup
        facts = [fact_slots(t) for t in texts]
        stored: list[Known] | None = None  # the tenant's memories, oldest first: read only if a turn states a slot
        links: list[WriteLink | None] = []
        for i, text in enumerate(texts):
            speaker = metadata[i].get("speaker")
            # NOTE: the item itself (a resent write, same id) is no neighbour: re-adding an id stays idempotent
            near = [known(it.id, it.text, it.metadata, sim) for it, sim in mem.nearest(vectors[i], cfg.neighbours)
                    if str(it.id) != ids[i]]
            batch = [Known(ids[j], texts[j], metadata[j].get("speaker"), float(vectors[i] @ vectors[j]), facts[j])
                     for j in range(i) if links[j] is None or links[j].kind != "duplicate"]
            holders: dict[str, Known] = {}
            if facts[i]:
                if stored is None:
                    stored = [known(item_id, text, meta, 0.0) for item_id, text, meta in mem.records()]
                holders = latest_holders([m for m in stored if m.id != ids[i]] + batch, speaker, facts[i])
            links.append(judge(text, speaker, facts[i], near + batch, holders, cfg.duplicate_similarity))
        return links

    def search(self, tenant: str, query: str, vector: np.ndarray, k: int, where: MemoryFilter | None = None,
               threshold: float | None = None) -> list[Hit]:
        """The tenant's k best memories for a query; ``where``: only those it matches (scope, metadata, time);
        ``threshold``: only hits that score at least that."""
        mem = self._memory(tenant)
        if mem is None or len(mem) == 0:
            return []
        test = None if where is None or where.empty else where.matches
        hits = mem.retrieve(query, k, vector=np.asarray(vector, np.float32), where=test)
        return hits if threshold is None else [h for h in hits if h.score >= threshold]

    def update(self, tenant: str, memory_id: str, text: str, vector: np.ndarray, at: float,
               metadata: dict[str, Any] | None = None) -> StoredMemory | None:
        """A new version of a memory: new text (and vector), ``metadata`` merged in; the text it had is kept in
        its ``versions`` (oldest first, with the time each was written), ``updated_at`` is ``at``. None when the
        tenant has no such memory."""
        mem = self._memory(tenant)
        found = mem.get(memory_id) if mem is not None else None
        if found is None:
            return None
        _, item = found
        meta = {**(item.metadata or {}), **(metadata or {})}
        written = meta.get("updated_at", item.created_at or 0.0)
        meta["versions"] = [*meta.get("versions", ()), {"text": item.text, "at": written}]
        meta["updated_at"] = float(at)
        facts = fact_slots(text)
        if facts:
            meta["facts"] = facts
        else:
            meta.pop("facts", None)
        mem.update(memory_id, text, np.asarray(vector, np.float32), meta)
        return self.get(tenant, memory_id)

    def history(self, tenant: str, memory_id: str) -> list[dict[str, Any]] | None:
        """A memory's versions oldest first: ``{"version", "text", "at", "event"}`` (event ``ADD`` for the first,
        ``UPDATE`` after); None when the tenant has no such memory."""
        m = self.get(tenant, memory_id)
        if m is None:
            return None
        versions = [*m.metadata.get("versions", ()), {"text": m.text, "at": m.metadata.get("updated_at",
                                                                                           m.created_at)}]
        return [{"version": n, "text": v["text"], "at": float(v["at"]), "event": "ADD" if n == 1 else "UPDATE"}
                for n, v in enumerate(versions, 1)]

    def matching(self, tenant: str, where: MemoryFilter) -> list[str]:
        """Ids of the tenant's memories that ``where`` matches, oldest first."""
        mem = self._memory(tenant)
        return [] if mem is None else [str(i) for i, _, meta in mem.records() if where.matches(meta)]

    def get(self, tenant: str, memory_id: str) -> StoredMemory | None:
        mem = self._memory(tenant)
        found = mem.get(memory_id) if mem is not None else None
        return None if found is None else StoredMemory.of(*found)

    def list(self, tenant: str, offset: int = 0, limit: int = 50,
             where: MemoryFilter | None = None) -> tuple[list[StoredMemory], int]:
        """A page of the tenant's memories (L1 then L2, oldest first within a tier) and the total; with ``where``
        of those it matches."""
        mem = self._memory(tenant)
        if mem is None:
            return [], 0
        if where is not None and not where.empty:
            hits = [StoredMemory.of(t.name, it) for t in mem.tiers for it in t.items() if where.matches(it.metadata)]
            return hits[offset : offset + limit], len(hits)
        total = len(mem)
        out: list[StoredMemory] = []
        skip = offset
        for tier in mem.tiers:
            if skip >= len(tier):
                skip -= len(tier)
                continue
            out.extend(StoredMemory.of(tier.name, it) for it in tier.items(skip, skip + limit - len(out)))
            skip = 0
            if len(out) >= limit:
                break
        return out, total

    def delete(self, tenant: str, ids: Sequence[str]) -> int:
        mem = self._memory(tenant)
        return 0 if mem is None else mem.delete(list(ids))

    def export_tenant(self, tenant: str) -> list[dict[str, Any]]:
        """The tenant's memories as export records (``cores/tenant_export.py``), tier by tier, oldest first."""
        mem = self._memory(tenant)
        return [] if mem is None else [memory_record(t.name, it) for t in mem.tiers for it in t.items()]

    def import_tenant(self, tenant: str, records: Sequence[dict[str, Any]]) -> int:
        """Rebuild the tenant's memories from export records; the tenant must hold none (else ValueError)."""
        if len(self._memories.get(tenant) or ()):
            raise ValueError(f"tenant {tenant!r} already has memories")
        mem = self._memories[tenant] = TieredMemory(self.config, self.dim)
        return mem.restore([memory_item(r) for r in records])

    def drop_tenant(self, tenant: str) -> int:
        """Forget everything of ``tenant``; returns how many memories it had."""
        mem = self._memories.pop(tenant, None)
        return 0 if mem is None else len(mem)

    def stats(self) -> dict[str, dict[str, int]]:
        return {t: {"items": len(m), **vars(m.stats)} for t, m in self._memories.items()}
