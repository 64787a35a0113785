"""The actor topology: named, detached tier-shard, router and assistant actors in one namespace.

``Topology.start`` creates the actors or, when they exist (a restarted driver, a second ingress
replica), attaches to them by name; ``Topology.connect`` only attaches. A tenant's tier shard and
router, and a segment's (``tenant/segment``) assistant actor, are placed by ``cluster.tenant_hash``
(``pipeline.shards.Placement``): rendezvous hashing over the actors' indices, or ``stable_hash(key) % n`` under
``modulo``. With ``cluster.placement: round_robin`` actor ``i`` of each kind
is pinned to alive node ``i % nodes``. Actors restart after a crash (``cluster.max_restarts``); an actor
whose node is gone cannot restart there and is revived on an alive node by the first caller that finds it dead
(:meth:`Topology.revive`). What an actor held in memory is lost until the durability layer replays it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from actors.remote import AssistantActor, RouterActor, TierShardActor
from core.config import EngramConfig
from core.errors import UnavailableError
from cores.object_journal import is_url
from pipeline.placement_record import check_placement
from pipeline.shards import Placement, assistant_options, shard_counts
from serve.pool import PoolEngine, TokenizerCounter


def storage_root(config: EngramConfig) -> str | None:
    """``<storage_dir>/<namespace>``: a local directory (``~`` expanded) or an object store URL; None without one."""
    c = config.cluster
    if c.storage_dir is None:
        return None
    if is_url(c.storage_dir):
        return f"{c.storage_dir.rstrip('/')}/{c.namespace}"
    return str(Path(c.storage_dir).expanduser() / c.namespace)


class Topology:
    KINDS = ("tier", "router", "assistants")

    def __init__(self, config: EngramConfig, actors: dict[str, list[Any]], *, dim: int | None = None,
                 app_name: str = "engram") -> None:
        self.config, self.dim, self.app_name = config, dim, app_name
        self.actors = actors

    @property
    def tiers(self) -> list[Any]:
        return self.actors["tier"]

    @property
    def routers(self) -> list[Any]:
        return self.actors["router"]

    @property
    def assistants(self) -> list[Any]:
        return self.actors["assistants"]

    # -- creation / attachment -------------------------------------------------------------
    @staticmethod
    def counts(config: EngramConfig) -> dict[str, int]:
        return dict(shard_counts(config))

    @classmethod
    def check_storage(cls, config: EngramConfig) -> None:
        """Refuse a storage_dir whose state was placed by another scheme or shard counts (pipeline.placement_record)."""
        root = storage_root(config)
        if root is not None:
            check_placement(root, Placement(cls.counts(config), config.cluster.tenant_hash),
                            config.cluster.storage_options)

    @classmethod
    def start(cls, config: EngramConfig, *, dim: int, app_name: str = "engram") -> Topology:
        """Create the named actors (or attach to those that exist)."""
        topo = cls(config, {k: [] for k in cls.KINDS}, dim=dim, app_name=app_name)
        cls.check_storage(config)
        nodes = topo._alive_nodes()
        for kind, n in cls.counts(config).items():
            topo.actors[kind] = [topo._create(kind, i, nodes) for i in range(n)]
        for router in topo.routers:
            router.warm.remote()  # NOTE: fire and forget; the first write would otherwise load the tokenizer
        return topo

    def revive(self, kind: str, index: int) -> Any:
        """Replace an actor that Ray cannot restart (its node is gone): a new one under the same name, placed
        on an alive node. It starts empty unless the durability layer restores it."""
        self.actors[kind][index] = self._create(kind, index, self._alive_nodes())
        return self.actors[kind][index]

    def _alive_nodes(self) -> list[str]:
        return sorted(n["NodeID"] for n in ray.nodes() if n["Alive"])

    def _create(self, kind: str, i: int, nodes: list[str]) -> Any:
        config, c = self.config, self.config.cluster
        if self.dim is None:
            raise UnavailableError("this topology was attached with connect(); it cannot create actors")
        options: dict[str, Any] = {
            "name": f"{kind}-{i}", "namespace": c.namespace, "lifetime": "detached", "get_if_exists": True,
            "max_restarts": c.max_restarts, "num_cpus": c.actor_num_cpus,
        }
        if c.placement == "round_robin" and nodes:
            # NOTE: a hard affinity: Ray's soft affinity does not keep actors on the node asked for. When that
            # node dies the actor becomes unschedulable and the caller revives it elsewhere (revive()).
            options["scheduling_strategy"] = NodeAffinitySchedulingStrategy(nodes[i % len(nodes)], soft=False)
        elif c.placement == "spread":
            options["scheduling_strategy"] = "SPREAD"
        journal = {"journal_dir": self.journal_dir(f"{kind}-{i}"), "snapshot_every": c.snapshot_every}
        if c.storage_options:
            journal["storage_options"] = c.storage_options
        if kind == "tier":
            return TierShardActor.options(**options).remote(config.tiers, self.dim, **journal)
        if kind == "router":
            # NOTE: segments are sized in the assistants' tokens: a segment and its extraction prompt fit their window
            count = TokenizerCounter(config.engine_for("assistant"))
            return RouterActor.options(**options).remote(config, self.dim, count_tokens=count, **journal)
        options["max_concurrency"] = c.assistant_max_concurrency
        return AssistantActor.options(**options).remote(
            PoolEngine.for_role(config, "assistant", self.app_name),
            summary_engine=PoolEngine.for_role(config, "summary", self.app_name), **assistant_options(config),
            **journal)

    def journal_dir(self, name: str) -> str | None:
        root = storage_root(self.config)
        return None if root is None else f"{root}/{name}" if is_url(root) else str(Path(root) / name)

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

    # -- placement (``pipeline.shards.Placement``: the pipelines place tenants the same way) ------------
    @property
    def placement(self) -> Placement:
        counts = {kind: len(handles) for kind, handles in self.actors.items()}
        return Placement(counts, self.config.cluster.tenant_hash)

    def tier_for(self, tenant: str) -> Any:
        return self.tiers[self.placement.tier_index(tenant)]

    def router_for(self, tenant: str) -> Any:
        return self.routers[self.placement.router_index(tenant)]

    def all(self) -> dict[str, Any]:
        """``{name: handle}`` of every actor."""
        return {f"{kind}-{i}": a for kind, handles in self.actors.items() for i, a in enumerate(handles)}

    def kill(self) -> None:
        """Stop every actor for good (no restart)."""
        for handle in self.all().values():
            ray.kill(handle, no_restart=True)
