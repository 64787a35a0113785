"""The stateful cores as Ray actors: one line each, journaled (``actors/durable.py``). Names, namespace,
restarts, resources and the journal directory are given at creation by ``cluster.topology.Topology``."""

import ray

from actors.durable import durable
from actors.tenant_assistants import TenantAssistants
from actors.tenant_episodes import TenantEpisodes
from actors.tenant_tiers import TenantTiers

DROP = ("drop_tenant",)  # deleting a user compacts the journal at once

TierShardActor = ray.remote(durable(TenantTiers, ("add", "delete"), compacting=DROP))
RouterActor = ray.remote(durable(TenantEpisodes, ("append", "delivered", "set_summary", "forget"), compacting=DROP))
AssistantActor = ray.remote(durable(TenantAssistants, ("add", "forget"), compacting=DROP))
