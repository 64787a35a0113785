"""A tenant's memories, deletes, export / import and the cores' liveness, as a plain async class over the shards.

Deleting a memory removes it from the tier shard, its line from every assistant core's segments, and from the
router's index (which re-indexes the segments that lost the line; their fresh summaries are queued). An export
reads the router before the assistants, so a segment the router lists is either still pending there or already
held by an assistant. An import writes nothing until the whole upload has been checked, and only into a tenant
that holds nothing.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from core.errors import ConflictError, NotFoundError
from cores.tenant_export import ImportPlan, export_lines
from cores.tenant_tiers import StoredMemory
from memory.scope import MemoryFilter, Scope
from memory.segmenter import Segment
from pipeline.shards import KINDS, Shards, assistants, router, tier


def _missing(tenant: str, memory_id: str) -> NotFoundError:
    return NotFoundError(f"memory {memory_id!r} not found for user {tenant!r}", param="memory_id")


@dataclass
class Deleted:
    memories: int
    turns: int


class TenantOps:
    """``queue_summaries(tenant, {assistant core: segments})`` is the summariser's queue (None: no summaries)."""

    def __init__(self, shards: Shards,
                 queue_summaries: Callable[[str, dict[int, list[Segment]]], None] | None = None) -> None:
        self.shards, self.queue_summaries = shards, queue_summaries

    async def list_memories(self, tenant: str, offset: int, limit: int,
                            where: MemoryFilter | None = None) -> tuple[list[StoredMemory], int]:
        return await tier(self.shards, tenant).list(tenant, offset, limit, where)

    async def get_memory(self, tenant: str, memory_id: str) -> StoredMemory:
        m = await tier(self.shards, tenant).get(tenant, memory_id)
        if m is None:
            raise _missing(tenant, memory_id)
        return m

    async def update_memory(self, tenant: str, memory_id: str, text: str, vector: np.ndarray, at: float,
                            metadata: dict[str, Any] | None = None) -> StoredMemory:
        """A new version of a tier memory (the old text stays in its history). The episodic segments keep the
        turn as it was said: ``/v1/ask`` reads the conversation, not the edited memory."""
        m = await tier(self.shards, tenant).update(tenant, memory_id, text, vector, at, metadata)
        if m is None:
            raise _missing(tenant, memory_id)
        return m

    async def history(self, tenant: str, memory_id: str) -> tuple[StoredMemory, list[dict[str, Any]]]:
        """The memory as it is now and its versions, oldest first."""
        t = tier(self.shards, tenant)
        m, versions = await asyncio.gather(t.get(tenant, memory_id), t.history(tenant, memory_id))
        if m is None or versions is None:
            raise _missing(tenant, memory_id)
        return m, versions

    async def delete_memory(self, tenant: str, memory_id: str) -> Deleted:
        gone = await self._delete(tenant, [memory_id])
        if not gone.memories and not gone.turns:
            raise _missing(tenant, memory_id)
        return gone

    async def delete_scope(self, tenant: str, scope: Scope) -> Deleted:
        """Forget every memory and raw turn written in ``scope`` (an agent's, a run's, or both)."""
        if scope.empty:
            raise ValueError("a scope to delete names an agent_id or a run_id")
        ids, turns = await asyncio.gather(tier(self.shards, tenant).matching(tenant, MemoryFilter(scope)),
                                          router(self.shards, tenant).in_scope(tenant, scope))
        wanted = list(dict.fromkeys([*ids, *turns]))
        return await self._delete(tenant, wanted) if wanted else Deleted(0, 0)

    async def _delete(self, tenant: str, ids: list[str]) -> Deleted:
        """Remove ids from the tier shard, every assistant core's segments and the router's index."""
        n = await tier(self.shards, tenant).delete(tenant, ids)
        forgotten = await asyncio.gather(*(assistants(self.shards, i).forget(tenant, ids)
                                           for i in range(self.shards.count("assistants"))))
        changed = [seg for f in forgotten for seg in f.segments]
        # NOTE: the router re-indexes the segments that lost the line (BM25, dense chunks; summaries dropped)
        lines = await router(self.shards, tenant).forget(tenant, ids, changed)
        groups: dict[int, list[Segment]] = defaultdict(list)
        for seg in changed if self.queue_summaries is not None else ():
            if seg.lines:  # fresh summaries of what the segments hold now
                groups[self.shards.assistant_index(tenant, seg.id)].append(seg)
        if groups and self.queue_summaries is not None:
            self.queue_summaries(tenant, dict(groups))
        return Deleted(n, max(lines, sum(f.lines for f in forgotten)))

    async def delete_user(self, tenant: str) -> Deleted:
        dropped = {kind: await asyncio.gather(*(self.shards.handle(kind, i).drop_tenant(tenant)
                                                for i in range(self.shards.count(kind))))
                   for kind in KINDS}
        return Deleted(int(sum(dropped["tier"])), int(sum(dropped["assistants"])))

    async def export_user(self, tenant: str, dim: int) -> Iterator[str]:
        memories, stream = await asyncio.gather(tier(self.shards, tenant).export_tenant(tenant),
                                                router(self.shards, tenant).export_tenant(tenant))
        held = await asyncio.gather(*(assistants(self.shards, i).segments(tenant)
                                      for i in range(self.shards.count("assistants"))))
        return export_lines(tenant, dim, memories, stream, {seg.id: seg for g in held for seg in g})

    async def import_user(self, tenant: str, plan: ImportPlan) -> tuple[int, int]:
        """(memories stored, segments imported); 409 when the tenant already holds anything."""
        _, total = await tier(self.shards, tenant).list(tenant, 0, 1)
        if total or await router(self.shards, tenant).context(tenant):
            raise ConflictError(f"user {tenant!r} already has memories; DELETE /v1/users/{tenant} first or "
                                "import under another user id", param="user_id", code="user_exists")
        stored = await tier(self.shards, tenant).import_tenant(tenant, plan.memories)
        groups: dict[int, list[Segment]] = defaultdict(list)
        for seg in plan.segments:
            groups[self.shards.assistant_index(tenant, seg.id)].append(seg)
        await asyncio.gather(*(assistants(self.shards, i).add(tenant, segs) for i, segs in groups.items()))
        segments = 0
        if plan.stream is not None:
            segments = await router(self.shards, tenant).import_tenant(tenant, plan.stream)
        return stored, segments

    async def health(self) -> dict[str, bool]:
        """``{"tier-0": True, ...}``: which cores answered a ping."""
        keys = [(kind, i) for kind in KINDS for i in range(self.shards.count(kind))]
        pings: list[Any] = await asyncio.gather(*(self.shards.handle(kind, i).ping() for kind, i in keys),
                                                return_exceptions=True)
        return {f"{kind}-{i}": p is True for (kind, i), p in zip(keys, pings, strict=True)}
