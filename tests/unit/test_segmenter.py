"""Sliding-window segmenter: boundaries, overlap, ids, long turns, incremental == batch."""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import datetime, timedelta

import pytest

from memory.segmenter import Segmenter, estimate_tokens, render_turn, segment_turns

T0 = datetime(2023, 5, 8, 13, 56)


@dataclass(frozen=True)
class FakeTurn:
    turn_id: str
    speaker: str
    text: str
    date_time: str
    timestamp: datetime


def words(line: str) -> int:
    """Token counter for the tests: whitespace words of the rendered line."""
    return len(line.split())


def turns(sizes: dict[str, int] | list[int]) -> list[FakeTurn]:
    """Turns whose rendered line ``[d] S: w w ...`` has exactly ``size`` words."""
    items = sizes.items() if isinstance(sizes, dict) else ((f"t{i}", s) for i, s in enumerate(sizes))
    out = []
    for i, (tid, size) in enumerate(items):
        assert size >= 3, "header '[d] S:' takes two words"
        out.append(FakeTurn(tid, "S", " ".join([tid] * (size - 2)), "d", T0 + timedelta(minutes=i)))
    return out


def ids(segments) -> list[list[str]]:
    return [s.turn_ids for s in segments]


def test_estimate_tokens():
    assert estimate_tokens("hello world") == 3  # ceil(11 chars / 4) beats 2 words
    assert estimate_tokens("a b c d e") == 5  # 5 words beat ceil(9 / 4)
    assert estimate_tokens("") == 0


def test_boundaries_and_overlap():
    # max 20, overlap budget int(20 * 0.25) = 5.
    stream = turns({"a": 8, "b": 8, "c": 3, "d": 6, "e": 4, "f": 9})
    seg = Segmenter(max_tokens=20, overlap_ratio=0.25, count_tokens=words)
    closed_by = [ids(seg.add(t)) for t in stream]
    # d does not fit behind a, b, c (19 + 6 > 20); f does not fit behind c, d, e (13 + 9).
    assert closed_by == [[], [], [], [["a", "b", "c"]], [], [["c", "d", "e"]]]
    last = seg.flush()
    assert last is not None and last.turn_ids == ["e", "f"]
    assert seg.flush() is None
    all_segments = segment_turns(stream, max_tokens=20, overlap_ratio=0.25, count_tokens=words)
    assert ids(all_segments) == [["a", "b", "c"], ["c", "d", "e"], ["e", "f"]]
    assert [s.overlap for s in all_segments] == [0, 1, 1]
    assert [s.tokens for s in all_segments] == [19, 13, 13]
    assert [s.id for s in all_segments] == [0, 1, 2]
    assert all_segments[1].new_turn_ids == ["d", "e"]


def test_exactly_full_closes_at_once():
    stream = turns([5] * 10)
    seg = Segmenter(max_tokens=20, overlap_ratio=0.25, count_tokens=words)
    assert [len(seg.add(t)) for t in stream] == [0, 0, 0, 1, 0, 0, 1, 0, 0, 1]
    assert seg.current() is None and seg.flush() is None
    assert ids(segment_turns(stream, 20, 0.25, words)) == [
        ["t0", "t1", "t2", "t3"],
        ["t3", "t4", "t5", "t6"],
        ["t6", "t7", "t8", "t9"],
    ]


def test_overlap_content_and_limits():
    # max 15, budget int(15 * 0.4) = 6: trailing whole turns that fit, greedily from the end.
    stream = turns({"a": 3, "b": 3, "c": 3, "d": 4, "e": 9})
    segments = segment_turns(stream, max_tokens=15, overlap_ratio=0.4, count_tokens=words)
    # a+b+c+d = 13; e does not fit -> close; carry d (4), c (3) would exceed 6 -> [d].
    assert ids(segments) == [["a", "b", "c", "d"], ["d", "e"]]
    assert segments[1].lines[0] == segments[0].lines[-1]
    assert segments[1].text.splitlines()[0] == "[d] S: d d"
    # No overlap at ratio 0.
    assert ids(segment_turns(stream, 15, 0.0, words)) == [["a", "b", "c", "d"], ["e"]]


def test_replayed_turns_are_not_replayed_again():
    # max 10, budget 5. S1 = [b (replayed), c]; its carry is drawn from c alone, although b would fit too.
    stream = turns({"a": 6, "b": 3, "c": 3, "d": 6})
    assert ids(segment_turns(stream, 10, 0.5, words)) == [["a", "b"], ["b", "c"], ["c", "d"]]


def test_overlap_trimmed_to_fit_next_turn():
    # max 10, budget 8: carry [a, b] (3 + 3), but c (7) only fits behind b.
    stream = turns({"a": 3, "b": 3, "c": 7})
    segments = segment_turns(stream, 10, 0.8, words)
    assert ids(segments) == [["a", "b"], ["b", "c"]]
    assert segments[1].overlap == 1


def test_turn_ids_rendering_and_time_span():
    stream = turns([4, 4, 4, 4, 4])
    segments = segment_turns(stream, 12, 0.0, words)
    assert ids(segments) == [["t0", "t1", "t2"], ["t3", "t4"]]
    first = segments[0]
    assert first.lines == [render_turn(t) for t in stream[:3]]
    assert first.lines[0] == "[d] S: t0 t0"
    assert first.text == "[d] S: t0 t0\n[d] S: t1 t1\n[d] S: t2 t2"
    assert (first.start, first.end) == (T0, T0 + timedelta(minutes=2))
    assert (segments[1].start, segments[1].end) == (T0 + timedelta(minutes=3), T0 + timedelta(minutes=4))
    assert first.summary is None
    first.summary = "filled later by a model"
    assert segments[0].summary == "filled later by a model"


def test_long_turn_becomes_its_own_segment():
    # max 10, budget 2; L (15 words) is longer than a segment.
    stream = turns({"a": 3, "L": 15, "b": 3, "c": 3})
    seg = Segmenter(10, 0.2, words)
    assert ids(seg.add(stream[0])) == []
    closed = seg.add(stream[1])
    assert ids(closed) == [["a"], ["L"]]
    assert closed[1].tokens == 15 and closed[1].overlap == 0
    seg.extend(stream[2:])
    assert seg.flush().turn_ids == ["b", "c"]


def test_long_turn_drops_pending_overlap():
    # max 10, budget 3: [a, b] fills exactly and carries b; L stands alone and drops that carry.
    stream = turns({"a": 7, "b": 3, "L": 12, "c": 3})
    assert ids(segment_turns(stream, 10, 0.3, words)) == [["a", "b"], ["L"], ["c"]]


def test_allow_overflow_matches_emem_code():
    # E-mem closes a block once block_used >= block_size, keeping the turn that crossed it.
    stream = turns({"a": 6, "b": 6, "c": 3, "L": 15, "d": 3})
    segments = segment_turns(stream, 10, 0.2, words, allow_overflow=True)
    assert ids(segments) == [["a", "b"], ["c", "L"], ["d"]]
    assert [s.tokens for s in segments] == [12, 18, 3]
    strict = segment_turns(stream, 10, 0.2, words)
    assert ids(strict) == [["a"], ["b", "c"], ["L"], ["d"]]


def test_current_is_a_snapshot():
    stream = turns([4, 4, 4])
    seg = Segmenter(100, 0.1, words)
    seg.extend(stream[:2])
    snap = seg.current()
    assert snap is not None and snap.turn_ids == ["t0", "t1"] and snap.id == 0
    snap.turn_ids.append("bogus")
    seg.add(stream[2])
    assert seg.current().turn_ids == ["t0", "t1", "t2"]


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("allow_overflow", [False, True])
def test_incremental_equals_batch(seed, allow_overflow):
    rng = random.Random(seed)
    stream = turns([rng.choice([3, 4, 5, 8, 13, 40]) for _ in range(200)])
    max_tokens, ratio = 30, 0.3
    batch = segment_turns(stream, max_tokens, ratio, words, allow_overflow=allow_overflow)

    seg = Segmenter(max_tokens, ratio, words, allow_overflow=allow_overflow)
    incremental = []
    pos = 0
    while pos < len(stream):  # uneven chunks, with snapshots in between
        step = rng.randint(1, 7)
        incremental += seg.extend(stream[pos : pos + step]) if step > 1 else seg.add(stream[pos])
        seg.current()
        pos += step
    incremental.append(seg.flush())
    assert [(s.id, s.turn_ids, s.lines, s.overlap) for s in incremental] == [
        (s.id, s.turn_ids, s.lines, s.overlap) for s in batch
    ]
    # Every turn is new in exactly one segment, in stream order.
    assert [tid for s in batch for tid in s.new_turn_ids] == [t.turn_id for t in stream]
    budget = int(max_tokens * ratio)
    for s in batch:
        assert sum(s.token_counts[: s.overlap]) <= budget
        if not allow_overflow:
            assert s.tokens <= max_tokens or s.turn_ids == s.new_turn_ids and len(s.turn_ids) == 1


def test_rejects_bad_parameters():
    with pytest.raises(ValueError):
        Segmenter(max_tokens=0, overlap_ratio=0.1)
    with pytest.raises(ValueError):
        Segmenter(max_tokens=4096, overlap_ratio=1.0)
