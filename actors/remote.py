"""The stateful cores as Ray actors: one line each, journaled (``actors/durable.py``). Names, namespace,
restarts, resources and the journal directory are given at creation by ``cluster.topology.Topology``."""

import ray

from actors.durable import durable
from actors.tenant_assistants import TenantAssistants
from actors.tenant_episodes import TenantEpisodes
from actors.tenant_tiers import TenantTiers

TierShardActor = ray.remote(durable(TenantTiers, ("add", "delete"), compacting=("drop_tenant",)))
RouterActor = ray.remote(durable(TenantEpisodes, ("append", "set_summary", "forget"), compacting=("drop_tenant",)))
AssistantActor = ray.remote(durable(TenantAssistants, ("add", "forget"), compacting=("drop_tenant",)))
