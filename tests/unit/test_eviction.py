import numpy as np

from core.config import EvictionConfig, TierConfig
from memory.hnsw_index import ExactIndex
from memory.tier import MemoryItem, TierShard, eviction_scores
from tests.doubles import unit_vectors


def make_items(importances, start=0, dim=4):
    vectors = unit_vectors(len(importances), dim, start)
    return [MemoryItem(id=start + i, text=f"item {start + i}", vector=vectors[i], importance=imp, last_access=start + i)
            for i, imp in enumerate(importances)]


def shard(capacity, **eviction):
    return TierShard(4, TierConfig(capacity=capacity), EvictionConfig(**eviction), last_tier=True,
                     index_factory=ExactIndex)


def test_score_formula():
    s = eviction_scores(np.array([0.95, 0.5, 0.5]), np.array([0, 5, 30]), EvictionConfig())
    assert np.allclose(s, [0.7125, 0.5, 0.625])


def test_batch_eviction_takes_lowest_scores_ties_in_insertion_order():
    tier = shard(20)  # batch = int(0.15 * 20) = 3
    tier.add(make_items([0.5, 0.95, 0.5, 0.5, 0.95, 0.5] + [0.95] * 14))
    evicted = tier.add(make_items([0.9], start=100))
    assert [it.id for it in evicted] == [0, 2, 3]
    assert len(tier) == 18 and 100 in tier


def test_one_at_a_time_when_batch_fraction_is_zero():
    tier = shard(10, batch_fraction=0.0)
    tier.add(make_items([0.5] * 10))
    evicted = tier.add(make_items([0.5], start=50))
    assert [it.id for it in evicted] == [0] and len(tier) == 10


def test_usage_protects_from_eviction():
    tier = shard(10, batch_fraction=0.1)
    tier.add(make_items([0.5] * 10))
    tier.touch(np.array([tier.slot_of(0)] * 1), clock=99)
    tier.usage[tier.slot_of(0)] = 10  # S = 0.375 + 0.25
    evicted = tier.add(make_items([0.5], start=50))
    assert [it.id for it in evicted] == [1]


def test_lru_evicts_least_recently_accessed():
    tier = shard(5, policy="lru", batch_fraction=0.2)
    tier.add(make_items([0.95] * 5))
    tier.touch(np.array([tier.slot_of(0)]), clock=1000)
    evicted = tier.add(make_items([0.95], start=50))
    assert [it.id for it in evicted] == [1]


def test_guard_never_deletes_essential_items_from_the_last_tier():
    tier = shard(10, protect_last_tier=True)  # batch 1
    tier.add(make_items([0.9] * 9 + [0.5]))
    evicted = tier.add(make_items([0.95, 0.95], start=20))
    assert [it.id for it in evicted] == [9]  # the only unprotected item
    assert all(it.importance >= 0.85 for it in tier.items())
    assert tier.capacity == 20 and len(tier) == 11  # nothing left to delete: the tier grew instead


def test_without_guard_essential_items_are_deleted():
    tier = shard(4, batch_fraction=0.25)
    tier.add(make_items([0.9] * 4))
    evicted = tier.add(make_items([0.9], start=10))
    assert [it.id for it in evicted] == [0] and tier.capacity == 4


def test_freed_slots_are_reused_and_metadata_moves_with_items():
    tier = shard(3, batch_fraction=0.34)
    tier.add(make_items([0.5, 0.6, 0.7]))
    first_slot = tier.slot_of(0)
    evicted = tier.add(make_items([0.8], start=10))
    assert evicted[0].id == 0 and evicted[0].text == "item 0" and tier.slot_of(10) == first_slot
    assert tier.get(10).importance == 0.8 and tier.get(0) is None


def test_string_ids_and_replacing_an_id():
    tier = shard(5)
    vec = unit_vectors(2, 4)
    tier.add([MemoryItem(id="a", text="old", vector=vec[0])])
    tier.add([MemoryItem(id="a", text="new", vector=vec[1])])
    assert len(tier) == 1 and tier.get("a").text == "new"
    assert [it.id for it in tier.remove(["a", "unknown"])] == ["a"] and len(tier) == 0


def test_capacity_is_a_bound_rows_double_on_demand():
    tier = TierShard(4, TierConfig(capacity=1_000_000), EvictionConfig(), last_tier=True, initial_slots=4)
    assert tier.allocated == 4 and tier.vectors.shape == (4, 4)  # a huge bound costs nothing up front
    items = make_items([0.5] * 11)
    tier.add(items[:3])
    tier.add(items[3:])
    assert tier.allocated == 16 and len(tier) == 11
    for it in items:  # every item findable after the index grew (HNSW, not the exact reference)
        slots, _ = tier.search(it.vector, 1)
        assert tier.ids[int(slots[0])] == it.id
    tier.remove([0, 1])
    tier.add(make_items([0.5, 0.5], start=20))
    assert tier.allocated == 16 and sorted(tier.slot_of(i) for i in (20, 21)) == [0, 1]  # freed slots reused first


def test_rows_never_exceed_the_bound():
    tier = shard(6)
    tier.add(make_items([0.5] * 5))
    tier.add(make_items([0.5] * 3, start=10))
    assert tier.allocated == 6 and len(tier) <= 6


def test_snapshot_from_before_lazy_rows_loads():
    tier = shard(8)
    tier.add(make_items([0.5] * 3))
    state = dict(tier.__dict__)
    del state["allocated"]  # what an older snapshot holds: its rows were allocated to the bound
    old = TierShard.__new__(TierShard)
    old.__setstate__(state)
    old.add(make_items([0.5] * 5, start=10))
    assert old.allocated == 8 and len(old) == 8
