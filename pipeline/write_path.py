"""The write path (``POST /v1/turns``) as a plain async class over the shards.

Per request: each turn's rendered line is embedded once -> admission (the classifier on the turn and up to
``admission.max_turns - 1`` turns before it, or store-all with the keyword rule's content type) -> admitted
turns into the tenant's tier shard (L1/L2) and every turn into its episodic stream (the router core; only
admitted ones enter segments) -> the segments that close go to their assistant cores -> the router is told they
arrived. Summaries of the closed segments are the summariser's business (``pipeline/summariser.py``), after the
write is acknowledged.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import defaultdict
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any, Protocol

import numpy as np

from core.config import EngramConfig
from core.errors import ConflictError
from core.tracing import annotate, span
from cores.tenant_episodes import TurnRecord
from inference.admission import Decision, rule_decision
from memory.segmenter import Segment
from memory.time_expressions import anchor_of
from pipeline.shards import Shards, assistants, router, tier

Embed = Callable[[list[str]], Awaitable[np.ndarray]]  # stored texts -> unit rows
Classify = Callable[[list[np.ndarray]], Awaitable[list[Decision]]]  # admission chunks -> decisions


class IncomingTurn(Protocol):
    """A turn as a client sends it (``serve.schemas.TurnIn`` fits): id, time and rendered time are optional."""

    id: str | None
    speaker: str
    text: str
    timestamp: datetime | None
    date_time: str | None


def format_date_time(ts: datetime) -> str:
    """The rendered time of a turn: ``format_date_time(datetime(2023, 5, 8, 13, 56)) == '1:56 pm on 8 May, 2023'``."""
    hour = ts.hour % 12 or 12
    return f"{hour}:{ts.minute:02d} {'am' if ts.hour < 12 else 'pm'} on {ts.day} {ts.strftime('%B')}, {ts.year}"


def turn_records(turns: Sequence[IncomingTurn], now: datetime, ground_dates: bool = True) -> list[TurnRecord]:
    """Records as the cores keep them: a missing id is generated, a missing time is ``now``; every time in UTC
    (a time without a zone is taken as UTC: sorting evidence compares them), and with ``ground_dates`` the date
    the turn was said on in its own zone as the anchor of its relative dates. Raises ``ConflictError`` when an id
    appears twice."""
    out = []
    for t in turns:
        local = t.timestamp or now
        ts = local.replace(tzinfo=UTC) if local.tzinfo is None else local.astimezone(UTC)
        out.append(TurnRecord(t.id or uuid.uuid4().hex, t.speaker, t.text, t.date_time or format_date_time(ts), ts,
                              anchor_of(local) if ground_dates else None))
    ids = [t.turn_id for t in out]
    if len(set(ids)) != len(ids):
        dup = next(i for i in ids if ids.count(i) > 1)
        raise ConflictError(f"turn id {dup!r} appears twice in one batch", param="turns", code="duplicate_id")
    return out


def admission_chunks(context: list[np.ndarray], vectors: np.ndarray, width: int) -> list[np.ndarray]:
    """One chunk per new turn: its vector and up to ``width - 1`` before it (earlier requests' turns from
    ``context`` first), oldest first — MemRouter's ≤ 5-turn window.

    >>> [c[:, 0].tolist() for c in admission_chunks([np.array([1.0])], np.array([[2.0], [3.0]]), 2)]
    [[1.0, 2.0], [2.0, 3.0]]
    """
    stream = [*context, *vectors]
    n = len(context)
    return [np.stack(stream[max(0, n + i + 1 - width) : n + i + 1]) for i in range(len(vectors))]


@dataclass
class WriteReport:
    """What one write did: a decision per turn (in order), the segments it closed (by assistant core), evictions."""

    turn_ids: list[str]
    decisions: list[Decision]
    closed: dict[int, list[Segment]]
    evicted: int
    links: list[dict[str, Any] | None] = field(default_factory=list)  # per turn: duplicate / supersedes / None

    @property
    def admitted(self) -> list[bool]:
        return [d.op == "ADD" for d in self.decisions]

    @property
    def segments_closed(self) -> int:
        return sum(len(segs) for segs in self.closed.values())


class WritePath:
    """Embed, admit, store: one request's turns into a tenant's tiers, stream and assistants."""

    def __init__(self, config: EngramConfig, shards: Shards, embed: Embed, classify: Classify | None) -> None:
        self.config, self.shards, self.embed, self.classify = config, shards, embed, classify

    async def add_turns(self, tenant: str, turns: Sequence[TurnRecord], *, agent_id: str | None = None,
                        run_id: str | None = None, session_id: str | None = None,
                        metadata: dict[str, Any] | None = None) -> WriteReport:
        """``agent_id`` / ``run_id``: the scopes the turns are written in (``memory/scope.py``); ``metadata``: the
        writer's own keys, kept on every memory the turns become (none of ``RESERVED_KEYS``: the edge refuses them)."""
        turns = [replace(t, agent_id=agent_id, run_id=run_id) for t in turns]
        ids = [t.turn_id for t in turns]
        vectors = await self.embed([t.line for t in turns])
        decisions = list(await self._admit(tenant, turns, vectors))
        keep = [i for i, d in enumerate(decisions) if d.op == "ADD"]
        meta: list[dict[str, Any]] = [
            {**(metadata or {}), "speaker": turns[i].speaker, "timestamp": turns[i].timestamp.isoformat(),
             "date_time": turns[i].date_time, "type": decisions[i].content_type, "agent_id": agent_id,
             "run_id": run_id, "session_id": session_id} for i in keep]
        with span("tier.add", core=self.shards.tier_index(tenant), offered=len(keep)) as sp:
            report = await tier(self.shards, tenant).add(
                tenant, [ids[i] for i in keep], [turns[i].text for i in keep], vectors[keep],
                [d.p_add if d.p_add is not None else 0.5 for d in (decisions[i] for i in keep)], meta, time.time())
            annotate(sp, stored=report.stored, evicted=report.evicted)
        # NOTE: the tier shard's dedup (memory/write_links.py) turns a duplicate into a NOOP that points at the
        # memory it repeats; the episodic stream then leaves it out like any other NOOP.
        links: list[dict[str, Any] | None] = [None] * len(turns)
        for i, link in zip(keep, report.links or [None] * len(keep), strict=True):
            links[i] = link
            if link is not None and link["kind"] == "duplicate":
                decisions[i] = replace(decisions[i], op="NOOP")
        stream = router(self.shards, tenant)
        with span("router.append", core=self.shards.router_index(tenant), turns=len(turns)) as sp:
            closed = await stream.append(tenant, turns, vectors, [d.op == "ADD" for d in decisions])
            annotate(sp, segments_closed=[seg.id for seg in closed])
        groups: dict[int, list[Segment]] = defaultdict(list)
        for seg in closed:
            groups[self.shards.assistant_index(tenant, seg.id)].append(seg)
        if closed:
            with span("assistants.add", cores=sorted(groups), segment_ids=[seg.id for seg in closed]):
                await asyncio.gather(*(assistants(self.shards, i).add(tenant, segs) for i, segs in groups.items()))
                await stream.delivered(tenant, [seg.id for seg in closed])
        return WriteReport(ids, decisions, dict(groups), report.evicted, links)

    async def _admit(self, tenant: str, turns: Sequence[TurnRecord], vectors: np.ndarray) -> list[Decision]:
        with span("admission", mode=self.config.admission.mode, turns=len(turns)) as sp:
            if self.classify is None:  # store_all (also where no classifier is wired in), or the keyword rule
                acfg = self.config.admission
                keyword_min = acfg.keyword_min if acfg.mode == "keyword" else None
                decisions = [rule_decision(t.text, keyword_min) for t in turns]
            else:
                context = await router(self.shards, tenant).context(tenant)
                decisions = await self.classify(admission_chunks(context, vectors, self.config.admission.max_turns))
            annotate(sp, added=sum(d.op == "ADD" for d in decisions))
            return decisions
