"""Typed loader for LoCoMo (``locomo10.json``, snap-research/LoCoMo).

The file is read from a path the caller passes in (normally
``load_config().data.locomo_path``, overridable by ``ENGRAM_DATA__LOCOMO_PATH``);
nothing here reads config or copies the data.

Stream order: sessions in numeric order (``session_1``, ``session_2``, ...), turns in
list order. Only sessions that have a turn list are read: conv-26 carries
``session_20_date_time`` … ``session_35_date_time`` with no ``session_<n>`` lists.

Every turn of a session carries that session's date string (LoCoMo has no per-turn
time). An image turn's ``blip_caption`` is appended to its text as
``[shares a photo: <caption>]`` so that what the picture shows is searchable.

Evidence ids are normalised (see :func:`normalize_evidence`); as of commit 3eb6f2c
the raw file has these defects, which the loader handles as follows:

- several ids in one string: ``"D8:6; D9:17"`` (conv-26), ``"D9:1 D4:4 D4:6"`` and two
  more in conv-49 → split on whitespace, ``;`` and ``,``;
- ``"D:11:26"`` (conv-43) → ``D11:26``; ``"D30:05"`` (conv-50) → ``D30:5``;
- ``"D"`` (conv-42) → dropped (nothing to recover);
- ids naming a turn that does not exist: ``D10:19`` (conv-42, session 10 has 16 turns)
  and ``D4:36`` (conv-47, session 4 has 25) → dropped.

The untouched list stays in :attr:`Question.raw_evidence`.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Literal

from memory.segmenter import render_turn

__all__ = [
    "Conversation",
    "LOCOMO_SOURCE",
    "LoCoMoNotFoundError",
    "Question",
    "SPLITS",
    "TEST_IDS",
    "TRAIN_IDS",
    "Turn",
    "load_locomo",
    "locomo_missing",
    "normalize_evidence",
    "parse_session_datetime",
    "render_turn",
    "split",
]

# Project split (shared/data/README.md): conversations 1–7 in file order train, 8–10 test.
TRAIN_IDS: tuple[str, ...] = ("conv-26", "conv-30", "conv-41", "conv-42", "conv-43", "conv-44", "conv-47")
TEST_IDS: tuple[str, ...] = ("conv-48", "conv-49", "conv-50")
SPLITS = ("train", "test", "all")
Split = Literal["train", "test", "all"]

# Where to get the file (the project reads it in place, never copies it: shared/data/README.md).
LOCOMO_SOURCE = "https://github.com/snap-research/locomo (data/locomo10.json)"
PHOTO_TEMPLATE = "[shares a photo: {caption}]"
_MONTH_NAMES = "january february march april may june july august september october november december"
_MONTHS = {name: i for i, name in enumerate(_MONTH_NAMES.split(), start=1)}
_DATE_RE = re.compile(r"\s*(\d{1,2}):(\d{2})\s*([ap]m)\s+on\s+(\d{1,2})\s+([A-Za-z]+),?\s+(\d{4})\s*", re.I)
_SESSION_KEY_RE = re.compile(r"session_(\d+)")
_EVIDENCE_RE = re.compile(r"D:?(\d+):(\d+)")
_EVIDENCE_SEP_RE = re.compile(r"[\s;,]+")


@dataclass(frozen=True, slots=True)
class Turn:
    """One dialogue turn. ``index`` is the 0-based position in its conversation's stream."""

    conv_id: str
    dia_id: str
    session: int
    index: int
    speaker: str
    text: str
    date_time: str
    timestamp: datetime

    @property
    def turn_id(self) -> str:
        """The id the segmenter keeps (unique within a conversation)."""
        return self.dia_id


@dataclass(frozen=True, slots=True)
class Question:
    """One QA item.

    ``answer`` is always a string: ints become ``str(int)``; category 5 items usually have
    no answer in the file and get ``""`` (two conv-26 items have both an answer and an
    adversarial answer). ``adversarial`` is the file's ``adversarial_answer`` (the wrong
    answer category 5 tempts with), ``None`` elsewhere. ``evidence`` is normalised.
    """

    conv_id: str
    question: str
    answer: str
    category: int
    evidence: list[str]
    adversarial: str | None = None
    raw_evidence: list[str] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Conversation:
    """One LoCoMo sample: two speakers, turns in stream order, and its questions."""

    sample_id: str
    speakers: tuple[str, str]
    turns: list[Turn]
    questions: list[Question]

    def turn_map(self) -> dict[str, Turn]:
        """``dia_id`` → turn."""
        return {t.dia_id: t for t in self.turns}


def parse_session_datetime(value: str) -> datetime:
    """Parse a LoCoMo session date (naive, no time zone); locale-independent.

    ``parse_session_datetime("1:56 pm on 8 May, 2023") == datetime(2023, 5, 8, 13, 56)``
    """
    m = _DATE_RE.fullmatch(value)
    if m is None or m[5].lower() not in _MONTHS:
        raise ValueError(f"unrecognised LoCoMo date string: {value!r}")
    hour, minute, ampm, day, month, year = int(m[1]), int(m[2]), m[3].lower(), int(m[4]), m[5], int(m[6])
    if not 1 <= hour <= 12:
        raise ValueError(f"hour out of range in {value!r}")
    hour = hour % 12 + (12 if ampm == "pm" else 0)
    return datetime(year, _MONTHS[month.lower()], day, hour, minute)


def normalize_evidence(raw: Iterable[str], valid: set[str] | None = None) -> list[str]:
    """Split, repair and de-duplicate evidence ids; drop what cannot be repaired.

    ``normalize_evidence(["D9:1 D4:4", "D:11:26", "D30:05", "D", "D4:4"]) ==
    ["D9:1", "D4:4", "D11:26", "D30:5"]``. With ``valid``, ids not in it are dropped too.
    """
    out: list[str] = []
    for entry in raw:
        for piece in _EVIDENCE_SEP_RE.split(str(entry).strip()):
            m = _EVIDENCE_RE.fullmatch(piece)
            if m is None:
                continue
            dia_id = f"D{int(m[1])}:{int(m[2])}"
            if (valid is None or dia_id in valid) and dia_id not in out:
                out.append(dia_id)
    return out


def _read_turns(sample_id: str, conv: dict) -> list[Turn]:
    # NOTE: iterate over the turn lists, not the *_date_time keys (conv-26 has 16 dates without a list).
    sessions = sorted(
        (int(m[1]), key)
        for key in conv
        if (m := _SESSION_KEY_RE.fullmatch(key)) and isinstance(conv[key], list)
    )
    turns: list[Turn] = []
    for number, key in sessions:
        date_time = conv[f"{key}_date_time"]
        stamp = parse_session_datetime(date_time)
        for raw in conv[key]:
            text = raw["text"]
            caption = raw.get("blip_caption")
            if isinstance(caption, str) and caption.strip():
                text = f"{text} {PHOTO_TEMPLATE.format(caption=caption.strip())}"
            turns.append(
                Turn(
                    conv_id=sample_id,
                    dia_id=raw["dia_id"],
                    session=number,
                    index=len(turns),
                    speaker=raw["speaker"],
                    text=text,
                    date_time=date_time,
                    timestamp=stamp,
                )
            )
    return turns


def _read_question(sample_id: str, raw: dict, valid: set[str]) -> Question:
    answer = raw.get("answer")
    adversarial = raw.get("adversarial_answer")
    return Question(
        conv_id=sample_id,
        question=raw["question"],
        answer="" if answer is None else str(answer),
        category=int(raw["category"]),
        evidence=normalize_evidence(raw.get("evidence", []), valid),
        adversarial=None if adversarial is None else str(adversarial),
        raw_evidence=list(raw.get("evidence", [])),
    )


class LoCoMoNotFoundError(FileNotFoundError):
    """No ``locomo10.json`` at the path given; the message (one line) says how to get and point to it."""


def locomo_missing(path: str | Path, flag: str | None = None) -> str:
    """The one-line message for a missing LoCoMo file: the path, how to point to the file (``flag``: a command-line
    option that does it too) and where to download it."""
    how = f"pass {flag} or set" if flag else "set"
    return (f"LoCoMo not found at {path}; {how} data.locomo_path (env ENGRAM_DATA__LOCOMO_PATH) to locomo10.json, "
            f"downloaded from {LOCOMO_SOURCE}")


def load_locomo(path: str | Path) -> list[Conversation]:
    """Read ``locomo10.json`` into conversations, in file order; ``LoCoMoNotFoundError`` when there is no file."""
    if not Path(path).is_file():
        raise LoCoMoNotFoundError(locomo_missing(path))
    with Path(path).open(encoding="utf-8") as f:
        samples = json.load(f)
    conversations = []
    for sample in samples:
        sample_id = sample["sample_id"]
        conv = sample["conversation"]
        turns = _read_turns(sample_id, conv)
        valid = {t.dia_id for t in turns}
        questions = [_read_question(sample_id, q, valid) for q in sample["qa"]]
        speakers = (conv["speaker_a"], conv["speaker_b"])
        conversations.append(Conversation(sample_id, speakers, turns, questions))
    return conversations


def split(conversations: Sequence[Conversation], name: Split) -> list[Conversation]:
    """The project's split by sample id (train: conv-26 … conv-47; test: conv-48, -49, -50)."""
    if name == "all":
        return list(conversations)
    if name not in SPLITS:
        raise ValueError(f"unknown split {name!r}; expected one of {SPLITS}")
    wanted = set(TRAIN_IDS if name == "train" else TEST_IDS)
    return [c for c in conversations if c.sample_id in wanted]


# The dev set: the train split's conversations, the first DEV_PER_CATEGORY questions of each category of each
# (``bench.locomo --split dev``; ~170 questions). Read-path changes are tuned there, and the tuned reader
# (``training.train_reader``) never trains on them; the test split is for the final tables.
DEV_PER_CATEGORY = 5


def select_questions(conv: Conversation, categories: Iterable[int], limit: int | None,
                     per_category: int | None = None) -> list[tuple[int, Question]]:
    """``(index in conv.questions, question)`` for the wanted categories: with ``per_category``, the first that many
    of each category (in file order); then the first ``limit`` of them."""
    wanted, seen = set(categories), Counter()
    chosen = []
    for i, q in enumerate(conv.questions):
        if q.category in wanted and (per_category is None or seen[q.category] < per_category):
            seen[q.category] += 1
            chosen.append((i, q))
    return chosen if limit is None else chosen[:limit]
