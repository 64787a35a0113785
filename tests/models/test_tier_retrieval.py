"""Tiered retrieval end to end on the real all-MiniLM-L6-v2 embedder (few hundred facts)."""

import pytest

from bench import encoding
from bench.modes import mode_config
from bench.synthetic import generate_facts
from core.config import TierConfig, load_config
from memory.tiered_memory import TieredMemory

pytestmark = pytest.mark.model

N, L1, L2 = 300, 60, 600


@pytest.fixture(scope="module")
def facts():
    return generate_facts(N, 42)


@pytest.fixture(scope="module")
def vectors(minilm, facts):
    return minilm.encode([f.text for f in facts])


def build(minilm, facts, vectors, mode):
    base = load_config("cpu").tiers.model_copy(update={"l1": TierConfig(capacity=L1), "l2": TierConfig(capacity=L2)})
    memory = TieredMemory(mode_config(base, mode, total_items=N), minilm.dim)
    memory.add([f.text for f in facts], ids=[f.id for f in facts], importance=[f.importance for f in facts],
               vectors=vectors)
    return memory


def test_gate_rescues_facts_that_only_l2_holds(minilm, facts, vectors):
    full = build(minilm, facts, vectors, "full")
    no_gate = build(minilm, facts, vectors, "no_gate")
    in_l2 = [f for f in facts if f.id in full.l2][:40]
    assert len(in_l2) == 40 and not any(f.id in full.l1 for f in in_l2)
    found_full = sum(f.id in [h.id for h in encoding.retrieve(full, minilm, f.query)] for f in in_l2)
    found_no_gate = sum(f.id in [h.id for h in encoding.retrieve(no_gate, minilm, f.query)] for f in in_l2)
    assert found_no_gate == 0  # L1 never held them
    assert found_full >= 36  # the gate brings L2 in and the hybrid score finds them
    rescued = next(f for f in in_l2 if encoding.retrieve(full, minilm, f.query)[0].id == f.id)
    assert encoding.retrieve(full, minilm, rescued.query)[0].tier == "l2"


def test_recent_facts_are_found_in_l1(minilm, facts, vectors):
    full = build(minilm, facts, vectors, "full")
    recent = [f for f in facts if f.id in full.l1][-20:]
    top = [encoding.retrieve(full, minilm, f.query)[0] for f in recent]
    assert sum(h.id == f.id for h, f in zip(top, recent, strict=True)) >= 19


def test_hnsw_recall_on_real_embeddings(minilm, vectors):
    import numpy as np

    from memory.hnsw_index import ExactIndex, HnswIndex

    cfg = load_config("cpu").tiers.l1
    hnsw = HnswIndex(minilm.dim, N, M=cfg.M, ef_construction=cfg.ef_construction, ef=cfg.ef)
    exact = ExactIndex(minilm.dim, N)
    for index in (hnsw, exact):
        index.add(np.arange(N), vectors)
    queries = minilm.encode([f"Retrieve the event at Subsystem-{i}" for i in range(0, 300, 10)], is_query=True)
    recall = np.mean([len(set(hnsw.search(q, 10)[0]) & set(exact.search(q, 10)[0])) / 10 for q in queries])
    assert recall >= 0.95
