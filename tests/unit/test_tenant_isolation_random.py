"""Randomized tenant isolation on the actor cores: 10,000 mixed operations over 50 tenants; every text
carries its owner, and no read ever returns another tenant's item (tiers, routes, open segments,
extracted evidence)."""

from __future__ import annotations

import random
from datetime import datetime, timedelta

from core.config import load_config
from cores.tenant_assistants import TenantAssistants
from cores.tenant_episodes import TenantEpisodes, TurnRecord
from cores.tenant_tiers import TenantTiers
from tests.doubles import HashingEncoder, ScriptedEngine

DIM = 32
ENC = HashingEncoder(DIM)
WORDS = "apple river cello bakery parcel heron lisbon tuesday violet harbour garden ticket".split()


def test_ten_thousand_random_operations_never_cross_tenants():
    rng = random.Random(1234)
    config = load_config("cpu", {"episodic": {"segment_tokens": 64},
                                 "tiers": {"l1": {"capacity": 8}, "l2": {"capacity": 30}}})
    tiers, episodes, assistants = TenantTiers(config.tiers, DIM), TenantEpisodes(config, DIM), \
        TenantAssistants(ScriptedEngine(lambda r: "1, 2" if r.regex else "a summary"))
    tenants = [f"t{i}" for i in range(50)]
    counters = dict.fromkeys(tenants, 0)
    t0 = datetime(2024, 1, 1)
    checked = 0
    for step in range(10_000):
        tenant = rng.choice(tenants)
        op = rng.random()
        if op < 0.45:  # write a small batch
            turns = []
            for _ in range(rng.randint(1, 4)):
                counters[tenant] += 1
                n = counters[tenant]
                text = f"owner {tenant} says {rng.choice(WORDS)} {rng.choice(WORDS)}"
                turns.append(TurnRecord(f"{n}", tenant, text, "noon", t0 + timedelta(seconds=step)))
            vecs = ENC.encode([t.line for t in turns])
            tiers.add(tenant, [t.turn_id for t in turns], [t.text for t in turns], vecs, [0.5] * len(turns),
                      [{"owner": tenant}] * len(turns))
            closed = episodes.append(tenant, turns, vecs, [True] * len(turns))
            assistants.add(tenant, closed)
            episodes.delivered(tenant, [seg.id for seg in closed])
        elif op < 0.75:  # search the tiers
            q = f"{rng.choice(WORDS)} {rng.choice(WORDS)}"
            for hit in tiers.search(tenant, q, ENC.encode([q])[0], 10):
                assert hit.metadata["owner"] == tenant and f"owner {tenant} " in hit.text
                checked += 1
        elif op < 0.9:  # route and read the evidence
            q = f"what about the {rng.choice(WORDS)}?"
            route = episodes.route(tenant, q, ENC.encode([q])[0])
            found, _ = assistants.extract(tenant, [(a.segment_id, q) for a in route.activations])
            if route.open_segment is not None:
                assert all(f"] {tenant}: " in line for line in route.open_segment.lines)
            for e in (e for group in found for e in group):
                assert f"] {tenant}: owner {tenant} " in e.content
                checked += 1
        elif op < 0.97:  # list and get
            items, total = tiers.list(tenant, 0, 1000)
            assert len(items) == total and all(m.metadata["owner"] == tenant for m in items)
            other = rng.choice(tenants)
            if items and other != tenant:
                got = tiers.get(other, items[0].id)
                assert got is None or got.metadata["owner"] == other
            checked += len(items)
        else:  # delete a user (or one memory)
            if rng.random() < 0.3:
                tiers.drop_tenant(tenant), episodes.drop_tenant(tenant), assistants.drop_tenant(tenant)
            else:
                tiers.delete(tenant, [str(rng.randint(1, max(1, counters[tenant])))])
    assert checked > 10_000  # the reads really returned items to check
