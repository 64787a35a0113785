"""HTM-EAR facts that follow from the eviction rules alone (no model; REFERENCE.md's table)."""

import pytest

from bench.modes import mode_config
from bench.synthetic import SCENARIOS, generate_facts
from core.config import TierConfig, TierMemoryConfig
from memory.hnsw_index import ExactIndex
from memory.tiered_memory import TieredMemory
from tests.doubles import unit_vectors

# seed -> (LRU essential lost, active facts left in L1, historical facts still stored)
EXPECTED_B = {42: (2455, 47, 21), 43: (2403, 40, 20), 44: (2406, 44, 26), 45: (2420, 44, 25), 46: (2398, 43, 20)}


DIM = 4  # the items' vectors are random unit rows


def ingest(mode: str, seed: int, scenario: str = "B") -> TieredMemory:
    n, l1, l2 = SCENARIOS[scenario]
    base = TierMemoryConfig(l1=TierConfig(capacity=l1), l2=TierConfig(capacity=l2))
    memory = TieredMemory(mode_config(base, mode, total_items=n), DIM, index_factory=ExactIndex)
    facts = generate_facts(n, seed)
    vectors = unit_vectors(n, DIM, seed)
    for start in range(0, n, 1000):
        chunk = facts[start : start + 1000]
        memory.add([f.text for f in chunk], ids=[f.id for f in chunk], importance=[f.importance for f in chunk],
                   vectors=vectors[start : start + 1000])
    return memory


@pytest.mark.parametrize("seed", sorted(EXPECTED_B))
def test_scenario_b_importance_policy_keeps_every_essential_fact(seed):
    memory = ingest("full", seed)
    lru_lost, active_in_l1, historical_stored = EXPECTED_B[seed]
    assert memory.stats.essential_lost == 0
    assert memory.stats.pruned == 9750
    assert sum(i in memory.l1 for i in range(14900, 15001)) == active_in_l1
    assert sum(i in memory.l1 or i in memory.l2 for i in range(1, 101)) == historical_stored


@pytest.mark.parametrize("seed", sorted(EXPECTED_B))
def test_scenario_b_lru_loses_the_reference_count_of_essential_facts(seed):
    memory = ingest("lru", seed)
    assert memory.stats.essential_lost == EXPECTED_B[seed][0]
    assert memory.stats.pruned == 9750
    assert all(i in memory.l1 for i in range(14900, 15001))  # recency keeps every active fact in L1


@pytest.mark.parametrize("scenario", ["A", "C"])
def test_scenarios_a_and_c_delete_nothing(scenario):
    memory = ingest("full", 42, scenario)
    assert memory.stats.pruned == 0
    assert len(memory) == SCENARIOS[scenario][0]


def test_oracle_holds_everything_in_one_tier():
    memory = ingest("oracle", 42, "A")
    assert memory.l2 is None and len(memory.l1) == 3000 and memory.stats.pruned == 0


def test_ingest_in_one_call_equals_ingest_in_chunks():
    n = 2000
    base = TierMemoryConfig(l1=TierConfig(capacity=100), l2=TierConfig(capacity=300))
    facts = generate_facts(n, 7)
    vectors = unit_vectors(n, 4, 7)
    kwargs = dict(ids=[f.id for f in facts], importance=[f.importance for f in facts])
    whole = TieredMemory(base, DIM, index_factory=ExactIndex)
    whole.add([f.text for f in facts], vectors=vectors, **kwargs)
    single = TieredMemory(base, DIM, index_factory=ExactIndex)
    for i, f in enumerate(facts):
        single.add([f.text], ids=[f.id], importance=[f.importance], vectors=vectors[i : i + 1])
    for a, b in ((whole.l1, single.l1), (whole.l2, single.l2)):
        assert {it.id for it in a.items()} == {it.id for it in b.items()}
    assert whole.stats == single.stats
