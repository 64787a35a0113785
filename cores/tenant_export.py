"""A tenant's memory as JSON Lines: what ``GET /v1/users/{id}/export`` writes and ``.../import`` reads.

One JSON object per line, in this order::

    {"kind": "header", "format": "engram-export", "version": 1, "user_id": ..., "dim": 384, "memories": 2, ...}
    {"kind": "memory", "id", "text", "tier", "importance", "usage", "last_access", "created_at", "metadata", "vector"}
    {"kind": "segment", "id", "state": "closed" | "open", "overlap", "summary", "summary_vector", "turns": [...]}
    {"kind": "stream", "next_segment_id", "seen", "context", "carry": [...]}

A turn inside a segment is ``{"id", "line", "timestamp", "tokens", "vector"}`` (the rendered line the
models read, and the embedding the router indexed). Vectors travel as JSON numbers: a float32 widened to
a float64 prints and parses back to the same float32, so an import rebuilds every index bit for bit and
``export(import(export(u))) == export(u)`` line for line (the header's ``user_id`` aside when importing
under another id). Memories are listed tier by tier in the order they entered it (the eviction
tie-break); segments oldest first. Usage counters travel too, so eviction continues as it would have.

Plain module (no Ray): the tier shard, router and assistant cores produce and take the parts,
the ingress joins them (:func:`export_lines`) and splits an upload (:func:`parse_import`).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from memory.segmenter import Segment
from memory.tier import MemoryItem

FORMAT = "engram-export"
VERSION = 1


# -- what the cores hand over -------------------------------------------------------------------------
@dataclass
class TurnVector:
    turn_id: str
    line: str
    timestamp: datetime
    tokens: int
    vector: np.ndarray


@dataclass
class SegmentState:
    """A segment with the vectors the router holds for its lines (by turn id) and its summary."""

    segment: Segment
    vectors: dict[str, np.ndarray]
    summary: str | None = None
    summary_vector: np.ndarray | None = None


@dataclass
class StreamState:
    """Everything of one tenant's episodic stream except what only the assistants hold."""

    next_segment_id: int = 0
    seen: list[str] = field(default_factory=list)
    context: list[np.ndarray] = field(default_factory=list)
    closed: list[SegmentState] = field(default_factory=list)  # oldest first; segments as the router has them
    open: SegmentState | None = None
    carry: list[TurnVector] = field(default_factory=list)
    scopes: dict[str, tuple[str | None, str | None]] = field(default_factory=dict)  # turn id -> (agent, run)


# -- the records -------------------------------------------------------------------------------------
class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid")


class TurnOut(_Record):
    id: str = Field(min_length=1)
    line: str
    timestamp: datetime
    tokens: int = Field(ge=0)
    vector: list[float]


class HeaderRecord(_Record):
    kind: Literal["header"]
    format: Literal["engram-export"]
    version: Literal[1]
    user_id: str
    dim: int = Field(ge=1)
    memories: int = Field(ge=0)
    segments: int = Field(ge=0)


class MemoryRecord(_Record):
    kind: Literal["memory"]
    id: str = Field(min_length=1)
    text: str
    tier: Literal["l1", "l2"]
    importance: float
    usage: int = Field(ge=0)
    last_access: int = Field(ge=0)
    created_at: float | None
    metadata: dict[str, Any] | None
    vector: list[float]


class SegmentRecord(_Record):
    kind: Literal["segment"]
    id: int = Field(ge=0)
    state: Literal["closed", "open"]
    overlap: int = Field(ge=0)
    summary: str | None
    summary_vector: list[float] | None
    turns: list[TurnOut]


class StreamRecord(_Record):
    kind: Literal["stream"]
    next_segment_id: int = Field(ge=0)
    seen: list[str]
    context: list[list[float]]
    carry: list[TurnOut]
    scopes: dict[str, tuple[str | None, str | None]] = Field(
        default_factory=dict, description="turn id -> [agent_id, run_id] for turns written in a scope")


Record = Annotated[HeaderRecord | MemoryRecord | SegmentRecord | StreamRecord, Field(discriminator="kind")]
RECORD: TypeAdapter[Record] = TypeAdapter(Record)


class InvalidExport(ValueError):
    """An upload that is not a valid export (the message names the line)."""


def _vec(v: np.ndarray | None) -> list[float] | None:
    return None if v is None else np.asarray(v, np.float32).astype(np.float64).tolist()


def _arr(v: Sequence[float] | None) -> np.ndarray | None:
    return None if v is None else np.asarray(v, dtype=np.float32)


def _turn(t: TurnVector) -> TurnOut:
    return TurnOut(id=t.turn_id, line=t.line, timestamp=t.timestamp, tokens=t.tokens, vector=_vec(t.vector))


def _turn_in(t: TurnOut) -> TurnVector:
    return TurnVector(t.id, t.line, t.timestamp, t.tokens, _arr(t.vector))


def memory_record(tier: str, item: MemoryItem) -> dict[str, Any]:
    """One tier item as an export record (a plain dict: it crosses a process boundary)."""
    return MemoryRecord(
        kind="memory", id=str(item.id), text=item.text, tier=tier, importance=float(item.importance),
        usage=int(item.usage), last_access=int(item.last_access), created_at=item.created_at,
        metadata=item.metadata, vector=_vec(item.vector),
    ).model_dump(mode="json")


def memory_item(record: dict[str, Any]) -> tuple[str, MemoryItem]:
    r = MemoryRecord.model_validate(record)
    return r.tier, MemoryItem(id=r.id, text=r.text, vector=_arr(r.vector), importance=r.importance, usage=r.usage,
                              last_access=r.last_access, created_at=r.created_at, metadata=r.metadata)


# -- export ------------------------------------------------------------------------------------------
def _segment_record(state: SegmentState, held: Segment | None, kind: Literal["closed", "open"]) -> SegmentRecord:
    """The assistants' copy of a closed segment is the truth for its lines (a deleted memory's line left it)."""
    seg = held if held is not None else state.segment
    turns = [TurnVector(tid, line, ts, tokens, state.vectors[tid])
             for tid, line, ts, tokens in zip(seg.turn_ids, seg.lines, seg.timestamps, seg.token_counts, strict=True)]
    summary = state.summary if state.summary is not None else seg.summary
    return SegmentRecord(kind="segment", id=seg.id, state=kind, overlap=seg.overlap, summary=summary,
                         summary_vector=_vec(state.summary_vector) if summary else None,
                         turns=[_turn(t) for t in turns])


def export_lines(user_id: str, dim: int, memories: Sequence[dict[str, Any]], stream: StreamState | None,
                 held: dict[int, Segment]) -> Iterator[str]:
    """The export, one JSON line at a time. ``held``: the assistants' segments of the tenant by id."""
    segments: list[SegmentRecord] = []
    if stream is not None:
        for st in stream.closed:
            rec = _segment_record(st, held.get(st.segment.id), "closed")
            if rec.turns:  # NOTE: a segment whose every line was deleted holds nothing to export
                segments.append(rec)
        if stream.open is not None:
            segments.append(_segment_record(stream.open, None, "open"))
    header = HeaderRecord(kind="header", format=FORMAT, version=VERSION, user_id=user_id, dim=dim,
                          memories=len(memories), segments=len(segments))
    yield header.model_dump_json()
    for m in memories:
        yield MemoryRecord.model_validate(m).model_dump_json()
    for rec in segments:
        yield rec.model_dump_json()
    if stream is not None:
        yield StreamRecord(kind="stream", next_segment_id=stream.next_segment_id, seen=stream.seen,
                           context=[_vec(v) for v in stream.context],
                           carry=[_turn(t) for t in stream.carry], scopes=stream.scopes).model_dump_json()


# -- import ------------------------------------------------------------------------------------------
@dataclass
class ImportPlan:
    """An upload, checked and split by destination."""

    header: HeaderRecord
    memories: list[dict[str, Any]]  # to the tier shard
    segments: list[Segment]  # closed ones, to their assistant actors
    stream: StreamState | None  # to the router


def _segment(rec: SegmentRecord) -> SegmentState:
    seg = Segment(rec.id, [t.id for t in rec.turns], [t.line for t in rec.turns], [t.timestamp for t in rec.turns],
                  [t.tokens for t in rec.turns], rec.overlap, rec.summary)
    return SegmentState(seg, {t.id: _arr(t.vector) for t in rec.turns}, rec.summary, _arr(rec.summary_vector))


def parse_import(lines: Iterable[str | bytes], dim: int) -> ImportPlan:
    """Validate every line (kinds, order, vector sizes, counts) before anything is written."""
    header: HeaderRecord | None = None
    memories: list[dict[str, Any]] = []
    closed: list[SegmentState] = []
    open_seg: SegmentState | None = None
    stream: StreamRecord | None = None
    for n, raw in enumerate(lines, 1):
        text = raw.decode("utf-8") if isinstance(raw, bytes) else raw
        if not text.strip():
            continue
        try:
            rec = RECORD.validate_json(text)
        except ValidationError as e:
            err = e.errors()[0]
            where = ".".join(str(p) for p in err.get("loc", ()))
            raise InvalidExport(f"line {n}: {where + ': ' if where else ''}{err.get('msg')}") from None
        if header is None and not isinstance(rec, HeaderRecord):
            raise InvalidExport(f"line {n}: the first record must be the header (kind 'header')")
        if stream is not None:
            raise InvalidExport(f"line {n}: nothing may follow the stream record")
        bad = _wrong_dims(rec, dim)
        if bad:
            raise InvalidExport(f"line {n}: {bad} (this service embeds into {dim} dimensions)")
        if isinstance(rec, HeaderRecord):
            if header is not None:
                raise InvalidExport(f"line {n}: a second header")
            header = rec
        elif isinstance(rec, MemoryRecord):
            memories.append(rec.model_dump(mode="json"))
        elif isinstance(rec, SegmentRecord):
            if open_seg is not None:
                raise InvalidExport(f"line {n}: segment {rec.id} follows the open segment")
            if closed and rec.id <= closed[-1].segment.id:
                raise InvalidExport(f"line {n}: segment ids must increase ({rec.id} after {closed[-1].segment.id})")
            if not rec.turns:
                raise InvalidExport(f"line {n}: segment {rec.id} has no turns")
            state = _segment(rec)
            if rec.state == "open":
                open_seg = state
            else:
                closed.append(state)
        else:
            stream = rec
    if header is None:
        raise InvalidExport("empty upload: expected an export (a header line first)")
    if header.dim != dim:
        raise InvalidExport(f"the export holds {header.dim}-dimensional vectors; this service embeds into {dim}")
    found = len(closed) + (open_seg is not None)
    if len(memories) != header.memories or found != header.segments:
        raise InvalidExport(f"truncated or padded upload: the header announces {header.memories} memories and "
                           f"{header.segments} segments, the lines hold {len(memories)} and {found}")
    if len({m["id"] for m in memories}) != len(memories):
        raise InvalidExport("a memory id appears twice")
    if (closed or open_seg) and stream is None:
        raise InvalidExport("segments without the stream record (the last line of an export)")
    state = None
    if stream is not None:
        top = max([s.segment.id for s in closed] + ([open_seg.segment.id] if open_seg else []), default=-1)
        if stream.next_segment_id <= top:
            raise InvalidExport(f"stream.next_segment_id {stream.next_segment_id} must exceed every segment id ({top})")
        state = StreamState(stream.next_segment_id, list(stream.seen), [_arr(v) for v in stream.context], closed,
                            open_seg, [_turn_in(t) for t in stream.carry], dict(stream.scopes))
    return ImportPlan(header, memories, [s.segment for s in closed], state)


def _wrong_dims(rec: Any, dim: int) -> str | None:
    vectors: list[tuple[str, list[float] | None]] = []
    if isinstance(rec, MemoryRecord):
        vectors.append((f"memory {rec.id!r} vector", rec.vector))
    elif isinstance(rec, SegmentRecord):
        vectors.append((f"segment {rec.id} summary_vector", rec.summary_vector))
        vectors += [(f"segment {rec.id} turn {t.id!r} vector", t.vector) for t in rec.turns]
    elif isinstance(rec, StreamRecord):
        vectors += [("stream context vector", v) for v in rec.context]
        vectors += [(f"stream carry turn {t.id!r} vector", t.vector) for t in rec.carry]
    for name, v in vectors:
        if v is not None and len(v) != dim:
            return f"{name} has {len(v)} numbers"
        if v is not None and not all(np.isfinite(v)):
            return f"{name} holds a non-finite number"
    return None
