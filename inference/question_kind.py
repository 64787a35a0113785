"""The kind of a question (:class:`QuestionKind`), from its words alone: what ``/v1/ask`` knows when no hint is sent.

The master answers each kind in its own way (``inference/master.py``: a date for a temporal question, "Likely
yes/no" for an inference, a list for a question that asks for several things, a short phrase for a fact). A user
of the service labels nothing, so the kind is predicted here by rules read off the train split's questions
(``python -m bench.question_kind`` measures them against a labelled set). Whether a question rests on a false
premise cannot be told from the question: there is no such kind.

    >>> predict_kind("When did Caroline go to the LGBTQ support group?")
    <QuestionKind.TEMPORAL: 'temporal'>
    >>> predict_kind("Would Caroline likely have Dr. Seuss books on her bookshelf?")
    <QuestionKind.INFERENCE: 'inference'>
    >>> predict_kind("What activities does Melanie partake in?")
    <QuestionKind.LIST: 'list'>
    >>> predict_kind("What did Caroline research?")
    <QuestionKind.FACT: 'fact'>
"""

from __future__ import annotations

import re
from enum import StrEnum

__all__ = ["QuestionKind", "is_choice", "is_yes_no", "predict_kind"]


class QuestionKind(StrEnum):
    """How a question is answered: ``list`` (several things, comma-separated), ``temporal`` (a date),
    ``inference`` (a guess: "Likely yes/no" or a phrase), ``fact`` (a short phrase from the evidence)."""

    LIST = "list"
    TEMPORAL = "temporal"
    INFERENCE = "inference"
    FACT = "fact"


LIST, TEMPORAL, INFERENCE, FACT = QuestionKind.LIST, QuestionKind.TEMPORAL, QuestionKind.INFERENCE, QuestionKind.FACT

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


def predict_kind(question: str) -> QuestionKind:
    """``TEMPORAL``, ``INFERENCE``, ``LIST`` or ``FACT`` (checked in that order)."""
    q = question.strip()
    if TEMPORAL_RX.search(q):
        return TEMPORAL
    if is_choice(q):
        return FACT
    if INFERENCE_RX.search(q):
        return INFERENCE
    if LIST_RX.search(q):
        return LIST
    return FACT
