"""Where a tenant's state lives, and typed calls to it: the seam between the pipelines and the actors.

The write and read pipelines (``pipeline/write_path.py``, ``pipeline/read_path.py``) never hold an actor or name a
method by a string. They ask a :class:`Shards` for a :class:`CoreHandle` of the core that holds a tenant
(``shards.tier(tenant)``, ``shards.router(tenant)``, ``shards.assistants(i)``) and call the core's methods on it:
``await shards.tier(tenant).add(...)``. A handle checks each name against the core's class when it is looked
up, so a misspelt method fails at once (and in the unit tests, which run the pipelines over
:class:`LocalShards`), never in production at the first request that takes that path.

Two kinds of shards: ``serve.actor_shards.ActorShards`` (the cluster: Ray actors, with retry and revive) and
:class:`LocalShards` (one in-process core of each kind: the benchmarks and the unit tests).

Where a key (a tenant, or ``tenant/segment``) lives is :func:`shard_of`, by ``cluster.tenant_hash``:
``rendezvous`` (highest random weight: the shard whose :func:`shard_weights` for the key is highest) or
``modulo`` (``stable_hash(key) % n``, the scheme of earlier versions). Adding an (n+1)-th shard moves about
1/(n+1) of the keys under rendezvous, all of them to the new shard, and removing a shard moves only its own
keys; under modulo both move about n/(n+1) of all keys. ``python -m bench.placement`` measures both.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import threading
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Generic, Literal, Protocol, TypeVar, get_args

import numpy as np

from core.config import EngramConfig, Role, TenantHash
from core.generation import GenerationEngine
from cores.tenant_assistants import TenantAssistants
from cores.tenant_episodes import TenantEpisodes
from cores.tenant_tiers import TenantTiers
from memory.bm25 import line_terms
from memory.segmenter import estimate_tokens

T = TypeVar("T")
Kind = Literal["tier", "router", "assistants"]
SCHEMES: tuple[TenantHash, ...] = get_args(TenantHash)
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


# splitmix64's constants (Steele, Lea, Flood 2014: "Fast splittable pseudorandom number generators")
_GOLDEN, _M1, _M2 = np.uint64(0x9E3779B97F4A7C15), np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)
_S30, _S27, _S31 = np.uint64(30), np.uint64(27), np.uint64(31)


def mix64(x: np.ndarray) -> np.ndarray:
    """splitmix64's output function on a uint64 array: a bijection whose output bits each depend on every input
    bit, so nearby inputs (shard ids 0, 1, 2...) give unrelated outputs.

    >>> [hex(int(v)) for v in mix64(np.array([0], dtype=np.uint64))]
    ['0xe220a8397b1dcdaf']
    """
    # NOTE: arrays wrap on overflow silently, numpy scalars warn: pass arrays. In place: no temporary per step.
    z = np.asarray(x, dtype=np.uint64) + _GOLDEN
    z ^= z >> _S30
    z *= _M1
    z ^= z >> _S27
    z *= _M2
    z ^= z >> _S31
    return z


def shard_seeds(shard_ids: np.ndarray) -> np.ndarray:
    """Each shard's seed, ``mix64(id)``: it depends on the shard's own id only."""
    return mix64(np.asarray(shard_ids, dtype=np.uint64))


def shard_weights(key_hashes: np.ndarray, seeds: np.ndarray) -> np.ndarray:
    """Rendezvous weights of keys (their ``stable_hash``) on shards (their :func:`shard_seeds`), a
    ``(keys, shards)`` uint64 array: ``mix64(key_hash ^ seed)``. A key lives on the shard of highest weight.

    A shard's weights do not depend on which other shards exist: adding a shard moves only the keys it wins,
    removing one only the keys it held. ``mix64`` is a bijection and the seeds are distinct, so one key's weights
    on distinct shards are distinct: no ties. ``bench.placement`` runs this same function over many keys at
    once, so it measures the placement the service runs.
    """
    return mix64(np.asarray(key_hashes, dtype=np.uint64)[:, None] ^ seeds[None, :])


@functools.cache
def _seeds(n: int) -> np.ndarray:
    seeds = shard_seeds(np.arange(n, dtype=np.uint64))
    seeds.flags.writeable = False  # NOTE: shared by every call
    return seeds


def rendezvous(key_hashes: np.ndarray, n: int) -> np.ndarray:
    """The shard in ``0..n-1`` of each key (by its ``stable_hash``) under rendezvous hashing."""
    return shard_weights(key_hashes, _seeds(n)).argmax(axis=1)


# NOTE: runs on every request; uncached it makes several numpy calls, cached it is one dict lookup
@functools.lru_cache(maxsize=1 << 16)
def rendezvous_index(key: str, n: int) -> int:
    """:func:`rendezvous` of one key (0 when ``n == 1``)."""
    if n == 1:
        return 0
    return int(rendezvous(np.array([stable_hash(key)], dtype=np.uint64), n)[0])


def shard_of(key: str, n: int, scheme: TenantHash) -> int:
    """Which of ``n`` shards holds ``key``: the same answer in every process and on every run.

    >>> shard_of("alice", 1, "rendezvous"), shard_of("alice", 4, "modulo") == stable_hash("alice") % 4
    (0, True)
    """
    if scheme == "rendezvous":
        return rendezvous_index(key, n)
    return stable_hash(key) % n


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
    """Which core of each kind holds a tenant / a segment, from the shard counts and ``cluster.tenant_hash``
    (:func:`shard_of`: the same in every process)."""

    def __init__(self, counts: dict[Kind, int], scheme: TenantHash = "rendezvous") -> None:
        if scheme not in SCHEMES:
            raise ValueError(f"unknown placement scheme {scheme!r}; known: {', '.join(SCHEMES)}")
        self.counts, self.scheme = counts, scheme

    def count(self, kind: Kind) -> int:
        return self.counts[kind]

    def tier_index(self, tenant: str) -> int:
        return shard_of(tenant, self.counts["tier"], self.scheme)

    def router_index(self, tenant: str) -> int:
        return shard_of(tenant, self.counts["router"], self.scheme)

    def assistant_index(self, tenant: str, segment_id: int) -> int:
        return shard_of(f"{tenant}/{segment_id}", self.counts["assistants"], self.scheme)


def tier(shards: Shards, tenant: str) -> CoreHandle[TenantTiers]:
    return shards.handle("tier", shards.tier_index(tenant))


def router(shards: Shards, tenant: str) -> CoreHandle[TenantEpisodes]:
    return shards.handle("router", shards.router_index(tenant))


def assistants(shards: Shards, index: int) -> CoreHandle[TenantAssistants]:
    return shards.handle("assistants", index)


def assistant_options(config: EngramConfig) -> dict[str, Any]:
    """``TenantAssistants``' settings as the service configures them (extraction, shortlist, speaker prior, BM25
    terms, summaries)."""
    ep = config.episodic
    return {"summary_max_tokens": ep.summary_max_tokens, "evidence_per_segment": ep.evidence_per_segment,
            "method": ep.extraction, "shortlist": ep.shortlist, "speaker_prior": ep.speaker_prior,
            "terms": line_terms(config.router)}


SHARD_FIELDS: dict[Kind, str] = {"tier": "tier_shards", "router": "router_shards", "assistants": "assistant_actors"}


def shard_counts(config: EngramConfig) -> dict[Kind, int]:
    """Cores of each kind in the configured topology (``cluster.tier_shards`` / ``router_shards`` /
    ``assistant_actors``)."""
    return {kind: getattr(config.cluster, field) for kind, field in SHARD_FIELDS.items()}


class LocalShards(Placement):
    """The configured topology's cores as in-process objects (plain cores, no Ray): the service's pipelines in one
    process, with the tenants and segments placed on the same cores as in the cluster. ``engines``: the engine of
    each role (the assistants use the assistant and summary ones); ``count_tokens``: the router's segment sizes.

    NOTE: each call runs in a worker thread (an engine may block, e.g. a Serve handle's ``result()``, which refuses
    to run inside an event loop), one call at a time: the cores and a local engine are not thread-safe.
    """

    def __init__(self, config: EngramConfig, *, dim: int, engines: Mapping[Role, GenerationEngine],
                 count_tokens: Callable[[str], int] = estimate_tokens) -> None:
        super().__init__(shard_counts(config), config.cluster.tenant_hash)
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
