"""Concurrent queries of one ingress replica embedded together, without a wait at concurrency 1.

A call that finds the encoder idle runs at once; calls that arrive while a batch runs go together into the
next one (up to ``max_batch`` texts). Unlike a timer-based batcher (``serve.batch`` waits up to its timeout
for a batch to fill), a lone query never waits, and under load every forward pass carries all the queries
that queued behind the previous one.

    batcher = QueryBatcher(encoder.encode)
    vector = (await batcher.embed(["when did Caroline move?"]))[0]
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence

import numpy as np


class QueryBatcher:
    """Gathers concurrent ``embed`` calls into one ``encode(texts, is_query=True)`` call, run in a thread."""

    def __init__(self, encode: Callable[..., np.ndarray], max_batch: int = 32) -> None:
        if max_batch < 1:
            raise ValueError(f"max_batch must be >= 1, got {max_batch}")
        self._encode = encode
        self.max_batch = max_batch
        self._queue: list[tuple[list[str], asyncio.Future[np.ndarray]]] = []
        self._running = False
        self.batches = 0  # forward passes run (for tests and metrics)

    async def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Vectors of ``texts`` (one row each), computed in whatever batch this call joins."""
        future: asyncio.Future[np.ndarray] = asyncio.get_running_loop().create_future()
        self._queue.append((list(texts), future))
        if not self._running:
            self._running = True
            asyncio.get_running_loop().create_task(self._drain())
        return await future

    def _next_batch(self) -> list[tuple[list[str], asyncio.Future[np.ndarray]]]:
        taken, size = 0, 0
        for texts, _ in self._queue:
            if taken and size + len(texts) > self.max_batch:
                break
            taken, size = taken + 1, size + len(texts)
        batch, self._queue = self._queue[:taken], self._queue[taken:]
        return [(texts, future) for texts, future in batch if not future.cancelled()]

    async def _drain(self) -> None:
        try:
            while self._queue:
                batch = self._next_batch()
                if not batch:
                    continue
                texts = [t for group, _ in batch for t in group]
                self.batches += 1
                try:
                    vectors = await asyncio.to_thread(self._encode, texts, is_query=True)
                except Exception as exc:  # noqa: BLE001 - every caller of the batch gets the error
                    for _, future in batch:
                        if not future.done():
                            future.set_exception(exc)
                    continue
                start = 0
                for group, future in batch:
                    if not future.done():
                        future.set_result(vectors[start:start + len(group)])
                    start += len(group)
        finally:
            self._running = False
