"""The cluster's shards: typed calls (``pipeline.shards.CoreHandle``) to the topology's Ray actors.

Each call waits at most ``cluster.actor_call_timeout_s`` (or the caller's ``timeout=``). An actor whose node is
gone (unschedulable, or dead for good) is revived once on an alive node and the call retried; an actor that is
restarting or too slow fails the request with a 503 (``UnavailableError``) that tells the client to retry.
Assistant writes run in the actors' own ``writes`` concurrency group, never behind extractions.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from ray.exceptions import ActorDiedError, ActorUnschedulableError, GetTimeoutError, RayActorError

from actors.remote import ASSISTANT_WRITES, WRITES
from core.config import EngramConfig
from core.errors import UnavailableError
from pipeline.shards import CORES, CoreHandle, Kind, Placement, shard_counts
from serve.topology import Topology

log = logging.getLogger(__name__)


class ActorShards(Placement):
    """``topology`` is awaited on each call (the ingress creates the actors once the embedder's dim is known)."""

    def __init__(self, config: EngramConfig, topology: Callable[[], Awaitable[Topology]]) -> None:
        super().__init__(shard_counts(config), config.cluster.tenant_hash)
        self.topology = topology
        self.timeout = config.cluster.actor_call_timeout_s

    def handle(self, kind: Kind, index: int) -> CoreHandle[Any]:
        async def call(name: str, args: tuple, timeout: float | None) -> Any:
            return await self._call(kind, index, name, args, timeout)

        return CoreHandle(CORES[kind], call)

    async def _call(self, kind: Kind, i: int, method: str, args: tuple, timeout: float | None) -> Any:
        topo = await self.topology()
        for attempt in range(2):
            call = getattr(topo.actors[kind][i], method)
            if kind == "assistants" and method in ASSISTANT_WRITES:
                call = call.options(concurrency_group=WRITES)
            try:
                return await asyncio.wait_for(call.remote(*args), timeout or self.timeout)
            except (ActorUnschedulableError, ActorDiedError) as e:
                error = e
                if attempt == 0:
                    log.warning("%s-%d is gone (%s); reviving it", kind, i, type(e).__name__)
                    topo.revive(kind, i)
            except (RayActorError, GetTimeoutError, TimeoutError) as e:  # restarting, or too slow
                error = e
                break
        raise UnavailableError(f"{kind}-{i} did not answer ({type(error).__name__}); retry the request",
                               code="actor_unavailable") from error
