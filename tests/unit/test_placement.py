"""Tenant placement (``pipeline/shards.py``: ``Placement``, rendezvous hashing) and its
simulation (``bench/placement``).

Rendezvous is checked against what it promises: a shard added takes about 1/(n+1) of the tenants and nothing else
moves; a shard removed gives away only its own tenants; the load is even. Modulo is checked against the formula of
earlier versions, which a ``storage_dir`` they wrote depends on.
"""

from __future__ import annotations

import numpy as np
import pytest

from bench.placement import max_over_mean, moved, placements, rendezvous_prefixes, simulate, tenant_hashes
from core.config import ClusterConfig
from pipeline.shards import Placement, rendezvous, rendezvous_index, shard_of, shard_seeds, shard_weights, stable_hash

TENANTS = 20_000


@pytest.fixture(scope="module")
def hashes() -> np.ndarray:
    return tenant_hashes(TENANTS)


def counts(n: int) -> dict:
    return {"tier": n, "router": n, "assistants": n}


def test_placement_is_fixed_across_processes_and_versions():
    """Computed once and written down: Python's own ``hash`` is salted per process, and a placement that changed
    between processes or releases would look every tenant up on the wrong shard."""
    p = Placement({"tier": 8, "router": 3, "assistants": 64})
    got = {t: (p.tier_index(t), p.router_index(t), p.assistant_index(t, 7))
           for t in ("alice", "bob", "carol", "dave", "tenant-0", "tenant-1")}
    assert got == {"alice": (5, 0, 8), "bob": (5, 2, 38), "carol": (2, 2, 20), "dave": (6, 2, 49),
                   "tenant-0": (5, 0, 16), "tenant-1": (3, 1, 18)}


@pytest.mark.parametrize("scheme", ["rendezvous", "modulo"])
def test_indices_are_in_range_and_one_shard_is_zero(scheme):
    for n in (1, 2, 3, 17, 4096):
        p = Placement(counts(n), scheme)
        for t in (f"user-{i}" for i in range(200)):
            assert 0 <= p.tier_index(t) < n and 0 <= p.router_index(t) < n and 0 <= p.assistant_index(t, 3) < n
            if n == 1:
                assert p.tier_index(t) == p.router_index(t) == p.assistant_index(t, 3) == 0


def test_modulo_is_the_formula_of_earlier_versions():
    p = Placement({"tier": 5, "router": 3, "assistants": 7}, "modulo")
    for t in (f"user-{i}" for i in range(300)):
        assert p.tier_index(t) == stable_hash(t) % 5 and p.router_index(t) == stable_hash(t) % 3
        assert p.assistant_index(t, 11) == stable_hash(f"{t}/11") % 7


def test_rendezvous_is_the_default_here_and_in_the_config_and_an_unknown_scheme_is_refused():
    assert Placement(counts(4)).scheme == "rendezvous" == ClusterConfig().tenant_hash
    with pytest.raises(ValueError, match="modulo"):
        Placement(counts(4), "ring")


def test_the_vectorised_placement_is_the_per_request_one(hashes):
    """The statistics below (and bench.placement) run on the vectorised function; requests on the cached one."""
    keys = [f"tenant-{t}" for t in range(2000)]
    for n in (2, 8, 33):
        rendezvous_index.cache_clear()
        per_key = [Placement(counts(n)).tier_index(k) for k in keys]
        assert per_key == rendezvous(hashes[:2000], n).tolist() == [shard_of(k, n, "rendezvous") for k in keys]


@pytest.mark.parametrize("n", [2, 8, 32])
def test_adding_a_shard_moves_about_one_in_n_plus_one_and_only_to_it(hashes, n):
    before, after = rendezvous(hashes, n), rendezvous(hashes, n + 1)
    changed = before != after
    assert changed.mean() <= 1.3 / (n + 1)
    assert changed.mean() >= 0.7 / (n + 1)  # the new shard does take its share
    assert (after[changed] == n).all()


def test_modulo_moves_almost_everyone_when_a_shard_is_added(hashes):
    assert moved(hashes % np.uint64(8), hashes % np.uint64(9)) > 0.8


@pytest.mark.parametrize("j", [0, 3, 7])
def test_removing_a_shard_moves_only_its_tenants(hashes, j):
    ids = np.arange(8)
    before = ids[shard_weights(hashes, shard_seeds(ids)).argmax(axis=1)]
    rest = np.delete(ids, j)
    after = rest[shard_weights(hashes, shard_seeds(rest)).argmax(axis=1)]
    assert ((before != after) == (before == j)).all()


def test_load_is_even(hashes):
    assert max_over_mean(rendezvous(hashes, 8), 8) <= 1.15


def test_simulation_prefixes_are_full_placements(hashes):
    small = hashes[:3000]
    got = rendezvous_prefixes(small, [4, 9, 12])
    for n, placed in got.items():
        assert placed.tolist() == rendezvous(small, n).tolist()
    assert placements(small, [5], "modulo")[5].tolist() == (small % np.uint64(5)).astype(int).tolist()


def test_simulation_rows(hashes):
    r = simulate(hashes[:10_000], nodes=4, shards_per_node=2, scheme="rendezvous")
    assert (r["scheme"], r["nodes"], r["shards"], r["ideal_moved_on_join"]) == ("rendezvous", 4, 8, 0.2)
    assert abs(r["moved_on_join"] - 1 / 5) < 0.03 and abs(r["moved_on_leave"] - 1 / 4) < 0.03
    assert 1 <= r["max_over_mean_node"] <= r["max_over_mean_shard"] < 1.2
    m = simulate(hashes[:10_000], nodes=4, shards_per_node=2, scheme="modulo")
    assert m["moved_on_join"] > 0.6 and m["moved_on_leave"] > 0.6
    one = simulate(hashes[:100], nodes=1, shards_per_node=3, scheme="rendezvous")
    assert one["moved_on_leave"] is None and one["max_over_mean_node"] == 1.0


def test_max_over_mean_and_moved():
    assert max_over_mean(np.array([0, 1, 2, 2]), 4) == 2.0  # an empty bin counts in the mean
    assert moved(np.array([1, 2, 3, 4]), np.array([1, 2, 0, 0])) == 0.5
