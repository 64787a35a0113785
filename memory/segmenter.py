"""Sliding-window segmenter for the episodic layer (E-mem).

A turn stream is cut into segments of at most ``max_tokens`` tokens. When a segment
closes, its trailing turns whose tokens add up to at most ``overlap_ratio * max_tokens``
(counted greedily from the end, stopping at the first turn that does not fit) are
replayed at the start of the next segment. E-mem's reference: blocks of 4,096 tokens,
overlap ratio 0.1 (≤ 409 tokens), whole turns ("chunk" mode); callers pass the config's
``episodic.segment_tokens`` and ``episodic.overlap_ratio`` (no defaults here). As in E-mem, only a
segment's own new turns are candidates for replay, never turns it replayed itself.

Each turn is rendered ``[{date_time}] {speaker}: {text}`` and keeps its turn id.

Capacity rules (``allow_overflow=False``, the default, the paper's "blocks of 4,096
tokens"):

- a turn that does not fit closes the open segment; it starts the next one after the
  replayed overlap (overlap turns are dropped from the front if it does not fit behind
  all of them);
- a segment that reaches ``max_tokens`` exactly closes at once;
- a turn longer than ``max_tokens`` on its own becomes a segment by itself (no overlap
  before it, and it is too long to be replayed after it): the text is kept raw, never cut.

With ``allow_overflow=True`` the segment takes the turn that crosses the limit and then
closes, as E-mem's code does (``block_used >= block_size`` after the add), so a segment can
exceed ``max_tokens`` by up to one turn.

Batch segmentation (:func:`segment_turns`) is the incremental path run to the end, so the
two agree by construction.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import date, datetime
from typing import NamedTuple, Protocol

from memory.time_expressions import ground

__all__ = [
    "CHARS_PER_TOKEN",
    "Segment",
    "Segmenter",
    "TurnLike",
    "estimate_tokens",
    "render_turn",
    "segment_turns",
]

CHARS_PER_TOKEN = 4  # Rule-of-thumb characters per BPE token for English text.

TokenCounter = Callable[[str], int]


class _Item(NamedTuple):
    turn_id: str
    line: str
    timestamp: datetime
    tokens: int


class TurnLike(Protocol):
    """What the segmenter reads from a turn (``corpora.locomo.Turn`` fits)."""

    @property
    def turn_id(self) -> str: ...
    @property
    def speaker(self) -> str: ...
    @property
    def text(self) -> str: ...
    @property
    def date_time(self) -> str: ...
    @property
    def timestamp(self) -> datetime: ...


def render_turn(turn: TurnLike, anchor: date | None = None) -> str:
    """``[{date_time}] {speaker}: {text}``, e.g. ``[1:56 pm on 8 May, 2023] Caroline: Hi!``; a turn with an
    ``anchor`` (its local date; ``cores.tenant_episodes.TurnRecord`` when ``episodic.ground_dates``, or the
    argument) has its relative dates grounded: ``... yesterday [7 May 2023] ...``."""
    anchor = anchor or getattr(turn, "anchor", None)
    text = ground(turn.text, anchor) if anchor is not None else turn.text
    return f"[{turn.date_time}] {turn.speaker}: {text}"


_RENDERED = re.compile(r"^\[[^\]]*\] ([^:\n]+): ")
_HEADER = re.compile(r"^\[([^\]]*)\]\s*")


def split_header(line: str) -> tuple[str | None, str]:
    """A line :func:`render_turn` wrote -> (its header's date_time, the rest); ``(None, line)`` for another line.

    >>> split_header("[1:56 pm on 8 May, 2023] Caroline: Hi!")
    ('1:56 pm on 8 May, 2023', 'Caroline: Hi!')
    """
    m = _HEADER.match(line)
    return (m.group(1), line[m.end():]) if m else (None, line)


def line_speaker(line: str) -> str | None:
    """The speaker of a line :func:`render_turn` wrote, else None.

    >>> line_speaker("[1:56 pm on 8 May, 2023] Caroline: Hi!")
    'Caroline'
    """
    m = _RENDERED.match(line)
    return m.group(1) if m else None


def named_speaker(question: str, speakers: Iterable[str]) -> str | None:
    """The one of ``speakers`` whose first name is a word of the question, else None (none or several named).

    >>> named_speaker("What did Caroline research?", ["Caroline", "Melanie"])
    'Caroline'
    """
    words = set(re.findall(r"\w+", question.lower()))
    hits = {s for s in speakers if s.split() and s.split()[0].lower() in words}
    return hits.pop() if len(hits) == 1 else None


def estimate_tokens(text: str) -> int:
    """Rough token count without a tokenizer: ``max(words, ceil(chars / 4))``.

    An estimate of BPE tokens for English text, not exact; pass a real tokenizer's counter
    where budgets must be exact. ``estimate_tokens("hello world") == 3`` (11 chars).
    """
    return max(len(text.split()), math.ceil(len(text) / CHARS_PER_TOKEN))


@dataclass
class Segment:
    """One episodic segment: raw rendered turns plus a routing summary filled in later.

    ``overlap`` is the number of leading turns replayed from the previous segment;
    ``start``/``end`` are the first and last turn's timestamps (stream order).
    """

    id: int
    turn_ids: list[str]
    lines: list[str]
    timestamps: list[datetime]
    token_counts: list[int]
    overlap: int = 0
    summary: str | None = None

    @property
    def text(self) -> str:
        """The raw segment text: rendered turns joined by newlines."""
        return "\n".join(self.lines)

    @property
    def tokens(self) -> int:
        return sum(self.token_counts)

    @property
    def start(self) -> datetime:
        return self.timestamps[0]

    @property
    def end(self) -> datetime:
        return self.timestamps[-1]

    def drop_turns(self, turn_ids: set[str]) -> int:
        """Remove these turns in place (a deleted memory leaves its raw line too, and the summary goes);
        returns how many."""
        keep = [i for i, t in enumerate(self.turn_ids) if t not in turn_ids]
        removed = len(self.turn_ids) - len(keep)
        if removed:
            for name in ("turn_ids", "lines", "timestamps", "token_counts"):
                values = getattr(self, name)
                setattr(self, name, [values[i] for i in keep])
            self.overlap = sum(1 for i in keep if i < self.overlap)
            self.summary = None  # NOTE: written from the old lines, it may tell of the removed ones
        return removed

    @property
    def new_turn_ids(self) -> list[str]:
        """Turn ids first seen in this segment (excluding the replayed overlap)."""
        return self.turn_ids[self.overlap :]


class Segmenter:
    """Incremental sliding-window segmenter; :meth:`add` returns the segments it closed."""

    def __init__(
        self,
        max_tokens: int,
        overlap_ratio: float,
        count_tokens: TokenCounter = estimate_tokens,
        *,
        allow_overflow: bool = False,
        first_id: int = 0,
    ) -> None:
        if max_tokens <= 0:
            raise ValueError(f"max_tokens must be > 0, got {max_tokens}")
        if not 0 <= overlap_ratio < 1:
            raise ValueError(f"overlap_ratio must be in [0, 1), got {overlap_ratio}")
        self.max_tokens = max_tokens
        self.overlap_tokens = int(max_tokens * overlap_ratio)
        self.count_tokens = count_tokens
        self.allow_overflow = allow_overflow
        self._next_id = first_id
        self._open: Segment | None = None
        self._carry: list[_Item] = []  # overlap waiting for the next segment

    # -- public API ------------------------------------------------------------------
    def add(self, turn: TurnLike) -> list[Segment]:
        """Add one turn; return the segments this closed (0, 1 or 2), oldest first."""
        line = render_turn(turn)
        item = _Item(turn.turn_id, line, turn.timestamp, int(self.count_tokens(line)))
        size = item.tokens
        closed: list[Segment] = []
        if size > self.max_tokens and not self.allow_overflow:
            # NOTE: a turn longer than a segment stands alone; the carry is dropped.
            if self._open is not None:
                closed.append(self._close())
            self._carry = []
            self._open = self._new_segment([])
            self._append(self._open, item)
            closed.append(self._close())
            return closed
        if self._open is not None and self._open.tokens + size > self.max_tokens and not self.allow_overflow:
            closed.append(self._close())
        if self._open is None:
            carry = list(self._carry)
            while carry and sum(c.tokens for c in carry) + size > self.max_tokens:
                carry.pop(0)
            self._open = self._new_segment(carry)
            self._carry = []
        self._append(self._open, item)
        if self._open.tokens >= self.max_tokens:
            closed.append(self._close())
        return closed

    def extend(self, turns: Iterable[TurnLike]) -> list[Segment]:
        """Add turns in order; return every segment closed on the way."""
        closed: list[Segment] = []
        for turn in turns:
            closed.extend(self.add(turn))
        return closed

    def current(self) -> Segment | None:
        """A copy of the open segment (the newest block, still filling), or ``None``."""
        seg = self._open
        if seg is None:
            return None
        return Segment(
            seg.id,
            list(seg.turn_ids),
            list(seg.lines),
            list(seg.timestamps),
            list(seg.token_counts),
            seg.overlap,
        )

    def flush(self) -> Segment | None:
        """Close the open segment at the end of a stream (no overlap is carried on)."""
        if self._open is None:
            return None
        seg = self._close()
        self._carry = []
        return seg

    def forget(self, turn_ids: Iterable[str]) -> int:
        """Remove turns from the open segment and the pending overlap; returns how many were removed."""
        drop = set(turn_ids)
        removed = self._open.drop_turns(drop) if self._open is not None else 0
        if self._open is not None and not self._open.turn_ids:
            # NOTE: an emptied open segment is dropped: a later long turn would close it as an empty segment
            # (no start/end, nothing the router can embed). Its id is not reused.
            self._open = None
        before = len(self._carry)
        self._carry = [c for c in self._carry if c.turn_id not in drop]
        return removed + before - len(self._carry)

    @property
    def next_id(self) -> int:
        """The id the next segment will get."""
        return self._next_id

    @property
    def carry(self) -> list[_Item]:
        """The overlap waiting for the next segment (the tail of the last closed one)."""
        return list(self._carry)

    def restore(self, next_id: int, open_segment: Segment | None, carry: Iterable[tuple]) -> None:
        """Continue a stream saved elsewhere: the next id, the open segment (copied) and the pending carry
        (``(turn_id, line, timestamp, tokens)`` each)."""
        self._next_id = next_id
        self._open = None if open_segment is None else Segment(
            open_segment.id, list(open_segment.turn_ids), list(open_segment.lines), list(open_segment.timestamps),
            list(open_segment.token_counts), open_segment.overlap)
        self._carry = [_Item(*c) for c in carry]

    # -- internals -------------------------------------------------------------------
    def _new_segment(self, carry: list[_Item]) -> Segment:
        seg = Segment(
            id=self._next_id,
            turn_ids=[c.turn_id for c in carry],
            lines=[c.line for c in carry],
            timestamps=[c.timestamp for c in carry],
            token_counts=[c.tokens for c in carry],
            overlap=len(carry),
        )
        self._next_id += 1
        return seg

    @staticmethod
    def _append(seg: Segment, item: _Item) -> None:
        seg.turn_ids.append(item.turn_id)
        seg.lines.append(item.line)
        seg.timestamps.append(item.timestamp)
        seg.token_counts.append(item.tokens)

    def _close(self) -> Segment:
        """Close the open segment (callers check there is one) and compute the carry."""
        seg, self._open = self._open, None
        if seg is None:
            raise RuntimeError("no open segment to close")
        carry: list[_Item] = []
        budget = self.overlap_tokens
        for i in range(len(seg.turn_ids) - 1, seg.overlap - 1, -1):
            if seg.token_counts[i] > budget:
                break
            budget -= seg.token_counts[i]
            carry.insert(0, _Item(seg.turn_ids[i], seg.lines[i], seg.timestamps[i], seg.token_counts[i]))
        self._carry = carry
        return seg


def segment_turns(
    turns: Iterable[TurnLike],
    max_tokens: int,
    overlap_ratio: float,
    count_tokens: TokenCounter = estimate_tokens,
    *,
    allow_overflow: bool = False,
) -> list[Segment]:
    """Segment a whole stream at once (the last, partly filled segment included)."""
    segmenter = Segmenter(max_tokens, overlap_ratio, count_tokens, allow_overflow=allow_overflow)
    segments = segmenter.extend(turns)
    last = segmenter.flush()
    if last is not None:
        segments.append(last)
    return segments
