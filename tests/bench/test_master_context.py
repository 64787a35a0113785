"""bench.master_context: context settings and the neighbouring turns the master is handed."""

from datetime import datetime

import pytest

from bench.master_context import offered_evidence, parse_cache_paths, parse_contexts, widen, with_rag
from core.config.episodic import EpisodicConfig
from corpora.locomo import Conversation, Turn
from inference.master import Master, dialogue_order
from tests.doubles import ScriptedEngine


def _conversation() -> Conversation:
    turns, stamps = [], {1: datetime(2023, 5, 8, 13, 56), 2: datetime(2023, 6, 1, 9, 0)}
    for session, count in ((1, 12), (2, 3)):
        for k in range(1, count + 1):
            turns.append(Turn("c", f"D{session}:{k}", session, len(turns), "Ann" if k % 2 else "Bob",
                              f"line {session}.{k}", "some date", stamps[session]))
    return Conversation("c", ("Ann", "Bob"), turns, [])


def test_parse_contexts():
    assert parse_contexts("product, 0:0,1:1,1:1") == ["product", "0:0", "1:1"]
    assert parse_contexts("offered,product") == ["offered", "product"]
    assert parse_contexts("offered+rag:2,offered") == ["offered+rag:2", "offered"]
    for bad in ("1", "a:b", "1:-1", "full", "offered+rag:0", "offered+rag:x", "offered+rag"):
        with pytest.raises(ValueError, match="before:after"):
            parse_contexts(bad)


def test_widen_keeps_neighbours_inside_the_session_in_dialogue_order():
    conv = _conversation()
    wide = widen(conv, ["D2:1", "D1:10", "D1:9"], 1, 1)
    assert [e.turn_id for e in wide] == ["D1:8", "D1:9", "D1:10", "D1:11", "D2:1", "D2:2"]  # no D1:12 before D2:1
    assert [e.turn_id for e in widen(conv, ["D1:12"], 0, 2)] == ["D1:12"]
    assert [e.turn_id for e in widen(conv, ["D1:1", "D1:3"], 1, 0)] == ["D1:1", "D1:2", "D1:3"]
    assert sorted(wide, key=dialogue_order) == wide  # the master keeps that order
    assert wide[0].content == "[some date] Bob: line 1.8" and wide[0].timestamp == datetime(2023, 5, 8, 13, 56)


def test_parse_cache_paths(tmp_path):
    cache = tmp_path / "engram-old.jsonl"
    cache.write_text("")
    assert parse_cache_paths([f"engram={cache}"]) == {"engram": cache}
    bad_items = (("rag=x", "SYSTEM=PATH"), ("engram", "SYSTEM=PATH"), (f"engram={tmp_path}/none", "no such file"))
    for bad, match in bad_items:
        with pytest.raises(ValueError, match=match):
            parse_cache_paths([bad])


def test_widen_grounds_relative_dates_as_engram_stores_the_lines():
    conv = _conversation()
    turn = conv.turns[0]
    conv.turns[0] = Turn(turn.conv_id, turn.turn_id, turn.session, turn.index, turn.speaker, "we met yesterday",
                         turn.date_time, turn.timestamp)
    assert widen(conv, ["D1:1"], 0, 0)[0].content == "[some date] Ann: we met yesterday"
    assert widen(conv, ["D1:1"], 0, 0, ground_dates=True)[0].content == "[some date] Ann: we met yesterday [7 May 2023]"


def test_offered_evidence_is_selected_again_as_the_product_selects():
    """The cache's offers (turn id, score, in routing order; a turn twice from overlapping segments) become evidence
    lines with their scores; the master keeps the best ``master_evidence`` of them, each turn once."""
    conv = _conversation()
    offered = [["D1:3", 0.5], ["D1:9", 2.0], ["D1:3", 1.5], ["D2:1", -1.0], ["D1:1", 1.0]]
    evidence = offered_evidence(conv, offered)
    assert [(e.turn_id, e.score) for e in evidence] == [tuple(o) for o in offered]
    assert evidence[1].content == "[some date] Ann: line 1.9"
    master = Master(ScriptedEngine(), EpisodicConfig(master_evidence=3))
    assert [e.turn_id for e in master.select("q?", evidence)] == ["D1:9", "D1:3", "D1:1"]


def test_with_rag_keeps_the_assistants_best_then_adds_new_ranked_turns():
    conv = _conversation()
    lines = {e.turn_id: e for e in widen(conv, [t.turn_id for t in conv.turns], 0, 0)}
    assistants = [lines[t] for t in ("D1:3", "D1:9", "D1:1")]  # best first
    ranked = [lines[t] for t in ("D1:9", "D2:2", "D1:1", "D1:5", "D1:6")]
    assert [e.turn_id for e in with_rag(assistants, ranked, 2, 2)] == ["D1:3", "D1:9", "D2:2", "D1:1"]
    assert [e.turn_id for e in with_rag(assistants, ranked[:2], 3, 2)] == ["D1:3", "D1:9", "D1:1", "D2:2"]
    assert [e.turn_id for e in with_rag(assistants, [], 1, 3)] == ["D1:3"]
