"""The stateful cores as Ray actors: one line each, journaled (``cores/durable_cores.py``). Names, namespace,
restarts, resources and the journal directory are given at creation by ``serve.topology.Topology``."""

import ray

from cores.durable_cores import DurableAssistants, DurableEpisodes, DurableTiers

WRITES = "writes"  # assistant actors: writes run in their own threads, never behind extractions waiting on the pool
ASSISTANT_WRITES = frozenset({"add", "forget", "drop_tenant", "ping"})

TierShardActor = ray.remote(DurableTiers)
RouterActor = ray.remote(DurableEpisodes)
AssistantActor = ray.remote(concurrency_groups={WRITES: 2})(DurableAssistants)
