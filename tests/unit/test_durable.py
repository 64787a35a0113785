"""Write-ahead log + snapshots: a restarted core (same journal directory) is the core it was."""

from __future__ import annotations

import pickle
from datetime import datetime, timedelta
from pathlib import Path

import numpy as np
import pytest

from core.config import load_config
from cores.durable_cores import DurableAssistants, DurableEpisodes, DurableTiers
from cores.journal import HEADER, Journal
from cores.tenant_episodes import TenantEpisodes, TurnRecord
from tests.doubles import HashingEncoder, ScriptedEngine

DIM = 32
ENC = HashingEncoder(DIM)
Tiers, Episodes, Assistants = DurableTiers, DurableEpisodes, DurableAssistants  # exactly what the actors run


def turns(n: int, start: int = 0, user: str = "ann") -> list[TurnRecord]:
    t0 = datetime(2023, 5, 8, 13, 56)
    return [TurnRecord(f"D{i}", "Ann", f"{user} fact {i}: the parcel code is {i * 7919 % 1000}", "1:56 pm",
                       t0 + timedelta(minutes=i)) for i in range(start, start + n)]


def tier_config():
    return load_config("cpu", {"tiers": {"l1": {"capacity": 8}, "l2": {"capacity": 40}}}).tiers


def add_turns(tiers, user: str, batch: list[TurnRecord]) -> None:
    tiers.add(user, [t.turn_id for t in batch], [t.text for t in batch], ENC.encode([t.text for t in batch]),
              [0.5] * len(batch), [{"speaker": t.speaker} for t in batch])


# -- the journal ---------------------------------------------------------------------------------
def test_journal_replays_what_was_appended_and_rotates_on_snapshot(tmp_path):
    j = Journal(tmp_path)
    for i in range(5):
        j.append(("op", i))
    assert list(Journal(tmp_path).replay()) == [("op", i) for i in range(5)]
    j.snapshot({"state": 5})
    j.append(("op", 5))
    again = Journal(tmp_path)
    assert again.generation == 1 and again.load_snapshot() == {"state": 5}
    assert list(again.replay()) == [("op", 5)]
    assert sorted(p.name for p in j.files()) == ["log-000001.wal", "snapshot-000001.pkl"]


def test_a_torn_tail_is_cut_off_and_later_appends_follow_the_last_good_record(tmp_path):
    j = Journal(tmp_path)
    j.append("first")
    j.append("second")
    j.close()
    log = tmp_path / "log-000000.wal"
    whole = log.read_bytes()
    body = pickle.dumps("third")
    log.write_bytes(whole + HEADER.pack(len(body), 0) + body[:3])  # a write cut short by a crash
    j2 = Journal(tmp_path)
    assert list(j2.replay()) == ["first", "second"]
    assert log.stat().st_size == len(whole)
    j2.append("third")
    assert list(Journal(tmp_path).replay()) == ["first", "second", "third"]


def test_a_rotation_cut_before_its_log_exists_recovers_from_the_old_generation(tmp_path):
    j = Journal(tmp_path)
    j.append("kept")
    j.close()
    (tmp_path / "snapshot-000001.pkl").write_bytes(pickle.dumps("half-written rotation"))
    again = Journal(tmp_path)
    assert again.generation == 0 and again.load_snapshot() is None and list(again.replay()) == ["kept"]


# -- durable cores -------------------------------------------------------------------------------
@pytest.mark.parametrize("snapshot_every", [1_000, 7])
def test_tier_shard_restarts_with_every_write_and_delete(tmp_path, snapshot_every):
    live = Tiers(tier_config(), DIM, journal_dir=tmp_path, snapshot_every=snapshot_every)
    for start in range(0, 30, 4):
        add_turns(live, "ann", turns(4, start))
    add_turns(live, "bob", turns(3, user="bob"))
    live.delete("ann", ["D3"])
    restarted = Tiers(tier_config(), DIM, journal_dir=tmp_path, snapshot_every=snapshot_every)
    for user in ("ann", "bob"):
        a, b = live.list(user, 0, 100), restarted.list(user, 0, 100)
        assert [(m.id, m.tier, m.text) for m in a[0]] == [(m.id, m.tier, m.text) for m in b[0]] and a[1] == b[1]
    q = ENC.encode(["parcel code is 7919"])[0]
    assert [h.id for h in live.search("ann", "q", q, 5)] == [h.id for h in restarted.search("ann", "q", q, 5)]
    assert restarted.get("ann", "D3") is None
    if snapshot_every == 7:
        assert restarted.recovered < 7  # most of it came from a snapshot


def test_deleting_a_user_leaves_nothing_of_it_in_the_journal_files(tmp_path):
    live = Tiers(tier_config(), DIM, journal_dir=tmp_path)
    add_turns(live, "ann", turns(5))
    add_turns(live, "bob", turns(5, user="bob"))
    assert live.drop_tenant("ann") == 5
    blob = b"".join(Path(p).read_bytes() for p in live.journal_files())
    assert b"ann fact" not in blob and b"bob fact" in blob
    restarted = Tiers(tier_config(), DIM, journal_dir=tmp_path)
    assert restarted.list("ann")[1] == 0 and restarted.list("bob")[1] == 5


def test_calls_after_a_user_is_deleted_leave_nothing_of_it_in_the_journal(tmp_path):
    """A summary or a delete that arrives after the user was deleted changed nothing: it is not logged."""
    config = load_config("cpu", {"episodic": {"segment_tokens": 64}})
    router, tiers = Episodes(config, DIM, journal_dir=tmp_path / "r"), Tiers(tier_config(), DIM,
                                                                                journal_dir=tmp_path / "t")
    batch = turns(20)
    closed = router.append("ann", batch, ENC.encode([t.line for t in batch]), [True] * 20)
    add_turns(tiers, "ann", batch)
    router.drop_tenant("ann")
    tiers.drop_tenant("ann")
    late = "summary: ann's parcel codes"
    assert router.set_summary("ann", closed[0].id, late, ENC.encode([late])[0]) is False
    assert router.delivered("ann", [closed[0].id]) == 0 and router.forget("ann", ["D3"]) == 0
    assert tiers.delete("ann", ["D3"]) == 0
    blob = b"".join(Path(p).read_bytes() for p in router.journal_files() + tiers.journal_files())
    assert b"ann" not in blob and b"D3" not in blob


def test_an_import_is_journaled_like_any_write(tmp_path):
    from cores.tenant_export import export_lines, parse_import

    config = load_config("cpu", {"episodic": {"segment_tokens": 64}})
    src = Episodes(config, DIM)
    batch = turns(30)
    src.append("ann", batch, ENC.encode([t.line for t in batch]), [True] * 30)
    src_tiers = Tiers(tier_config(), DIM)
    add_turns(src_tiers, "ann", batch)
    held = {}  # no assistants here: the closed segments are still pending in the router
    lines = list(export_lines("ann", DIM, src_tiers.export_tenant("ann"), src.export_tenant("ann"), held))
    plan = parse_import(lines, DIM)
    live = Episodes(config, DIM, journal_dir=tmp_path / "r")
    live_tiers = Tiers(tier_config(), DIM, journal_dir=tmp_path / "t")
    live.import_tenant("bob", plan.stream)
    live_tiers.import_tenant("bob", plan.memories)
    router, tiers = Episodes(config, DIM, journal_dir=tmp_path / "r"), Tiers(tier_config(), DIM,
                                                                             journal_dir=tmp_path / "t")
    assert router.recovered == 1 and tiers.recovered == 1
    assert router.segment_ids("bob") == src.segment_ids("ann")
    assert [m["id"] for m in tiers.export_tenant("bob")] == [m["id"] for m in src_tiers.export_tenant("ann")]


def test_router_restarts_with_its_segments_summaries_and_open_segment(tmp_path):
    config = load_config("cpu", {"episodic": {"segment_tokens": 64}})
    live = Episodes(config, DIM, journal_dir=tmp_path, snapshot_every=5)
    closed = []
    for start in range(0, 40, 6):
        batch = turns(6, start)
        closed += live.append("ann", batch, ENC.encode([t.line for t in batch]), [True] * len(batch))
    assert len(closed) >= 3
    live.set_summary("ann", closed[0].id, "parcel codes of Ann", ENC.encode(["parcel codes of Ann"])[0])
    live.forget("ann", ["D39"])
    restarted = Episodes(config, DIM, journal_dir=tmp_path, snapshot_every=5)
    q = "what is the parcel code of fact 12?"
    a, b = live.route("ann", q, ENC.encode([q])[0]), restarted.route("ann", q, ENC.encode([q])[0])
    assert a.activations == b.activations and a.segments == b.segments
    assert a.open_segment.turn_ids == b.open_segment.turn_ids and "D39" not in b.open_segment.turn_ids
    np.testing.assert_allclose(live.context("ann"), restarted.context("ann"))


def test_assistants_restart_with_their_segments_and_the_new_engine(tmp_path):
    config = load_config("cpu", {"episodic": {"segment_tokens": 64}})
    episodes = TenantEpisodes(config, DIM)
    batch = turns(30)
    segments = episodes.append("ann", batch, ENC.encode([t.line for t in batch]), [True] * 30)
    live = Assistants(ScriptedEngine(), journal_dir=tmp_path, snapshot_every=1)
    live.add("ann", segments)
    live.forget("ann", [segments[0].turn_ids[0]])
    engine = ScriptedEngine()
    restarted = Assistants(engine, journal_dir=tmp_path, snapshot_every=1)
    pairs = [(s.id, "parcel code?") for s in segments]
    found, _ = restarted.extract("ann", pairs)
    assert found == live.extract("ann", pairs)[0] and engine.batches, "the restored hosts use the new engine"


def test_a_resent_batch_does_not_double_the_stream(tmp_path):
    """A write that failed after the router applied it is resent by the client: nothing is added twice."""
    config = load_config("cpu", {"episodic": {"segment_tokens": 64}})
    once, twice = TenantEpisodes(config, DIM), Episodes(config, DIM, journal_dir=tmp_path)
    batches = [turns(5, start) for start in range(0, 30, 5)]
    for b in batches:
        once.append("ann", b, ENC.encode([t.line for t in b]), [True] * 5)
        for _ in range(2):
            twice.append("ann", b, ENC.encode([t.line for t in b]), [True] * 5)
    restarted = Episodes(config, DIM, journal_dir=tmp_path)
    for stream in (once, twice, restarted):
        stream._streams["ann"].pending.clear()  # delivery is checked below
    assert once.turn_ids("ann") == twice.turn_ids("ann") == restarted.turn_ids("ann") == {f"D{i}" for i in range(30)}
    assert once._streams["ann"].meta == restarted._streams["ann"].meta
    np.testing.assert_allclose(once.context("ann"), restarted.context("ann"))


def test_segments_are_handed_out_until_their_delivery_is_confirmed(tmp_path):
    """A write whose assistant call failed after the router closed a segment: the resend delivers it."""
    config = load_config("cpu", {"episodic": {"segment_tokens": 64}})
    stream = Episodes(config, DIM, journal_dir=tmp_path)
    first = turns(12)
    closed = stream.append("ann", first, ENC.encode([t.line for t in first]), [True] * 12)
    assert closed, "the batch closed a segment"
    # ... the assistant actor did not answer; the client resends the same batch:
    again = Episodes(config, DIM, journal_dir=tmp_path).append("ann", first, ENC.encode([t.line for t in first]),
                                                              [True] * 12)
    assert [s.id for s in again] == [s.id for s in closed]
    stream = Episodes(config, DIM, journal_dir=tmp_path)
    stream.delivered("ann", [s.id for s in closed])
    nxt = turns(3, 12)
    assert all(s.id not in {c.id for c in closed} for s in stream.append("ann", nxt, ENC.encode([t.line for t in nxt]),
                                                                           [True] * 3))
    assert Episodes(config, DIM, journal_dir=tmp_path)._streams["ann"].pending.keys().isdisjoint(s.id for s in closed)


def test_a_snapshot_from_before_summary_texts_were_kept_still_loads(tmp_path):
    config = load_config("cpu", {"episodic": {"segment_tokens": 64}})
    live = Episodes(config, DIM, journal_dir=tmp_path)
    batch = turns(20)
    closed = live.append("ann", batch, ENC.encode([t.line for t in batch]), [True] * 20)
    del live._streams["ann"].summaries  # as pickled by the previous version
    live.snapshot()
    again = Episodes(config, DIM, journal_dir=tmp_path)
    text = "parcel codes"
    assert again.set_summary("ann", closed[0].id, text, ENC.encode([text])[0])
    assert again.export_tenant("ann").closed[0].summary == text
