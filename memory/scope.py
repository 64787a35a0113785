"""Which memories a read may see: a user's scopes (``agent_id``, ``run_id``) and filters on what is stored.

A tenant is a ``user_id``; inside it every write may name the agent that took part (``agent_id``) and the run
(``run_id``: a session, a task, a thread) it belongs to. Each stored memory keeps both in its metadata, and the
episodic stream keeps them per turn. A :class:`MemoryFilter` is what a read asks for:

- ``agent_id`` / ``run_id``: only items written with that scope (an item written without one is outside every
  scope that names it); both given: both must match;
- ``metadata``: equality on keys of the item's metadata (the service's own keys, e.g. ``speaker`` and ``type``,
  and those the writer attached);
- ``since`` / ``until``: the turn's own time (its event time, ``timestamp``), ``since <= t < until``.

An empty filter matches everything. Plain Python, no Ray.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

Scalar = str | int | float | bool
# metadata keys the service writes itself: a writer's own metadata may not use them (a 422 at the edge)
RESERVED_KEYS = frozenset({"speaker", "timestamp", "date_time", "type", "agent_id", "run_id", "session_id", "facts",
                           "supersedes", "superseded_by", "versions", "updated_at"})


def event_time(metadata: Mapping[str, Any] | None) -> datetime | None:
    """The time the turn behind a memory was said (its metadata's ISO ``timestamp``, in UTC), or None."""
    raw = (metadata or {}).get("timestamp")
    if not raw:
        return None
    ts = raw if isinstance(raw, datetime) else datetime.fromisoformat(str(raw))
    return ts.replace(tzinfo=UTC) if ts.tzinfo is None else ts.astimezone(UTC)


def _utc(ts: datetime | None) -> datetime | None:
    if ts is None:
        return None
    return ts.replace(tzinfo=UTC) if ts.tzinfo is None else ts.astimezone(UTC)


@dataclass(frozen=True)
class Scope:
    """A part of one user's memory: the turns of one agent, of one run, or of both (None: any)."""

    agent_id: str | None = None
    run_id: str | None = None

    @property
    def empty(self) -> bool:
        return self.agent_id is None and self.run_id is None

    def contains(self, agent_id: str | None, run_id: str | None) -> bool:
        """
        >>> Scope("a").contains("a", "r1"), Scope("a", "r2").contains("a", "r1"), Scope().contains(None, None)
        (True, False, True)
        """
        return ((self.agent_id is None or self.agent_id == agent_id)
                and (self.run_id is None or self.run_id == run_id))


@dataclass(frozen=True)
class MemoryFilter:
    """A scope plus metadata equality and an event-time range (see the module docstring)."""

    scope: Scope = field(default_factory=Scope)
    metadata: Mapping[str, Scalar] = field(default_factory=dict)
    since: datetime | None = None
    until: datetime | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "since", _utc(self.since))
        object.__setattr__(self, "until", _utc(self.until))
        if self.since is not None and self.until is not None and self.since >= self.until:
            raise ValueError(f"since ({self.since.isoformat()}) must be before until ({self.until.isoformat()})")

    @property
    def empty(self) -> bool:
        return self.scope.empty and not self.metadata and self.since is None and self.until is None

    def matches(self, metadata: Mapping[str, Any] | None) -> bool:
        """
        >>> f = MemoryFilter(Scope(agent_id="a"), {"type": "fact"}, since=datetime(2023, 1, 1))
        >>> f.matches({"agent_id": "a", "type": "fact", "timestamp": "2023-05-08T13:56:00+00:00"})
        True
        >>> f.matches({"agent_id": "a", "type": "plan", "timestamp": "2023-05-08T13:56:00+00:00"})
        False
        """
        meta = metadata or {}
        if not self.scope.contains(meta.get("agent_id"), meta.get("run_id")):
            return False
        if any(meta.get(k) != v or type(meta.get(k)) is not type(v) for k, v in self.metadata.items()):
            return False
        if self.since is None and self.until is None:
            return True
        t = event_time(meta)
        if t is None:
            return False
        return (self.since is None or t >= self.since) and (self.until is None or t < self.until)
