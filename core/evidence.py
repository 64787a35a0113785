"""The evidence record: one verbatim line of the conversation that an answer may be built from."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime


@dataclass(frozen=True)
class Evidence:
    """One verbatim line: ``[date] speaker: text``, its turn id and time; ``score``: higher = more relevant
    (comparable among all evidence for one question; 0 with the ``choose`` method). ``signals``: a candidate's raw
    relevance signals before they are fused into ``score`` across every assistant's candidates
    (``inference.assistant.fuse``); empty once fused."""

    turn_id: str
    content: str
    timestamp: datetime
    segment_id: int
    score: float = 0.0
    signals: tuple[float, ...] = ()



def by_score(evidence: Sequence[Evidence]) -> list[Evidence]:
    """Best first; equal scores keep their order (the ``choose`` method's are all 0)."""
    return sorted(evidence, key=lambda e: -e.score)


def dedupe_evidence(evidence: list[Evidence]) -> list[Evidence]:
    """Overlapping segments can yield the same turn twice: keep its first occurrence."""
    seen: set[str] = set()
    return [e for e in evidence if not (e.turn_id in seen or seen.add(e.turn_id))]
