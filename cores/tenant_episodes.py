"""Episodic streams of many tenants in one process: the core of a router actor.

Per tenant (``user_id``): a :class:`Segmenter` that cuts the admitted turns into overlapping segments,
an :class:`EpisodicRouter` over the closed segments (summary / dense / BM25 paths), and the last few
turn vectors of the stream (admitted or not) that the admission classifier reads as context.

The router never embeds: the ingress embeds each turn's rendered line once and passes the vectors in; the
stream keeps them by line (``_Stream.known``) until a closing segment hands them to the router as its chunk
vectors (``router.chunking`` must be ``turn``), and passes the question's vector when it routes. The open
(still filling) segment is not indexed; :meth:`TenantEpisodes.route` returns a copy of it so that its turns
can be read too.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import date, datetime

import numpy as np

from core.config import EngramConfig
from cores.tenant_export import SegmentState, StreamState, TurnVector
from memory.routing import Activation, EpisodicRouter
from memory.scope import Scope
from memory.segmenter import Segment, Segmenter, estimate_tokens, render_turn


@dataclass(frozen=True)
class TurnRecord:
    """One turn as the service keeps it (fits the segmenter's ``TurnLike``)."""

    turn_id: str
    speaker: str
    text: str
    date_time: str
    timestamp: datetime
    anchor: date | None = None  # the local date relative dates are grounded on (None: not grounded)
    agent_id: str | None = None  # the scopes the turn was written in (memory/scope.py)
    run_id: str | None = None

    @property
    def line(self) -> str:
        return render_turn(self)


@dataclass
class RouteResult:
    activations: list[Activation]
    segments: dict[int, tuple[datetime, datetime, list[str]]]  # id -> (start, end, turn ids)
    open_segment: Segment | None = None
    # a scoped route, or one routed by lines (router mode 'lines'): the routed turns (inside the scope), the only
    # lines a reader may see; None: every turn of the routed segments
    allowed: frozenset[str] | None = None
    idf: dict[str, float] | None = None  # the question's terms' idf over the tenant's segments (EpisodicRouter)


@dataclass
class _Stream:
    segmenter: Segmenter
    router: EpisodicRouter
    recent: deque = field(default_factory=deque)
    known: dict[str, np.ndarray] = field(default_factory=dict)  # line -> vector, of lines a segment may still hold
    meta: dict[int, tuple[datetime, datetime, list[str]]] = field(default_factory=dict)
    seen: set[str] = field(default_factory=set)  # turn ids appended so far: a retried write is not doubled
    pending: dict[int, Segment] = field(default_factory=dict)  # closed, not yet confirmed held by an assistant
    summaries: dict[int, str] = field(default_factory=dict)  # segment id -> summary text (for exports)
    scopes: dict[str, tuple[str | None, str | None]] = field(default_factory=dict)  # turn id -> (agent, run)


def _chunk_vectors(router: EpisodicRouter, known: Mapping[str, np.ndarray], segments: Sequence[Segment]) -> np.ndarray:
    """The vectors of the segments' router chunks (their lines) from ``known`` (line -> vector); KeyError for a
    line whose vector was never passed."""
    chunks = [c for seg in segments for c in router.chunks_of(seg)]
    missing = [c for c in chunks if c not in known]
    if missing:
        raise KeyError(f"no vector was passed for {len(missing)} text(s), e.g. {missing[0][:80]!r}")
    if not chunks:
        return np.zeros((0, router.dim), dtype=np.float32)
    return np.stack([known[c] for c in chunks]).astype(np.float32, copy=False)


def _routed_lines(meta: tuple[datetime, datetime, list[str]],
                  lines: Sequence[int]) -> tuple[datetime, datetime, list[str]]:
    """A segment's (start, end, turn ids) cut to the routed ``lines`` (all of it when none are named)."""
    start, end, turn_ids = meta
    return meta if not lines else (start, end, [turn_ids[i] for i in lines])


class TenantEpisodes:
    """``{tenant: stream}``: append turns, route questions, attach summaries, forget turns or tenants."""

    durable_state = "_streams"  # the tenant data a snapshot holds (cores/durable.py)

    def __init__(self, config: EngramConfig, dim: int, count_tokens: Callable[[str], int] | None = None) -> None:
        if config.router.chunking != "turn":
            raise ValueError("the service's router indexes turn lines (router.chunking must be 'turn')")
        self.config = config
        self.dim = dim
        self.count_tokens = count_tokens or estimate_tokens
        self._streams: dict[str, _Stream] = {}

    def ping(self) -> bool:
        return True

    def restored(self) -> None:
        """After a snapshot load: streams saved before summaries were kept as text get an empty map; those saved
        before the router took vectors keep their line vectors in ``known``."""
        for s in self._streams.values():
            if not hasattr(s, "summaries"):
                s.summaries = {}
            if not hasattr(s, "scopes"):  # saved before scopes: its turns belong to no agent and no run
                s.scopes = {}
            if not hasattr(s, "known"):  # saved while the router embedded through a lookup of the passed vectors
                s.known = vars(s).pop("encoder").known
                vars(s.router).pop("encoder", None)

    def warm(self) -> None:
        """Load what the first write would otherwise wait for (the tokenizer behind ``count_tokens``)."""
        self.count_tokens("warm up")

    def tenants(self) -> list[str]:
        return sorted(self._streams)

    def _stream(self, tenant: str, create: bool = False) -> _Stream | None:
        s = self._streams.get(tenant)
        if s is None and create:
            ep = self.config.episodic
            s = self._streams[tenant] = _Stream(
                Segmenter(ep.segment_tokens, ep.overlap_ratio, self.count_tokens),
                EpisodicRouter(self.dim, self.config.router),
                deque(maxlen=max(self.config.admission.max_turns - 1, 1)),
            )
        return s

    def context(self, tenant: str) -> list[np.ndarray]:
        """Vectors of the stream's last ``admission.max_turns - 1`` turns, oldest first."""
        s = self._stream(tenant)
        return [] if s is None else list(s.recent)

    def append(
        self, tenant: str, turns: Sequence[TurnRecord], vectors: np.ndarray, admitted: Sequence[bool]
    ) -> list[Segment]:
        """Add a batch of turns in order; admitted ones enter the segments. Returns every closed segment not yet
        confirmed by :meth:`delivered` (those this batch closed, and any an earlier write failed to deliver).

        A turn id seen before is skipped, so a client may resend a batch whose acknowledgement it did not get
        (the stream keeps a turn's first version; the tier shard keeps its latest)."""
        s = self._stream(tenant, create=True)
        closed: list[Segment] = []
        for turn, vec, keep in zip(turns, vectors, admitted, strict=True):
            if turn.turn_id in s.seen:  # NOTE: a client retrying a write that failed half-way (idempotent)
                continue
            s.seen.add(turn.turn_id)
            s.recent.append(np.asarray(vec, np.float32))
            if keep:
                s.known[turn.line] = np.asarray(vec, np.float32)
                closed.extend(s.segmenter.add(turn))
                agent, run = getattr(turn, "agent_id", None), getattr(turn, "run_id", None)
                if agent is not None or run is not None:
                    s.scopes[turn.turn_id] = (agent, run)
        if closed:
            s.router.add(closed, _chunk_vectors(s.router, s.known, closed))
            for seg in closed:
                s.meta[seg.id] = (seg.start, seg.end, list(seg.turn_ids))
                s.pending[seg.id] = seg
            # NOTE: keep vectors only for lines a future segment can still hold: the open one and the carry
            # (the carry is a tail of the last closed segment).
            still = set(closed[-1].lines)
            if (cur := s.segmenter.current()) is not None:
                still.update(cur.lines)
            s.known = {line: v for line, v in s.known.items() if line in still}
        return list(s.pending.values())

    def route(self, tenant: str, question: str, vector: np.ndarray, scope: Scope | None = None) -> RouteResult:
        """The segments to read for a question; with a ``scope`` only segments that hold a turn of it, and
        ``allowed`` names the routed turns inside it (the open segment comes back with those only)."""
        s = self._stream(tenant)
        if s is None:
            return RouteResult([], {})
        inside: set[str] | None = None
        eligible: set[int] | None = None
        if scope is not None and not scope.empty:
            inside = {t for t, (agent, run) in s.scopes.items() if scope.contains(agent, run)}
            eligible = {sid for sid, (_, _, turn_ids) in s.meta.items() if not inside.isdisjoint(turn_ids)}
        activations = s.router.route(question, np.asarray(vector, np.float32), eligible)
        meta = {a.segment_id: _routed_lines(s.meta[a.segment_id], a.lines) for a in activations}
        open_seg = s.segmenter.current() if self.config.router.include_newest else None
        if open_seg is not None and inside is not None:
            open_seg.drop_turns(set(open_seg.turn_ids) - inside)
        allowed = None
        if inside is not None or any(a.lines for a in activations):
            routed = [t for _, _, turn_ids in meta.values() for t in turn_ids]
            routed += open_seg.turn_ids if open_seg is not None else []
            allowed = frozenset(t for t in routed if inside is None or t in inside)
        return RouteResult(activations, meta, open_seg if open_seg and open_seg.lines else None, allowed,
                           s.router.term_idf(question))

    def in_scope(self, tenant: str, scope: Scope) -> list[str]:
        """Ids of the tenant's turns in the stream's segments written in ``scope``, in the order they arrived."""
        s = self._stream(tenant)
        return [] if s is None else [t for t, (agent, run) in s.scopes.items() if scope.contains(agent, run)]

    def delivered(self, tenant: str, segment_ids: Sequence[int]) -> int:
        """The assistants hold these segments now: stop handing them out. Returns how many were pending."""
        s = self._stream(tenant)
        if s is None:
            return 0
        return sum(s.pending.pop(sid, None) is not None for sid in segment_ids)

    def segment_ids(self, tenant: str) -> list[int]:
        """Ids of the tenant's closed segments, oldest first."""
        s = self._stream(tenant)
        return [] if s is None else list(s.meta)

    def turn_ids(self, tenant: str) -> set[str]:
        """Every turn id in the tenant's segments (closed and open)."""
        s = self._stream(tenant)
        if s is None:
            return set()
        ids = {t for _, _, turn_ids in s.meta.values() for t in turn_ids}
        return ids | set(cur.turn_ids) if (cur := s.segmenter.current()) is not None else ids

    def set_summary(self, tenant: str, segment_id: int, summary: str, vector: np.ndarray) -> bool:
        """Attach a segment's summary (router's global path); False if the tenant or segment is gone."""
        s = self._stream(tenant)
        if s is None or segment_id not in s.meta:
            return False
        s.router.set_summary(segment_id, summary, np.asarray(vector, np.float32) if summary else None)
        s.summaries[segment_id] = summary
        return True

    def export_tenant(self, tenant: str) -> StreamState | None:
        """The tenant's stream with the vectors behind every index (``cores/tenant_export.py``); None if none.
        Closed segments are the router's copies: the export takes their lines from the assistants."""
        s = self._stream(tenant)
        if s is None:
            return None
        closed = []
        for sid in s.router.segment_ids:
            turn_ids = s.meta[sid][2]
            vecs, summary_vec = s.router.vectors_of(sid)
            seg = s.pending.get(sid) or Segment(sid, [], [], [], [])  # NOTE: the assistants hold its lines
            closed.append(SegmentState(seg, dict(zip(turn_ids, vecs, strict=True)), s.summaries.get(sid),
                                       summary_vec))
        cur = s.segmenter.current()
        opened = None if cur is None else SegmentState(cur, {t: s.known[line] for t, line in
                                                             zip(cur.turn_ids, cur.lines, strict=True)})
        carry = [TurnVector(c.turn_id, c.line, c.timestamp, c.tokens, s.known[c.line])
                 for c in s.segmenter.carry]
        return StreamState(s.segmenter.next_id, sorted(s.seen), list(s.recent), closed, opened, carry,
                           dict(s.scopes))

    def import_tenant(self, tenant: str, state: StreamState) -> int:
        """Rebuild the tenant's stream from an export; it must have none (else ValueError). Returns the
        number of segments indexed. The closed segments go to the assistants separately (by the caller)."""
        if tenant in self._streams:
            raise ValueError(f"tenant {tenant!r} already has an episodic stream")
        s = self._stream(tenant, create=True)
        try:
            s.seen.update(state.seen)
            s.scopes.update(state.scopes)
            s.recent.extend(np.asarray(v, np.float32) for v in state.context)
            for st in state.closed:
                seg = replace(st.segment, summary=None)
                lines = dict(zip(seg.lines, (st.vectors[t] for t in seg.turn_ids), strict=True))
                s.router.add([seg], _chunk_vectors(s.router, lines, [seg]))
                s.meta[seg.id] = (seg.start, seg.end, list(seg.turn_ids))
                if st.summary:
                    s.router.set_summary(seg.id, st.summary, np.asarray(st.summary_vector, np.float32))
                    s.summaries[seg.id] = st.summary
            if state.open is not None:
                seg = state.open.segment
                s.known.update(zip(seg.lines, (state.open.vectors[t] for t in seg.turn_ids), strict=True))
            s.known.update((c.line, np.asarray(c.vector, np.float32)) for c in state.carry)
            s.segmenter.restore(state.next_segment_id, None if state.open is None else state.open.segment,
                                [(c.turn_id, c.line, c.timestamp, c.tokens) for c in state.carry])
        except Exception:
            del self._streams[tenant]
            raise
        return len(state.closed) + (state.open is not None)

    def forget(self, tenant: str, turn_ids: Sequence[str], segments: Sequence[Segment] = ()) -> int:
        """Drop turns from the open segment, the pending overlap and closed segments not yet delivered; and
        re-index the closed ``segments`` (the assistants' copies after their own forget, see
        :meth:`TenantAssistants.forget`) without the lines they lost — their summaries go too. Returns how
        many lines left the stream's segments and indexes."""
        s = self._stream(tenant)
        if s is None:
            return 0
        drop = set(turn_ids)
        removed = s.segmenter.forget(drop) + sum(seg.drop_turns(drop) for seg in s.pending.values())
        for t in drop:
            s.scopes.pop(t, None)
        for seg in segments:
            if seg.id not in s.meta:
                continue
            held = set(seg.turn_ids)
            keep = [t in held for t in s.meta[seg.id][2]]
            if all(keep):
                continue
            s.router.shrink(seg.id, keep, seg.text)
            removed += keep.count(False)
            s.summaries.pop(seg.id, None)
            if seg.turn_ids:
                s.meta[seg.id] = (seg.start, seg.end, list(seg.turn_ids))
            else:
                del s.meta[seg.id]
        return removed

    def drop_tenant(self, tenant: str) -> int:
        """Forget the tenant's stream; returns how many segments it had (the open one included)."""
        s = self._streams.pop(tenant, None)
        if s is None:
            return 0
        return len(s.router) + (1 if s.segmenter.current() is not None else 0)
