"""bench.extract_recall: settings parsing and the model-free ranking it compares the likelihood method with."""

import pytest

from bench.extract_recall import parse_settings, ranked_only
from inference.assistant import AssistantHost, SegmentQuery
from tests.doubles import ScriptedEngine
from tests.unit.test_episodic import segments


def test_parse_settings():
    assert parse_settings("likelihood:5, rank:8,choose") == [("likelihood", 5), ("rank", 8), ("choose", None)]
    for bad, match in (("guess:3", "unknown setting"), ("rank", "shortlist size"), ("likelihood:0", "shortlist")):
        with pytest.raises(ValueError, match=match):
            parse_settings(bad)


def test_ranked_only_is_the_likelihood_shortlist_without_the_model():
    segs = segments()
    engine = ScriptedEngine()
    host = AssistantHost(engine, shortlist=3, evidence_per_segment=3)
    host.add(segs)
    queries = [SegmentQuery(s.id, "What about topic3 and 1003?") for s in segs[:2]]
    ranked = ranked_only(host, queries, 3)
    assert engine.batches == []  # no model call
    assert len(ranked) == 6 and "number 1003" in max(ranked, key=lambda e: e.score).content
    found, _ = host.extract(queries)  # the model re-scores the very same shortlist
    assert {e.turn_id for g in found for e in g} == {e.turn_id for e in ranked}
