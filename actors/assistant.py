"""Assistants (E-mem): many raw episodic segments per host, re-read by a small model on demand.

An ``AssistantHost`` keeps segments verbatim (one "assistant" per segment) and, for a batch of
(segment, question) pairs, asks the shared engine which of the segment's numbered lines hold
the evidence. The answer is valid by construction: with a regex-capable engine (vLLM) the
output is constrained to a comma list of the segment's own line numbers or ``none``; otherwise
the engine scores every line number as a choice and the best-scored ones (those above ``none``)
are taken. Evidence is returned verbatim with its timestamp and turn id — never paraphrased.
All requests of one call go to the engine as one batch.
"""

from __future__ import annotations

import re
from collections.abc import KeysView, Sequence
from dataclasses import dataclass
from datetime import datetime

from actors.segmenter import Segment
from serve.engine import GenerationEngine, GenerationRequest, TokenBill

NONE = "none"
EXTRACT_SYSTEM = "You find the lines of a conversation log that answer a question. You only reply with line numbers."


@dataclass(frozen=True)
class Evidence:
    """One verbatim line: ``[date] speaker: text``, its turn id and time."""

    turn_id: str
    content: str
    timestamp: datetime
    segment_id: int


def line_regex(n_lines: int, most: int) -> str:
    """Regex of 'none' or 1..most distinct-looking line numbers in 1..n_lines, comma-separated.

    >>> line_regex(3, 2)
    'none|(1|2|3)(, (1|2|3)){0,1}'
    """
    number = "(" + "|".join(str(i) for i in range(1, n_lines + 1)) + ")"
    return f"{NONE}|{number}(, {number}){{0,{most - 1}}}"


def extraction_prompt(segment: Segment, question: str) -> str:
    lines = "\n".join(f"[{i}] {line}" for i, line in enumerate(segment.lines, start=1))
    return (
        f"Conversation log:\n{lines}\n\nQuestion: {question}\n"
        "Which line numbers contain the information needed to answer the question? "
        "Reply with the line numbers separated by commas, or none."
    )


class AssistantHost:
    """Holds many segments; extracts evidence for (segment id, question) pairs in one engine batch."""

    def __init__(self, engine: GenerationEngine, *, evidence_per_segment: int = 5) -> None:
        self.engine = engine
        self.evidence_per_segment = evidence_per_segment
        self._segments: dict[int, Segment] = {}

    def __getstate__(self) -> dict:
        return {**self.__dict__, "engine": None}  # NOTE: a snapshot holds segments, never the engine

    def add(self, segments: Sequence[Segment]) -> None:
        for seg in segments:
            self._segments[seg.id] = seg

    def __len__(self) -> int:
        return len(self._segments)

    def segment(self, segment_id: int) -> Segment:
        return self._segments[segment_id]

    @property
    def segment_ids(self) -> KeysView[int]:
        """A live view of the held segment ids (O(1) membership; copy it to keep or send it)."""
        return self._segments.keys()

    def forget(self, turn_ids: Sequence[str]) -> int:
        """Remove these turns' lines from every held segment; returns how many lines were removed."""
        drop = set(turn_ids)
        return sum(seg.drop_turns(drop) for seg in self._segments.values())

    def extract(self, pairs: Sequence[tuple[int, str]]) -> tuple[list[list[Evidence]], TokenBill]:
        """Evidence per (segment id, question) pair, in order, and the tokens it cost."""
        segments = [self._segments[sid] for sid, _ in pairs]
        regex = getattr(self.engine, "supports_regex", False)
        requests = []
        for seg, (_, question) in zip(segments, pairs, strict=True):
            messages = [{"role": "system", "content": EXTRACT_SYSTEM},
                        {"role": "user", "content": extraction_prompt(seg, question)}]
            n = len(seg.lines)
            if regex:
                most = min(self.evidence_per_segment, n)
                requests.append(GenerationRequest(messages=messages, regex=line_regex(n, most),
                                                  max_tokens=4 * most + 2))
            else:
                requests.append(GenerationRequest(messages=messages, choice=[NONE, *map(str, range(1, n + 1))]))
        results = self.engine.generate(requests)
        out = []
        for seg, res in zip(segments, results, strict=True):
            picked = self._picked(res, len(seg.lines))
            out.append([Evidence(seg.turn_ids[i], seg.lines[i], seg.timestamps[i], seg.id) for i in picked])
        return out, TokenBill.of(results)

    def _picked(self, result, n_lines: int) -> list[int]:
        """0-based line indexes, in the segment's order."""
        if result.choice_logprobs:  # scored choices: the lines ranked above "none", best first
            ranked = list(result.choice_logprobs)
            above = ranked[: ranked.index(NONE)] if NONE in ranked else ranked
            chosen = [int(c) - 1 for c in above[: self.evidence_per_segment]]
        else:
            chosen = [int(x) - 1 for x in re.findall(r"\d+", result.text)]
        return sorted({i for i in chosen if 0 <= i < n_lines})
