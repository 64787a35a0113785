"""The demo conversation that ships with the project (``corpora/demo_conversation.json``), for ``engram demo``.

Original text written for this project (no data set needed): Maya and Tom talk in four dated sessions
(March to July 2024), 14 turns each. It holds facts worth keeping, one fact that changes (Maya lives in Leeds,
then moves to Bristol on 1 June 2024), a date said twice and then referred to relatively ("three weeks ago"),
and questions with their expected answers: ``changed`` (the newer value is right), ``temporal``, ``not_said``
(about something never said: the right answer is that memory does not hold it) and a plain ``fact``.

Turns load as :class:`corpora.locomo.Turn` (ids ``D<session>:<n>``, per-turn ISO timestamps and LoCoMo's
``date_time`` style), so ``cluster.cli_ingest.locomo_batches`` posts them as it posts LoCoMo's.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from importlib import resources
from typing import Literal

from corpora.locomo import Turn
from pipeline.write_path import format_date_time

__all__ = ["DEMO_FILE", "DemoConversation", "DemoQuestion", "DemoSession", "load_demo"]

DEMO_FILE = "demo_conversation.json"  # package data of ``corpora``
DemoQuestionKind = Literal["changed", "temporal", "not_said", "fact"]
QUESTION_KINDS: tuple[str, ...] = ("changed", "temporal", "not_said", "fact")


@dataclass(frozen=True, slots=True)
class DemoSession:
    number: int
    start: datetime


@dataclass(frozen=True, slots=True)
class DemoQuestion:
    """A question with the answer expected of the service; ``old_answer`` is the superseded value (``changed``)."""

    kind: DemoQuestionKind
    question: str
    answer: str
    evidence: list[str] = field(default_factory=list)
    old_answer: str | None = None


@dataclass(frozen=True, slots=True)
class DemoConversation:
    sample_id: str
    title: str
    speakers: tuple[str, str]
    sessions: list[DemoSession]
    turns: list[Turn]
    questions: list[DemoQuestion]


def load_demo(text: str | None = None) -> DemoConversation:
    """The shipped conversation (or one in the same JSON form, given as ``text``); raises ``ValueError`` on a
    malformed file: an unknown question kind, an evidence id that names no turn, sessions or times out of order."""
    if text is None:
        text = resources.files("corpora").joinpath(DEMO_FILE).read_text(encoding="utf-8")
    doc = json.loads(text)
    sample_id = doc["id"]
    sessions: list[DemoSession] = []
    turns: list[Turn] = []
    for raw in doc["sessions"]:
        session = DemoSession(int(raw["session"]), datetime.fromisoformat(raw["start"]))
        if sessions and session.start <= sessions[-1].start:
            raise ValueError(f"session {session.number} starts before the one it follows")
        sessions.append(session)
        for t in raw["turns"]:
            stamp = datetime.fromisoformat(t["timestamp"])
            if stamp < session.start or (turns and stamp < turns[-1].timestamp):
                raise ValueError(f"turn {t['id']}: its time {t['timestamp']} is out of order")
            turns.append(Turn(conv_id=sample_id, dia_id=t["id"], session=session.number, index=len(turns),
                              speaker=t["speaker"], text=t["text"], date_time=format_date_time(stamp),
                              timestamp=stamp))
    ids = {t.dia_id for t in turns}
    questions = []
    for q in doc["questions"]:
        if q["kind"] not in QUESTION_KINDS:
            raise ValueError(f"unknown question kind {q['kind']!r}; expected one of {QUESTION_KINDS}")
        unknown = [e for e in q.get("evidence", []) if e not in ids]
        if unknown:
            raise ValueError(f"question {q['question']!r}: evidence {unknown} names no turn")
        questions.append(DemoQuestion(q["kind"], q["question"], q["answer"], list(q.get("evidence", [])),
                                      q.get("old_answer")))
    speakers = tuple(doc["speakers"])
    if len(speakers) != 2 or {t.speaker for t in turns} - set(speakers):
        raise ValueError(f"expected two speakers, {speakers}, to say every turn")
    return DemoConversation(sample_id, doc["title"], speakers, sessions, turns, questions)
