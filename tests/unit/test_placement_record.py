"""A storage directory keeps the placement its state was written under; other settings are refused, not obeyed."""

from __future__ import annotations

import json

import pytest

from pipeline.placement_record import RECORD, StoredPlacementError, check_placement, legacy_counts
from pipeline.shards import Placement

COUNTS = {"tier": 2, "router": 1, "assistants": 2}


def test_first_start_records_and_the_same_settings_reopen(tmp_path) -> None:
    root = tmp_path / "engram"
    check_placement(root, Placement(COUNTS, "rendezvous"))
    stored = json.loads((root / RECORD).read_text())
    assert stored == {"tenant_hash": "rendezvous", "counts": {"assistants": 2, "router": 1, "tier": 2}}
    assert check_placement(root, Placement(dict(COUNTS), "rendezvous")) == stored
    assert [p.name for p in root.iterdir()] == [RECORD]  # no temporary file left


@pytest.mark.parametrize(("counts", "scheme", "named"), [
    ({**COUNTS, "tier": 3}, "rendezvous", "cluster.tier_shards=3"),
    (COUNTS, "modulo", "cluster.tenant_hash=modulo"),
])
def test_other_settings_are_refused_with_the_stored_ones(tmp_path, counts, scheme, named) -> None:
    check_placement(tmp_path, Placement(COUNTS, "rendezvous"))
    before = (tmp_path / RECORD).read_text()
    with pytest.raises(StoredPlacementError) as err:
        check_placement(tmp_path, Placement(counts, scheme))
    assert named in str(err.value) and "cluster.tenant_hash=rendezvous, " in str(err.value)
    assert "cluster.tier_shards=2" in str(err.value)
    assert (tmp_path / RECORD).read_text() == before  # nothing changed


def _legacy_dir(root, counts):
    for kind, n in counts.items():
        for i in range(n):
            (root / f"{kind}-{i}").mkdir(parents=True)
            (root / f"{kind}-{i}" / "wal.log").write_bytes(b"x")


def test_state_from_before_the_record_opens_under_modulo_only(tmp_path) -> None:
    _legacy_dir(tmp_path, COUNTS)
    assert legacy_counts(tmp_path) == COUNTS
    with pytest.raises(StoredPlacementError, match="cluster.tenant_hash=modulo"):
        check_placement(tmp_path, Placement(COUNTS, "rendezvous"))
    with pytest.raises(StoredPlacementError, match="cluster.assistant_actors=2"):
        check_placement(tmp_path, Placement({**COUNTS, "assistants": 4}, "modulo"))
    assert not (tmp_path / RECORD).exists()
    check_placement(tmp_path, Placement(COUNTS, "modulo"))
    assert json.loads((tmp_path / RECORD).read_text())["tenant_hash"] == "modulo"


def test_an_empty_or_unrelated_directory_is_new(tmp_path) -> None:
    (tmp_path / "notes").mkdir()
    assert legacy_counts(tmp_path) == {} and legacy_counts(tmp_path / "missing") == {}
    check_placement(tmp_path, Placement(COUNTS, "rendezvous"))
    assert (tmp_path / RECORD).exists()
