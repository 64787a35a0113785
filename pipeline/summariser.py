"""Background summaries of closed segments (the router's global path, E-mem's P_global).

Writes queue the segments they closed (:meth:`Summariser.queue`) and are acknowledged at once; one background
worker writes the summaries when writes pause (none for ``cluster.write_idle_s``; NOTE: on a small CPU they
would otherwise slow every write down), or once the oldest has waited ``cluster.summary_delay_s``. Everything
queued goes at once, at most ``cluster.summary_batch`` segments per call and one call at a time per assistant
core, so summaries neither occupy every thread of an actor nor hold the small-model pool for long against ask
requests. Each summary is embedded and handed to the tenant's router.

:meth:`Summariser.add` + :meth:`Summariser.drain` write everything queued at once, in the same batches, without
a background worker (the benchmarks, before they ask).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import defaultdict
from collections.abc import AsyncIterator, Callable
from typing import Any

from core.config import ClusterConfig
from core.generation import TokenBill
from memory.segmenter import Segment
from pipeline.shards import Shards, assistants, router
from pipeline.write_path import Embed

log = logging.getLogger(__name__)


class Summariser:
    """One worker per ingress replica; ``on_bill`` sees the tokens of every summary call."""

    def __init__(self, config: ClusterConfig, shards: Shards, embed: Embed,
                 on_bill: Callable[[TokenBill], Any] | None = None) -> None:
        self.config, self.shards, self.embed, self.on_bill = config, shards, embed, on_bill
        self._queued: list[tuple[float, str, dict[int, list[Segment]]]] = []  # (queued at, tenant, by core)
        self._worker: asyncio.Task | None = None
        self._writes, self._last_write = 0, 0.0  # writes in flight; when the last one ended

    @property
    def pending(self) -> int:
        """Queued batches plus the running worker (``/v1/health``'s ``background``)."""
        return len(self._queued) + int(bool(self._worker and not self._worker.done()))

    @contextlib.asynccontextmanager
    async def writing(self) -> AsyncIterator[None]:
        """Wrap every write: summaries wait while writes run."""
        self._writes += 1
        try:
            yield
        finally:
            self._writes -= 1
            self._last_write = time.monotonic()

    def add(self, tenant: str, groups: dict[int, list[Segment]]) -> None:
        """Queue these segments (``{assistant core: segments}``) without starting the worker (see :meth:`drain`)."""
        if groups:
            self._queued.append((time.monotonic(), tenant, groups))

    def queue(self, tenant: str, groups: dict[int, list[Segment]]) -> None:
        """Summarise these segments (``{assistant core: segments}``) in the background."""
        self.add(tenant, groups)
        if self._queued and (self._worker is None or self._worker.done()):
            self._worker = asyncio.ensure_future(self._run())

    async def drain(self) -> None:
        """Summarise everything queued now and wait for it (no pause, no delay)."""
        todo, self._queued = self._queued, []
        await self._write(todo)

    async def _run(self) -> None:
        c = self.config
        while self._queued:
            busy = self._writes or time.monotonic() - self._last_write < c.write_idle_s
            if busy and time.monotonic() - self._queued[0][0] < c.summary_delay_s:
                await asyncio.sleep(0.05)
                continue
            todo, self._queued = self._queued, []
            await self._write(todo)

    async def _write(self, todo: list[tuple[float, str, dict[int, list[Segment]]]]) -> None:
        per_core: dict[int, list[tuple[str, int]]] = defaultdict(list)
        for _, tenant, groups in todo:
            for i, segs in groups.items():
                per_core[i].extend((tenant, seg.id) for seg in segs)
        # NOTE: a segment queued twice (closed, then shrunk by a delete) is summarised once, as it is now
        await asyncio.gather(*(self._summarise(i, list(dict.fromkeys(pairs))) for i, pairs in per_core.items()))

    async def _summarise(self, core: int, pairs: list[tuple[str, int]]) -> None:
        batch = self.config.summary_batch
        for start in range(0, len(pairs), batch):
            wanted: dict[str, list[int]] = defaultdict(list)
            for tenant, sid in pairs[start : start + batch]:
                wanted[tenant].append(sid)
            try:
                summaries, bill = await assistants(self.shards, core).summarise(
                    dict(wanted), timeout=self.config.summary_timeout_s)
                if self.on_bill is not None:
                    self.on_bill(bill)
                for tenant, found in summaries.items():
                    vecs = await self.embed(list(found.values()))
                    stream = router(self.shards, tenant)
                    await asyncio.gather(*(stream.set_summary(tenant, sid, text, v)
                                           for (sid, text), v in zip(found.items(), vecs, strict=True)))
            except Exception:  # NOTE: a lost summary only weakens the global path; the segment stays routable
                log.exception("summaries on assistants-%d failed", core)
