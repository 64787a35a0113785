"""``full_context``: the conversation's most recent turns that fit the master's window."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from bench.systems.common import MASTER_READS, Answer, ConfigReads, Engines, answer_of, per_role, turn_evidence
from core.config import EngramConfig
from core.encoding import Encoder
from inference.master import Master
from inference.question_kind import QuestionKind


class FullContextBaseline:
    """The whole conversation, cut to the model's window: the most recent turns that fit."""

    name = "full_context"
    config_reads: ConfigReads = MASTER_READS

    def __init__(self, config: EngramConfig, *, encoder: Encoder, engine: Engines) -> None:
        self.master = Master(per_role(engine)["master"], config.episodic)

    def ingest(self, turns: Sequence[Any]) -> None:
        self.turns = list(turns)

    def ask(self, question: str, *, kind: QuestionKind | None = None) -> Answer:
        evidence = self.master.fit([turn_evidence(t) for t in reversed(self.turns)], question)
        return answer_of(self.master.respond(question, evidence, kind),
                       [e.turn_id for e in evidence], 0)
