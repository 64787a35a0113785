"""The kind of a question, from its words alone: what ``/v1/ask`` knows when no category is sent.

The master answers each kind in its own way (``inference/master.py``: a date for a temporal question, "Likely
yes/no" for an inference, a list for a question that asks for several things, a short phrase otherwise). LoCoMo
labels its questions with these kinds (categories 2, 3, 1, 4); a user of the service labels nothing, so the kind
is predicted here by rules read off the train split's questions (``python -m bench.question_kind`` measures
them). Whether a question rests on a false premise (LoCoMo's category 5) cannot be told from the question: it
is never predicted.

    >>> predict_kind("When did Caroline go to the LGBTQ support group?")
    2
    >>> predict_kind("Would Caroline likely have Dr. Seuss books on her bookshelf?")
    3
    >>> predict_kind("What activities does Melanie partake in?")
    1
    >>> predict_kind("What did Caroline research?")
    4
"""

from __future__ import annotations

import re

__all__ = ["LIST", "OTHER", "INFERENCE", "TEMPORAL", "is_choice", "is_yes_no", "predict_kind"]

LIST, TEMPORAL, INFERENCE, OTHER = 1, 2, 3, 4  # LoCoMo's category numbers for the kinds

TEMPORAL_RX = re.compile(
    r"^(?:when\b|since when\b|what (?:year|month|date|day|time)\b|in (?:which|what) (?:year|month)\b|"
    r"how long ago\b|how many (?:years|months|weeks|days) ago\b)|\b(?:how long ago|ago\?)", re.IGNORECASE)
INFERENCE_RX = re.compile(  # a guess asked for ("might", "would", "likely") or a yes/no question
    r"^(?:is it likely|does it seem|(?:does|did|is|was|are|were|has|have|do|can|will)\s+\w+)|"
    r"\b(?:might|could|would|likely|probably|potentially|possibly|be considered)\b", re.IGNORECASE)
LIST_RX = re.compile(
    r"^(?:how many\b|what are\b|what (?:\w+ ){0,2}(?:activities|items|books|events|hobbies|places|things|pets|"
    r"kinds|types|ways|sports|instruments|games|countries|cities|artists|songs|movies|foods|classes|symbols|"
    r"paintings|names|gifts|plans|changes|steps|subjects|topics)\b|which (?:\w+ ){0,2}(?:\w+s)\b.*\bhas\b)",
    re.IGNORECASE)


YES_NO_RX = re.compile(r"^(?:would|could|should|is|are|was|were|does|do|did|can|will|has|have|had)\b", re.IGNORECASE)
CHOICE_RX = re.compile(r"\sor\s+[^?]+\?\s*$", re.IGNORECASE)  # "... a beach or the mountains?" (not "and/or")


def _offers_options(question: str) -> bool:
    """Whether the question ends by offering its answers ("... a beach or the mountains?"), not "yes or no"."""
    return bool(CHOICE_RX.search(question)) and "yes or no" not in question.lower()


def is_yes_no(question: str) -> bool:
    """Whether the question asks for a yes or a no ("Would Ann enjoy ...?") rather than a phrase."""
    q = question.strip()
    return bool(YES_NO_RX.match(q)) and not _offers_options(q)


def is_choice(question: str) -> bool:
    """Whether a yes/no-shaped question offers its answers ("Does John live close to a beach or the mountains?"):
    it is answered with the option the evidence supports, as a phrase, not with a yes or a no ("Answer yes or no."
    is a yes/no question)."""
    q = question.strip()
    return bool(YES_NO_RX.match(q)) and _offers_options(q)


def predict_kind(question: str) -> int:
    """``TEMPORAL``, ``INFERENCE``, ``LIST`` or ``OTHER`` (checked in that order)."""
    q = question.strip()
    if TEMPORAL_RX.search(q):
        return TEMPORAL
    if is_choice(q):
        return OTHER
    if INFERENCE_RX.search(q):
        return INFERENCE
    if LIST_RX.search(q):
        return LIST
    return OTHER
