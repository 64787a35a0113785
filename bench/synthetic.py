"""HTM-EAR's synthetic fact generator, reproduced exactly (same draws, same order).

>>> facts = generate_facts(3, seed=42)
>>> facts[0].text.startswith("ENTRY 1: ")
True
"""

from __future__ import annotations

import random
from dataclasses import dataclass

REGIONS = [f"Region-{r}" for r in range(25)]
CAUSES = ["Memory Overflow", "CPU Throttling", "Disk Saturation", "Kernel Panic", "I/O Wait", "OOM Killer"]
SERVICES = ["Auth-Svc", "Inference-Engine", "Data-Lake", "API-Gateway", "Stream-Processor"]
ESSENTIAL_IMPORTANCE = 0.95
ROUTINE_IMPORTANCE = 0.5

# HTM-EAR's scenarios: facts ingested, L1 capacity, L2 capacity.
SCENARIOS = {"A": (3000, 500, 5000), "B": (15000, 500, 5000), "C": (5000, 1000, 14000)}


@dataclass(frozen=True)
class Fact:
    id: int
    text: str
    query: str
    importance: float

    @property
    def essential(self) -> bool:
        return self.importance == ESSENTIAL_IMPORTANCE


def generate_facts(n: int, seed: int) -> list[Fact]:
    """Facts 1..n. A shorter run is a prefix of a longer one with the same seed."""
    rng = random.Random(seed)  # same sequence as the reference's random.seed(seed) + random.choice
    facts = []
    for i in range(1, n + 1):
        reg, cause, svc = rng.choice(REGIONS), rng.choice(CAUSES), rng.choice(SERVICES)  # this order
        sub, status = f"Subsystem-{i % 1000}", f"0x{i:04X}"
        essential = i % 10 == 0 or "Panic" in cause
        facts.append(Fact(
            id=i,
            text=f"ENTRY {i}: {svc} in {reg} logged {cause} at {sub}. Hex: {status}.",
            query=f"Retrieve the Hex Code for the {cause} event in {reg} involving {svc} at {sub}.",
            importance=ESSENTIAL_IMPORTANCE if essential else ROUTINE_IMPORTANCE,
        ))
    return facts


def query_ids(n: int) -> dict[str, list[int]]:
    """HTM-EAR's query sets: 'active' ids n-100..n (101 ids) and 'historical' ids 1..100."""
    return {"active": list(range(n - 100, n + 1)), "historical": list(range(1, 101))}
