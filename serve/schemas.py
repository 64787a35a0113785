"""Request and response bodies of the HTTP API (``/v1``), validated at the edge.

A *tenant* is a ``user_id``: every memory, segment and index entry belongs to exactly one. Inside it,
``agent_id`` and ``run_id`` are scopes (``memory/scope.py``): a write names them, and search, ask, list and
delete can be limited to them. ``session_id`` is kept with each memory as metadata only. Turn ids are unique
within a tenant (the client's, e.g. ``D1:3``, or a generated one); adding an id again replaces it.
The bounds below are the API's limits; a request beyond them gets a 422 that names the field.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, field_validator, model_validator

from inference.question_kind import QuestionKind
from memory.scope import RESERVED_KEYS

MAX_TURN_CHARS = 8_000
MAX_BATCH = 256
MAX_QUERY_CHARS = 2_000
MAX_K = 100
MAX_IMPORT_BYTES = 256 * 1024 * 1024  # one JSON Lines upload (vectors included: as JSON numbers, far more than text)
MAX_METADATA_KEYS = 32

Identifier = Annotated[
    str, StringConstraints(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9._:@/+-]+$")
]
TurnText = Annotated[str, StringConstraints(min_length=1, max_length=MAX_TURN_CHARS)]
QueryText = Annotated[str, StringConstraints(min_length=1, max_length=MAX_QUERY_CHARS)]
MetaKey = Annotated[str, StringConstraints(min_length=1, max_length=64, pattern=r"^[A-Za-z_][A-Za-z0-9_.-]*$")]
MetaValue = Annotated[str, StringConstraints(max_length=512)] | bool | int | float
Metadata = Annotated[dict[MetaKey, MetaValue], Field(max_length=MAX_METADATA_KEYS)]


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class TurnIn(_Body):
    id: Identifier | None = Field(None, description="Turn id, unique within the user (generated when absent).")
    speaker: Annotated[str, StringConstraints(min_length=1, max_length=128)] = Field(
        description="Who said it (a name, or 'user' / 'assistant')."
    )
    text: TurnText = Field(description="What was said, verbatim.")
    timestamp: datetime | None = Field(
        None, description="When it was said, its event time (ISO 8601; default: now, UTC). An import of an old "
        "conversation passes the original times: dates, time filters and answers follow them.")
    date_time: Annotated[str, StringConstraints(max_length=64)] | None = Field(
        None, description="The time as the models see it, e.g. '1:56 pm on 8 May, 2023' (default: from timestamp)."
    )


def _writer_keys(metadata: dict[str, Any] | None) -> dict[str, Any] | None:
    taken = sorted(set(metadata or ()) & RESERVED_KEYS)
    if taken:
        raise ValueError(f"metadata keys {', '.join(taken)} are the service's own; use other names")
    return metadata


class AddTurnsRequest(_Body):
    user_id: Identifier
    agent_id: Identifier | None = Field(None, description="Scope: the agent that took part.")
    run_id: Identifier | None = Field(None, description="Scope: the run (session, task, thread) the turns belong to.")
    session_id: Identifier | None = Field(None, description="Kept with each memory as metadata (not a scope).")
    metadata: Metadata | None = Field(None, description="Your own keys, kept on every memory these turns become "
                                      "(filterable in search and list).")
    turns: list[TurnIn] = Field(min_length=1, max_length=MAX_BATCH, description="Turns in the order they were said.")

    _metadata = field_validator("metadata")(_writer_keys)


class TurnResult(_Body):
    id: str
    admitted: bool = Field(description="Stored (ADD) or not (NOOP).")
    type: str = Field(description="Content type: fact, preference, plan, emotion, event or other.")
    p_add: float | None = Field(
        None, description="The classifier's probability of ADD (null unless admission.mode is classifier)."
    )
    duplicate_of: str | None = Field(
        None, description="Not stored because the same speaker's memory with this id already says it (dedup)."
    )
    supersedes: str | None = Field(
        None, description="Stored as an update of this older memory (same speaker, a changed fact); the older "
        "one is kept, marked superseded_by.",
    )


class AddTurnsResponse(_Body):
    user_id: str
    results: list[TurnResult]
    admitted: int
    segments_closed: int = Field(description="Episodic segments this batch completed.")
    evicted: int = Field(description="Memories this batch pushed out of the last tier.")


class Filters(_Body):
    """What a memory must match beyond its scope: metadata equality and an event-time range."""

    metadata: Metadata = Field(default_factory=dict, description="Equality on metadata keys: yours and the "
                               "service's (speaker, type, session_id).")
    since: datetime | None = Field(None, description="Event time at or after (ISO 8601).")
    until: datetime | None = Field(None, description="Event time before (ISO 8601).")

    @model_validator(mode="after")
    def _ordered(self) -> Filters:
        if self.since is not None and self.until is not None and _utc(self.since) >= _utc(self.until):
            raise ValueError("filters.since must be before filters.until")
        return self


def _utc(ts: datetime) -> datetime:
    return ts.replace(tzinfo=UTC) if ts.tzinfo is None else ts


class SearchRequest(_Body):
    user_id: Identifier
    query: QueryText
    k: int = Field(5, ge=1, le=MAX_K)
    agent_id: Identifier | None = Field(None, description="Only memories (and segments) of this agent.")
    run_id: Identifier | None = Field(None, description="Only memories (and segments) of this run.")
    filters: Filters | None = None
    threshold: float | None = Field(None, ge=-10.0, le=10.0, description="Only memories that score at least this "
                                    "(the ranking's score: similarity³ + entity and importance terms).")


class MemoryHit(_Body):
    id: str
    text: str
    score: float
    similarity: float
    tier: Literal["l1", "l2"]
    path: Literal["l1", "gate"] = Field(description="'l1': found in the working tier; 'gate': by the fall-back to L2.")
    importance: float
    agent_id: str | None = None
    run_id: str | None = None
    event_time: datetime | None = Field(None, description="When the turn behind it was said.")
    metadata: dict[str, Any] = Field(default_factory=dict)


class SegmentHit(_Body):
    segment_id: int
    paths: list[str] = Field(description="Activation paths that picked it: global (summary), vec (dense), kw (BM25).")
    score: float
    start: datetime | None = None
    end: datetime | None = None
    turn_ids: list[str] = Field(default_factory=list)


class SearchResponse(_Body):
    user_id: str
    memories: list[MemoryHit]
    segments: list[SegmentHit]


class AskRequest(_Body):
    user_id: Identifier
    question: QueryText
    kind: QuestionKind | None = Field(
        None, description="How to answer: list (several things), temporal (a date), inference (a likely yes/no or "
        "a guess) or fact (a short phrase). Without it the master reads the kind from the question's words."
    )
    agent_id: Identifier | None = Field(None, description="Answer from this agent's turns only.")
    run_id: Identifier | None = Field(None, description="Answer from this run's turns only.")


class EvidenceOut(_Body):
    turn_id: str
    content: str
    timestamp: datetime
    segment_id: int


class TokenCount(_Body):
    prompt: int = 0
    completion: int = 0
    total: int = 0


class TokenBillOut(_Body):
    assistants: TokenCount
    master: TokenCount
    total: int


class AskResponse(_Body):
    user_id: str
    answer: str
    evidence: list[EvidenceOut]
    segments: list[SegmentHit]
    tokens: TokenBillOut


class Memory(_Body):
    id: str
    text: str
    tier: Literal["l1", "l2"]
    importance: float
    type: str | None = None
    agent_id: str | None = None
    run_id: str | None = None
    event_time: datetime | None = Field(None, description="When the turn behind it was said.")
    created_at: float = Field(description="When it was stored (Unix seconds).")
    updated_at: float | None = Field(None, description="When its text last changed (PUT), Unix seconds.")
    metadata: dict[str, Any] = Field(default_factory=dict)


class UpdateMemoryRequest(_Body):
    user_id: Identifier
    text: TurnText = Field(description="The memory's new text (embedded again; the old text stays in its history).")
    metadata: Metadata | None = Field(None, description="Keys to set on the memory (yours, not the service's).")

    _metadata = field_validator("metadata")(_writer_keys)


class MemoryVersion(_Body):
    version: int = Field(description="1 for the text as first stored.")
    text: str
    at: datetime = Field(description="When this version was written.")
    event: Literal["ADD", "UPDATE"]


class MemoryHistory(_Body):
    user_id: str
    memory_id: str
    versions: list[MemoryVersion] = Field(description="Oldest first; the last is the memory's text now.")
    supersedes: str | None = Field(None, description="The older memory this one updated (write-side dedup).")
    superseded_by: str | None = Field(None, description="The newer memory that updated this one.")


class MemoryList(_Body):
    user_id: str
    memories: list[Memory]
    total: int
    offset: int
    limit: int


class Deleted(_Body):
    user_id: str
    memories: int = Field(description="Memories removed from the tiers.")
    turns: int = Field(0, description="Raw turns removed from episodic segments.")


class Imported(_Body):
    user_id: str
    memories: int = Field(description="Memories stored in the tiers.")
    segments: int = Field(description="Episodic segments restored (the open one included).")


class Health(_Body):
    status: Literal["ok", "degraded"]
    actors: dict[str, bool]
    version: str
    background: int = Field(0, description="Background jobs (segment summaries) still running in this replica.")


class ErrorDetail(_Body):
    message: str
    type: str
    param: str | None = None
    code: str | None = None


class ErrorBody(_Body):
    error: ErrorDetail
