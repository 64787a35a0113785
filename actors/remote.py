"""The stateful cores as Ray actors: one line each, journaled (``actors/durable.py``). Names, namespace,
restarts, resources and the journal directory are given at creation by ``cluster.topology.Topology``."""

import ray

from actors.durable import durable
from actors.tenant_assistants import TenantAssistants
from actors.tenant_episodes import TenantEpisodes
from actors.tenant_tiers import TenantTiers

DROP = ("drop_tenant",)  # deleting a user compacts the journal at once
WRITES = "writes"  # assistant actors: writes run in their own threads, never behind extractions waiting on the pool
ASSISTANT_WRITES = frozenset({"add", "forget", "drop_tenant", "ping"})

TierShardActor = ray.remote(durable(TenantTiers, ("add", "delete"), compacting=DROP))
RouterActor = ray.remote(durable(TenantEpisodes, ("append", "delivered", "set_summary", "forget"), compacting=DROP))
AssistantActor = ray.remote(concurrency_groups={WRITES: 2})(
    durable(TenantAssistants, ("add", "forget"), compacting=DROP))
