"""Gate behaviour of the two-tier engine, with a hashing test encoder (no model) embedding for it."""

import pytest

from bench import encoding
from bench.modes import mode_config, parse_mode
from core.config import EvictionConfig, GateConfig, TierConfig, TierMemoryConfig
from memory.hnsw_index import ExactIndex
from memory.tiered_memory import TieredMemory
from tests.doubles import HashingEncoder

ENC = HashingEncoder()

OLD = "ENTRY 1: Data-Lake in Region-3 logged Kernel Panic at Subsystem-1. Hex: 0x0001."
RECENT = [f"ENTRY {i}: Auth-Svc in Region-9 logged I/O Wait at Subsystem-{i}. Hex: 0x{i:04X}." for i in range(2, 6)]


def memory(**gate) -> TieredMemory:
    cfg = TierMemoryConfig(
        l1=TierConfig(capacity=4), l2=TierConfig(capacity=10),
        eviction=EvictionConfig(batch_fraction=0.25), gate=GateConfig(**{"similarity_threshold": 0.5, **gate}),
    )
    m = TieredMemory(cfg, ENC.dim, index_factory=ExactIndex)
    encoding.add_texts(m, ENC, [OLD, *RECENT], ids=list(range(1, 6)))  # L1 holds 4: fact 1 moves to L2
    assert 1 in m.l2 and all(i in m.l1 for i in range(2, 6))
    return m


def retrieve(m: TieredMemory, query: str, k: int | None = None):
    return encoding.retrieve(m, ENC, query, k)


def test_gate_rescues_a_fact_only_l2_holds():
    m = memory()
    hits = retrieve(m, "Kernel Panic event in Region-3 involving Data-Lake at Subsystem-1")
    assert hits[0].id == 1 and hits[0].tier == "l2"
    assert m.stats.gate_fired == 1


def test_without_gate_l2_is_never_searched():
    m = memory(enabled=False)
    hits = retrieve(m, "Kernel Panic event in Region-3 involving Data-Lake at Subsystem-1")
    assert 1 not in [h.id for h in hits] and m.stats.gate_fired == 0


def test_gate_stays_closed_when_l1_answers_with_the_entities():
    m = memory()
    hits = retrieve(m, "I/O Wait event in Region-9 involving Auth-Svc at Subsystem-3")
    assert hits[0].id == 3 and hits[0].tier == "l1" and m.stats.gate_fired == 0


def test_entity_check_fires_the_gate_even_with_high_similarity():
    m = memory(similarity_threshold=-1.0)  # similarity never fires: only the entity check can
    retrieve(m, "Data-Lake Kernel Panic Subsystem-1")
    assert m.stats.gate_fired == 1
    m = memory(similarity_threshold=-1.0, check_entities=False)
    retrieve(m, "Data-Lake Kernel Panic Subsystem-1")
    assert m.stats.gate_fired == 0


def test_similarity_threshold_fires_the_gate():
    m = memory(similarity_threshold=0.999, check_entities=False)
    retrieve(m, "I/O Wait event in Region-9 involving Auth-Svc at Subsystem-3")
    assert m.stats.gate_fired == 1


def test_replace_drops_l1_candidates_merge_keeps_them():
    query = "Auth-Svc Region-9 I/O Wait Subsystem-1"  # entity of the L2 fact, words of the L1 facts
    replace = retrieve(memory(mode="replace"), query, k=10)
    merge = retrieve(memory(mode="merge"), query, k=10)
    assert {h.tier for h in replace} == {"l2"}
    assert {h.tier for h in merge} == {"l1", "l2"} and merge[0].id == 1


def test_usage_and_last_access_are_updated_on_returned_items():
    m = memory()
    hits = retrieve(m, "I/O Wait event in Region-9 involving Auth-Svc at Subsystem-3", k=2)
    for hit in hits:
        slot = m.l1.slot_of(hit.id)
        assert m.l1.usage[slot] == 1 and m.l1.last_access[slot] == m._clock


def test_hybrid_score_formula():
    m = memory()
    hit = retrieve(m, "I/O Wait event in Region-9 involving Auth-Svc at Subsystem-3", k=1)[0]
    assert hit.score == pytest.approx(hit.similarity**3 + 0.8 * 1 + 0.1 * 0.5)


def test_modes_and_thresholds():
    base = TierMemoryConfig()
    assert parse_mode("full@0.84") == ("full", 0.84)
    assert mode_config(base, "full@0.7", total_items=10).gate.similarity_threshold == 0.7
    assert mode_config(base, "lru", total_items=10).eviction.policy == "lru"
    assert mode_config(base, "no_gate", total_items=10).gate.enabled is False
    oracle = mode_config(base, "oracle", total_items=15000)
    assert oracle.l2 is None and oracle.l1.capacity == 15000
    assert base.l2 is not None and base.gate.enabled  # the base is not modified
    with pytest.raises(ValueError, match="unknown mode"):
        parse_mode("fast")
