"""The actor topology: named, detached tier-shard, router and assistant actors in one namespace.

``Topology.start`` creates the actors or, when they exist (a restarted driver, a second ingress
replica), attaches to them by name; ``Topology.connect`` only attaches. A tenant's tier shard and
router are ``stable_hash(tenant) % n``; a segment's assistant actor is ``stable_hash(tenant/segment)
% n``. Actors restart after a crash (``cluster.max_restarts``); what they held in memory is lost
until the durability layer replays it.
"""

from __future__ import annotations

import hashlib
from typing import Any

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from actors.remote import AssistantActor, RouterActor, TierShardActor
from cluster.config import EngramConfig
from cluster.errors import UnavailableError
from serve.pool import PoolEngine, TokenizerCounter


def stable_hash(key: str) -> int:
    """A hash that is the same in every process (Python's ``hash`` of a str is salted per process).

    >>> stable_hash("alice") % 4 == stable_hash("alice") % 4
    True
    """
    return int.from_bytes(hashlib.blake2b(key.encode(), digest_size=8).digest(), "big")


class Topology:
    KINDS = ("tier", "router", "assistants")

    def __init__(self, config: EngramConfig, actors: dict[str, list[Any]]) -> None:
        self.config = config
        self.tiers, self.routers, self.assistants = (actors[k] for k in self.KINDS)

    # -- creation / attachment -------------------------------------------------------------
    @staticmethod
    def counts(config: EngramConfig) -> dict[str, int]:
        c = config.cluster
        return {"tier": c.tier_shards, "router": c.router_shards, "assistants": c.assistant_actors}

    @classmethod
    def start(cls, config: EngramConfig, *, dim: int, app_name: str = "engram",
              node_ids: list[str] | None = None) -> Topology:
        """Create the named actors (or attach to those that exist).

        ``node_ids``: pin actor ``i`` of each kind to ``node_ids[i % len(node_ids)]`` (soft affinity);
        otherwise ``cluster.placement`` decides (``spread``: Ray's SPREAD strategy).
        """
        c = config.cluster
        engine = PoolEngine.for_config(config.engine, app_name)
        ep = config.episodic
        classes = {"tier": TierShardActor, "router": RouterActor, "assistants": AssistantActor}
        args = {
            "tier": ((config.tiers, dim), {}),
            "router": ((config, dim), {"count_tokens": TokenizerCounter(config.engine)}),
            "assistants": ((engine,), {"evidence_per_segment": ep.evidence_per_segment,
                                      "summary_max_tokens": ep.summary_max_tokens}),
        }
        actors: dict[str, list[Any]] = {}
        for kind, n in cls.counts(config).items():
            actors[kind] = []
            for i in range(n):
                options: dict[str, Any] = {
                    "name": f"{kind}-{i}", "namespace": c.namespace, "lifetime": "detached", "get_if_exists": True,
                    "max_restarts": c.max_restarts, "num_cpus": c.actor_num_cpus,
                }
                if kind == "assistants":
                    options["max_concurrency"] = 8  # NOTE: waits on the pool; reads of held segments only
                if node_ids:
                    options["scheduling_strategy"] = NodeAffinitySchedulingStrategy(node_ids[i % len(node_ids)],
                                                                                    soft=True)
                elif c.placement == "spread":
                    options["scheduling_strategy"] = "SPREAD"
                a, kw = args[kind]
                actors[kind].append(classes[kind].options(**options).remote(*a, **kw))
        return cls(config, actors)

    @classmethod
    def connect(cls, config: EngramConfig) -> Topology:
        """Attach to running actors by name; raises UnavailableError naming the first one missing."""
        actors: dict[str, list[Any]] = {}
        for kind, n in cls.counts(config).items():
            actors[kind] = []
            for i in range(n):
                try:
                    actors[kind].append(ray.get_actor(f"{kind}-{i}", namespace=config.cluster.namespace))
                except ValueError as e:
                    raise UnavailableError(f"actor {kind}-{i} not found in namespace "
                                           f"{config.cluster.namespace!r}; start the service first") from e
        return cls(config, actors)

    # -- routing ---------------------------------------------------------------------------
    def tier_for(self, tenant: str) -> Any:
        return self.tiers[stable_hash(tenant) % len(self.tiers)]

    def router_for(self, tenant: str) -> Any:
        return self.routers[stable_hash(tenant) % len(self.routers)]

    def assistant_index(self, tenant: str, segment_id: int) -> int:
        return stable_hash(f"{tenant}/{segment_id}") % len(self.assistants)

    def all(self) -> dict[str, Any]:
        """``{name: handle}`` of every actor."""
        groups = {"tier": self.tiers, "router": self.routers, "assistants": self.assistants}
        return {f"{kind}-{i}": a for kind, handles in groups.items() for i, a in enumerate(handles)}

    def kill(self) -> None:
        """Stop every actor for good (no restart)."""
        for handle in self.all().values():
            ray.kill(handle, no_restart=True)
