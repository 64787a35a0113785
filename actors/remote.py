"""The stateful cores as Ray actors: one line each. Names, namespace, restarts and resources are given
at creation by ``cluster.topology.Topology`` from ``config.cluster``."""

import ray

from actors.tenant_assistants import TenantAssistants
from actors.tenant_episodes import TenantEpisodes
from actors.tenant_tiers import TenantTiers

TierShardActor = ray.remote(TenantTiers)
RouterActor = ray.remote(TenantEpisodes)
AssistantActor = ray.remote(TenantAssistants)
