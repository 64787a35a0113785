import random

from bench.synthetic import CAUSES, REGIONS, SERVICES, generate_facts, query_ids


def reference_generator(n, seed):
    """The generator as HTM-EAR's script writes it (global random state)."""
    random.seed(seed)
    out = []
    for i in range(1, n + 1):
        reg = random.choice(REGIONS)
        cause = random.choice(CAUSES)
        svc = random.choice(SERVICES)
        sub = f"Subsystem-{i % 1000}"
        out.append((f"ENTRY {i}: {svc} in {reg} logged {cause} at {sub}. Hex: 0x{i:04X}.",
                    0.95 if i % 10 == 0 or "Panic" in cause else 0.5))
    return out


def test_generator_matches_the_reference_draws():
    facts = generate_facts(500, 42)
    assert [(f.text, f.importance) for f in facts] == reference_generator(500, 42)


def test_generator_is_deterministic_and_prefix_stable():
    assert generate_facts(300, 43) == generate_facts(300, 43)
    assert generate_facts(3000, 44)[:300] == generate_facts(300, 44)
    assert generate_facts(50, 42) != generate_facts(50, 43)


def test_query_names_the_facts_fields():
    fact = generate_facts(1234, 42)[-1]
    assert fact.id == 1234 and "Subsystem-234" in fact.query and "0x04D2" in fact.text
    assert "Hex" not in fact.query.split("Hex Code")[1]


def test_query_sets():
    ids = query_ids(15000)
    assert ids["active"][0] == 14900 and ids["active"][-1] == 15000 and len(ids["active"]) == 101
    assert ids["historical"] == list(range(1, 101))
