"""bench.route_alternatives: interleaved rankings and per-speaker segments (no model)."""

from bench.route_alternatives import interleave, speaker_segments
from tests.unit.test_episodic import TURNS


def test_interleave_takes_the_rankings_in_turn_each_id_once():
    assert interleave([1, 2], [3, 1]) == [1, 3, 2]
    assert interleave([1, 2, 4], [1, 3, 2]) == [1, 2, 3, 4]
    assert interleave([5, 6], [7]) == [5, 7, 6]


def test_speaker_segments_hold_one_speakers_turns_each_and_every_turn_once():
    speakers = sorted({t.speaker for t in TURNS})
    segs, owner = speaker_segments(TURNS, speakers, 120, 0.0, lambda s: len(s.split()))
    assert [s.id for s in segs] == list(range(len(segs))) and set(owner) == set(range(len(segs)))
    said_by = {t.turn_id: t.speaker for t in TURNS}
    for s in segs:
        assert {said_by[t] for t in s.turn_ids} == {owner[s.id]}
    assert sorted(t for s in segs for t in s.turn_ids) == sorted(said_by)
