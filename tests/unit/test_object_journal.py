"""The journal in an object store (cores/object_journal.py), over fsspec's ``file://`` store: the same contract
as the directory journal — what was acknowledged comes back after a restart, rotations leave one generation,
a corrupt record is cut off. The integration tests run it against a real S3 API (moto's server)."""

from __future__ import annotations

import pickle
import zlib

import pytest

from cores.durable import open_journal
from cores.journal import HEADER, Journal
from cores.object_journal import ObjectJournal, is_url
from pipeline.placement_record import StoredPlacementError, check_placement
from pipeline.shards import Placement
from tests.unit.test_durable import DIM, ENC, Tiers, add_turns, tier_config, turns


def test_a_url_opens_an_object_journal_and_a_path_a_directory_one(tmp_path) -> None:
    assert is_url("s3://bucket/x") and is_url(f"file://{tmp_path}") and not is_url(tmp_path)
    assert isinstance(open_journal(f"file://{tmp_path}/j"), ObjectJournal)
    assert isinstance(open_journal(tmp_path / "d"), Journal)


def test_records_come_back_in_order_and_a_snapshot_starts_a_new_generation(tmp_path) -> None:
    url = f"file://{tmp_path}/j"
    j = ObjectJournal(url)
    for i in range(12):
        j.append(("op", i))
    assert list(ObjectJournal(url).replay()) == [("op", i) for i in range(12)]  # 12 > 10: numeric order
    j.snapshot({"state": 12})
    j.append(("op", 12))
    again = ObjectJournal(url)
    assert again.generation == 1 and again.load_snapshot() == {"state": 12}
    assert list(again.replay()) == [("op", 12)]
    again.append(("op", 13))  # numbered after the replayed record
    assert list(ObjectJournal(url).replay()) == [("op", 12), ("op", 13)]
    names = sorted(p.rsplit("/", 1)[-1] for p in again.files())
    assert names == ["000000000000", "000000000001", "gen-000001", "snapshot-000001.pkl"]


def test_a_corrupt_record_and_those_after_it_are_cut_off(tmp_path) -> None:
    url = f"file://{tmp_path}/j"
    j = ObjectJournal(url)
    for word in ("first", "second", "third"):
        j.append(word)
    body = pickle.dumps("second")
    (tmp_path / "j" / "log-000000" / "000000000001").write_bytes(HEADER.pack(len(body), zlib.crc32(body) ^ 1) + body)
    again = ObjectJournal(url)
    assert list(again.replay()) == ["first"]
    again.append("fourth")
    assert list(ObjectJournal(url).replay()) == ["first", "fourth"]


def test_a_snapshot_without_its_marker_is_an_unfinished_rotation(tmp_path) -> None:
    url = f"file://{tmp_path}/j"
    ObjectJournal(url).append("kept")
    (tmp_path / "j" / "snapshot-000001.pkl").write_bytes(pickle.dumps("half-written rotation"))
    again = ObjectJournal(url)
    assert again.generation == 0 and again.load_snapshot() is None and list(again.replay()) == ["kept"]


@pytest.mark.parametrize("snapshot_every", [1_000, 7])
def test_a_tier_shard_journaled_in_a_store_restarts_with_every_write(tmp_path, snapshot_every) -> None:
    url = f"file://{tmp_path}/tier-0"
    live = Tiers(tier_config(), DIM, journal_dir=url, snapshot_every=snapshot_every)
    for start in range(0, 30, 4):
        add_turns(live, "ann", turns(4, start))
    live.delete("ann", ["D3"])
    restarted = Tiers(tier_config(), DIM, journal_dir=url, snapshot_every=snapshot_every)
    a, b = live.list("ann", 0, 100), restarted.list("ann", 0, 100)
    assert [(m.id, m.tier, m.text) for m in a[0]] == [(m.id, m.tier, m.text) for m in b[0]] and a[1] == b[1] > 0
    q = ENC.encode(["parcel code is 7919"])[0]
    assert [h.id for h in live.search("ann", "q", q, 5)] == [h.id for h in restarted.search("ann", "q", q, 5)]
    assert restarted.get("ann", "D3") is None


def test_the_placement_record_lives_in_the_store_too(tmp_path) -> None:
    root = f"file://{tmp_path}/engram"
    counts = {"tier": 2, "router": 1, "assistants": 2}
    assert check_placement(root, Placement(counts))["counts"] == dict(sorted(counts.items()))
    assert (tmp_path / "engram" / "placement.json").is_file()
    check_placement(root, Placement(counts))  # the same settings open it again
    with pytest.raises(StoredPlacementError, match="cluster.tier_shards=2"):
        check_placement(root, Placement({**counts, "tier": 3}))
