"""Where a tenant's state lives, and typed calls to it: the seam between the pipelines and the actors.

The write and read pipelines (``actors/write_path.py``, ``actors/read_path.py``) never hold an actor or name a
method by a string. They ask a :class:`Shards` for a :class:`CoreHandle` of the core that holds a tenant
(``shards.tier(tenant)``, ``shards.router(tenant)``, ``shards.assistants(i)``) and call the core's methods on it:
``await shards.tier(tenant).add(...)``. A handle checks each name against the core's class when it is looked
up, so a misspelt method fails at once (and in the unit tests, which run the pipelines over
:class:`LocalShards`), never in production at the first request that takes that path.

Two kinds of shards: ``serve.actor_shards.ActorShards`` (the cluster: Ray actors, with retry and revive) and
:class:`LocalShards` (one in-process core of each kind: the benchmarks and the unit tests).
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import threading
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Generic, Literal, Protocol, TypeVar

from actors.episodic_router import line_terms
from actors.segmenter import estimate_tokens
from actors.tenant_assistants import TenantAssistants
from actors.tenant_episodes import TenantEpisodes
from actors.tenant_tiers import TenantTiers
from core.config import EngramConfig, Role
from core.generation import GenerationEngine

T = TypeVar("T")
Kind = Literal["tier", "router", "assistants"]
KINDS: tuple[Kind, ...] = ("tier", "router", "assistants")
CORES: dict[Kind, type] = {"tier": TenantTiers, "router": TenantEpisodes, "assistants": TenantAssistants}
# (method name, positional args, timeout in s or None for the default) -> the method's result
Call = Callable[[str, tuple, float | None], Awaitable[Any]]


def stable_hash(key: str) -> int:
    """A hash that is the same in every process (Python's ``hash`` of a str is salted per process).

    >>> stable_hash("alice") % 4 == stable_hash("alice") % 4
    True
    """
    return int.from_bytes(hashlib.blake2b(key.encode(), digest_size=8).digest(), "big")


@functools.cache  # NOTE: a handle is made per call (tier(shards, tenant)...): the class is read once
def methods(core: type) -> frozenset[str]:
    """The public methods of a core class: what a handle may call."""
    return frozenset(n for n in dir(core) if not n.startswith("_") and callable(getattr(core, n)))


class CoreHandle(Generic[T]):
    """Awaitable calls to one core (an actor's, or an in-process object's) by its methods' names.

    ``await handle.add(tenant, segments)`` runs ``core.add(tenant, segments)`` where the core lives;
    ``timeout=`` (seconds) overrides the caller's default wait. A name that is not a public method of the core's
    class raises ``AttributeError`` when it is looked up.
    """

    def __init__(self, core: type[T], call: Call) -> None:
        self._core, self._call, self._methods = core, call, methods(core)

    def __getattr__(self, name: str) -> Callable[..., Awaitable[Any]]:
        if name.startswith("_") or name not in self._methods:
            raise AttributeError(f"{self._core.__name__} has no method {name!r}")

        async def call(*args: Any, timeout: float | None = None) -> Any:
            return await self._call(name, args, timeout)

        call.__name__ = name
        return call


class Shards(Protocol):
    """The cores of a deployment and which one holds what (a tenant's tier shard and router, a segment's
    assistant actor)."""

    def count(self, kind: Kind) -> int: ...

    def handle(self, kind: Kind, index: int) -> CoreHandle[Any]: ...

    def tier_index(self, tenant: str) -> int: ...

    def router_index(self, tenant: str) -> int: ...

    def assistant_index(self, tenant: str, segment_id: int) -> int: ...


class Placement:
    """Which core of each kind holds a tenant / a segment, from the shard counts (the same in every process)."""

    def __init__(self, counts: dict[Kind, int]) -> None:
        self.counts = counts

    def count(self, kind: Kind) -> int:
        return self.counts[kind]

    def tier_index(self, tenant: str) -> int:
        return stable_hash(tenant) % self.counts["tier"]

    def router_index(self, tenant: str) -> int:
        return stable_hash(tenant) % self.counts["router"]

    def assistant_index(self, tenant: str, segment_id: int) -> int:
        return stable_hash(f"{tenant}/{segment_id}") % self.counts["assistants"]


def tier(shards: Shards, tenant: str) -> CoreHandle[TenantTiers]:
    return shards.handle("tier", shards.tier_index(tenant))


def router(shards: Shards, tenant: str) -> CoreHandle[TenantEpisodes]:
    return shards.handle("router", shards.router_index(tenant))


def assistants(shards: Shards, index: int) -> CoreHandle[TenantAssistants]:
    return shards.handle("assistants", index)


def assistant_options(config: EngramConfig) -> dict[str, Any]:
    """``TenantAssistants``' settings as the service configures them (extraction, shortlist, BM25 terms, summaries)."""
    ep = config.episodic
    return {"summary_max_tokens": ep.summary_max_tokens, "evidence_per_segment": ep.evidence_per_segment,
            "method": ep.extraction, "shortlist": ep.shortlist, "terms": line_terms(config.router)}


def shard_counts(config: EngramConfig) -> dict[Kind, int]:
    """Cores of each kind in the configured topology (``cluster.tier_shards`` / ``router_shards`` /
    ``assistant_actors``)."""
    c = config.cluster
    return {"tier": c.tier_shards, "router": c.router_shards, "assistants": c.assistant_actors}


class LocalShards(Placement):
    """The configured topology's cores as in-process objects (plain cores, no Ray): the service's pipelines in one
    process, with the tenants and segments placed on the same cores as in the cluster. ``engines``: the engine of
    each role (the assistants use the assistant and summary ones); ``count_tokens``: the router's segment sizes.

    NOTE: each call runs in a worker thread (an engine may block, e.g. a Serve handle's ``result()``, which refuses
    to run inside an event loop), one call at a time: the cores and a local engine are not thread-safe.
    """

    def __init__(self, config: EngramConfig, *, dim: int, engines: Mapping[Role, GenerationEngine],
                 count_tokens: Callable[[str], int] = estimate_tokens) -> None:
        super().__init__(shard_counts(config))
        make: dict[Kind, Callable[[], Any]] = {
            "tier": lambda: TenantTiers(config.tiers, dim),
            "router": lambda: TenantEpisodes(config, dim, count_tokens=count_tokens),
            "assistants": lambda: TenantAssistants(engines["assistant"], summary_engine=engines["summary"],
                                                   **assistant_options(config)),
        }
        self.cores: dict[Kind, list[Any]] = {kind: [make[kind]() for _ in range(n)] for kind, n in self.counts.items()}
        self._one_at_a_time = threading.Lock()

    def handle(self, kind: Kind, index: int) -> CoreHandle[Any]:
        method = functools.partial(self._run, self.cores[kind][index])

        async def call(name: str, args: tuple, timeout: float | None) -> Any:
            return await asyncio.to_thread(method, name, args)

        return CoreHandle(CORES[kind], call)

    def _run(self, core: Any, name: str, args: tuple) -> Any:
        with self._one_at_a_time:
            return getattr(core, name)(*args)
