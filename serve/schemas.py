"""Request and response bodies of the HTTP API (``/v1``), validated at the edge.

A *tenant* is a ``user_id``: every memory, segment and index entry belongs to exactly one.
``agent_id`` and ``session_id`` are kept with each turn as metadata. Turn ids are unique within a
tenant (the client's, e.g. LoCoMo's ``D1:3``, or a generated one); adding an id again replaces it.
The bounds below are the API's limits; a request beyond them gets a 422 that names the field.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

MAX_TURN_CHARS = 8_000
MAX_BATCH = 256
MAX_QUERY_CHARS = 2_000
MAX_K = 100
MAX_IMPORT_BYTES = 256 * 1024 * 1024  # one JSON Lines upload (vectors included: ~8 KB per memory or turn)

Identifier = Annotated[
    str, StringConstraints(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9._:@/+-]+$")
]
TurnText = Annotated[str, StringConstraints(min_length=1, max_length=MAX_TURN_CHARS)]
QueryText = Annotated[str, StringConstraints(min_length=1, max_length=MAX_QUERY_CHARS)]


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class TurnIn(_Body):
    id: Identifier | None = Field(None, description="Turn id, unique within the user (generated when absent).")
    speaker: Annotated[str, StringConstraints(min_length=1, max_length=128)] = Field(
        description="Who said it (a name, or 'user' / 'assistant')."
    )
    text: TurnText = Field(description="What was said, verbatim.")
    timestamp: datetime | None = Field(None, description="When it was said (ISO 8601; default: now, UTC).")
    date_time: Annotated[str, StringConstraints(max_length=64)] | None = Field(
        None, description="The time as the models see it, e.g. '1:56 pm on 8 May, 2023' (default: from timestamp)."
    )


class AddTurnsRequest(_Body):
    user_id: Identifier
    agent_id: Identifier | None = None
    session_id: Identifier | None = None
    turns: list[TurnIn] = Field(min_length=1, max_length=MAX_BATCH, description="Turns in the order they were said.")


class TurnResult(_Body):
    id: str
    admitted: bool = Field(description="Stored (ADD) or not (NOOP).")
    type: str = Field(description="Content type: fact, preference, plan, emotion, event or other.")
    p_add: float | None = Field(None, description="The classifier's probability of ADD (null in store_all mode).")
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


class SearchRequest(_Body):
    user_id: Identifier
    query: QueryText
    k: int = Field(5, ge=1, le=MAX_K)


class MemoryHit(_Body):
    id: str
    text: str
    score: float
    similarity: float
    tier: Literal["l1", "l2"]
    path: Literal["l1", "gate"] = Field(description="'l1': found in the working tier; 'gate': by the fall-back to L2.")
    importance: float
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
    category: int | None = Field(
        None, ge=1, le=5, description="LoCoMo category hint (2 = temporal, 5 = adversarial); without one the master "
        "reads the question's kind from its words (temporal, inference, list or other)."
    )


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
    created_at: float
    metadata: dict[str, Any] = Field(default_factory=dict)


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
