"""The master (E-mem): gathers evidence, orders it by time, and answers in a short phrase.

The evidence lines are sorted oldest first and headed by a note that later lines hold the
latest state, unless the question asks about the past. Instructions depend on the question's
category, as in E-mem's final answer step:

- temporal questions are answered with a date: the model picks the evidence line that dates the
  event (a constrained choice) and the answer is that line's date, written "7 May 2023";
- adversarial questions (category 5) choose between the proposed answer and "Not mentioned in the
  conversation" (a constrained choice);
- the rest get a short phrase, cleaned of speaker prefixes and trailing punctuation.

With no evidence at all the answer is "Not mentioned in the conversation" and no model call is made.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from actors.assistant import Evidence
from serve.engine import GenerationEngine, GenerationRequest, TokenBill

SYSTEM = (
    "You answer questions about a long conversation using only the evidence lines given. "
    "Answer with a short phrase, not a sentence."
)
INSTRUCTIONS = {
    1: "Answer with a short phrase; if several things are asked for, list them separated by commas.",
    2: "Which evidence line tells when this happened? Reply with its number.",
    3: "Answer with a short phrase. If it is a yes/no question, start with 'Likely yes' or 'Likely no'.",
    4: "Answer with a short phrase copied from the evidence.",
    5: "Does the conversation say this? Reply with the answer or say it is not mentioned.",
}
DEFAULT_INSTRUCTION = INSTRUCTIONS[4]


def format_date(ts: datetime) -> str:
    """LoCoMo's answer style.

    >>> format_date(datetime(2023, 5, 7, 13, 56))
    '7 May 2023'
    """
    return f"{ts.day} {ts:%B} {ts.year}"


def dialogue_order(evidence: Evidence) -> tuple[datetime, list[str | int]]:
    """Sort key: time, then the turn id with its numbers compared as numbers (turns of one session share
    their time in LoCoMo), so ``D3:9`` comes before ``D3:10``.

    >>> [e.turn_id for e in sorted([Evidence("D3:10", "", datetime(2023, 5, 7), 0),
    ...                             Evidence("D3:9", "", datetime(2023, 5, 7), 0)], key=dialogue_order)]
    ['D3:9', 'D3:10']
    """
    parts = re.split(r"(\d+)", evidence.turn_id)  # text, number, text, ...: alike positions compare alike
    return evidence.timestamp, [int(p) if i % 2 else p for i, p in enumerate(parts)]


def clean_answer(text: str) -> str:
    """First line, without 'Answer:' or a speaker prefix, quotes or a final full stop.

    >>> clean_answer("Answer: Caroline: a pottery class.")
    'a pottery class'
    """
    line = text.strip().split("\n", 1)[0].strip()
    line = re.sub(r"^(answer\s*:\s*)", "", line, flags=re.I)
    line = re.sub(r"^[A-Z][a-z]+:\s+", "", line)  # "Caroline: ..." -> "..."
    return line.strip().rstrip(".").strip().strip('"').strip()


@dataclass
class MasterAnswer:
    text: str
    evidence: list[Evidence]
    bill: TokenBill


class Master:
    """Answers from evidence with one engine call per question (or a batch of questions)."""

    def __init__(self, engine: GenerationEngine, *, max_tokens: int = 24, not_mentioned: str = "") -> None:
        self.engine = engine
        self.max_tokens = max_tokens
        self.not_mentioned = not_mentioned or "Not mentioned in the conversation"

    def prompt(self, question: str, evidence: Sequence[Evidence], category: int | None) -> str:
        lines = "\n".join(f"[{i}] {e.content}" for i, e in enumerate(evidence, start=1))
        return (
            "Evidence, oldest first (later lines hold the latest state unless the question asks about the past):\n"
            f"{lines}\n\nQuestion: {question}\n{INSTRUCTIONS.get(category or 0, DEFAULT_INSTRUCTION)}"
        )

    def request(self, question: str, evidence: Sequence[Evidence], category: int | None,
                adversarial: str | None) -> GenerationRequest:
        messages = [{"role": "system", "content": SYSTEM},
                    {"role": "user", "content": self.prompt(question, evidence, category)}]
        # NOTE: every request states max_tokens, so the caller's prompt budget (window - max_tokens) holds.
        if category == 2:
            return GenerationRequest(messages=messages, choice=[str(i) for i in range(1, len(evidence) + 1)],
                                     max_tokens=self.max_tokens)
        if category == 5 and adversarial and clean_answer(adversarial) != self.not_mentioned:
            return GenerationRequest(messages=messages, choice=[clean_answer(adversarial), self.not_mentioned],
                                     max_tokens=self.max_tokens)
        return GenerationRequest(messages=messages, max_tokens=self.max_tokens)

    def answer_batch(
        self, items: Sequence[tuple[str, Sequence[Evidence], int | None, str | None]]
    ) -> list[MasterAnswer]:
        """(question, evidence, category, adversarial answer) per question -> answers, one engine batch."""
        ordered = [sorted(ev, key=dialogue_order) for _, ev, _, _ in items]
        todo = [i for i, ev in enumerate(ordered) if ev]
        requests = [self.request(items[i][0], ordered[i], items[i][2], items[i][3]) for i in todo]
        results = self.engine.generate(requests) if requests else []
        out = [MasterAnswer(self.not_mentioned, [], TokenBill()) for _ in items]
        for i, res in zip(todo, results, strict=True):
            category, evidence = items[i][2], ordered[i]
            if category == 2:
                text = format_date(evidence[int(res.text.strip()) - 1].timestamp)
            else:
                text = clean_answer(res.text) or self.not_mentioned
            out[i] = MasterAnswer(text, evidence, res.bill)
        return out

    def answer(self, question: str, evidence: Sequence[Evidence], category: int | None = None,
               adversarial: str | None = None) -> MasterAnswer:
        return self.answer_batch([(question, evidence, category, adversarial)])[0]
