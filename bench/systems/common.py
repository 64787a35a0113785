"""What the LoCoMo systems share: the answer record, a turn as an evidence line, one engine per role."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from core.config import ROLES, Role
from core.evidence import Evidence
from core.generation import GenerationEngine, TokenBill
from inference.master import MasterAnswer
from memory.segmenter import render_turn
from memory.time_expressions import anchor_of

TENANT = "locomo"
# The config sections a system reads (a section name -> None for all of it, or the names of the fields it reads);
# None: the whole tree (engram). The answer cache is keyed by these values only (``bench.locomo.config_hash``).
ConfigReads = Mapping[str, tuple[str, ...] | None] | None
# What every system reads to answer: the models, their engine settings and the master's section.
MASTER_READS: dict[str, tuple[str, ...] | None] = {"engine": None, "models": None, "episodic": None}
Engines = GenerationEngine | Mapping[Role, GenerationEngine]


@dataclass
class Answer:
    text: str
    evidence_turn_ids: list[str]
    routed_turn_ids: list[str]
    segments: int
    assistant_bill: TokenBill = field(default_factory=TokenBill)
    master_bill: TokenBill = field(default_factory=TokenBill)
    offered: list[tuple[str, float]] = field(default_factory=list)  # (turn id, score) the assistants offered


def turn_evidence(turn: Any, segment_id: int = -1, ground_dates: bool = False) -> Evidence:
    """A LoCoMo turn as an evidence line; with ``ground_dates`` its relative dates grounded, as engram's write path
    stores it (``episodic.ground_dates``)."""
    line = render_turn(turn, anchor_of(turn.timestamp) if ground_dates else None)
    return Evidence(turn.turn_id, line, turn.timestamp, segment_id)


def answer_of(res: MasterAnswer, routed: list[str], segments: int, assistant_bill: TokenBill | None = None,
              offered: list[tuple[str, float]] | None = None) -> Answer:
    """The answer record of the master's ``res``."""
    return Answer(res.text, [e.turn_id for e in res.evidence], routed, segments, assistant_bill or TokenBill(),
                  res.bill, offered or [])


def per_role(engine: Engines) -> dict[Role, GenerationEngine]:
    """One engine for every role, or the engine of each role as given."""
    return dict(engine) if isinstance(engine, Mapping) else dict.fromkeys(ROLES, engine)
