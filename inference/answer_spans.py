"""Answers as spans of the evidence: LoCoMo's gold answers are short phrases, mostly words of the conversation, and
a small model's free answer wraps them in words of its own. Two ways to keep an answer to the evidence's words:

- :func:`snap` — after free generation: the span of the evidence lines closest (token F1) to the model's answer
  replaces it, when one is close enough; a list's items are snapped one by one;
- :func:`candidate_spans` — before generation: the short phrases of the evidence lines that a constrained choice
  may pick from (``GenerationRequest.choice``), so the answer is a span by construction.

A line's ``[date] speaker:`` header and its grounded date values (``yesterday [7 May 2023]``) are not part of any
span. Plain functions, no model.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence

from memory.bm25 import QUESTION_WORDS, STOP_WORDS, porter

_HEADER = re.compile(r"^\[[^\]]*\]\s*[^:\n]{1,60}:\s*")  # "[1:56 pm on 8 May, 2023] Caroline: "
_BRACKETS = re.compile(r"\s*\[[^\]]*\]")  # grounded values "[7 May 2023]"
_CLAUSE = re.compile(r"[.!?;:()\"]+|,\s|\s[-\u2013\u2014]+\s")  # where a phrase cannot run on
_EDGE = re.compile(r"^[^\w$£€]+|[^\w%)]+$")  # punctuation a span does not start or end with
_TOKEN = re.compile(r"[a-z0-9]+")
_SKIP = STOP_WORDS | frozenset("and or but so then just really very too also like yeah oh hey wow lol".split())
MAX_SPAN_WORDS = 6


def line_body(line: str) -> str:
    """What the speaker said: the line without its header and grounded date values.

    >>> line_body("[1:56 pm on 8 May, 2023] Caroline: I went yesterday [7 May 2023] to a support group.")
    'I went yesterday to a support group.'
    """
    return _BRACKETS.sub("", _HEADER.sub("", line, count=1)).strip()


def _tokens(text: str) -> list[str]:
    stem = porter()
    return [stem(t) for t in _TOKEN.findall(text.lower()) if t not in ("a", "an", "the", "and")]


def token_f1(a: str, b: str) -> float:
    """Token-multiset F1 of two phrases (lowercase, no articles, Porter stems), as LoCoMo scores answers.

    >>> round(token_f1("a pottery class", "pottery classes with kids"), 2)
    0.67
    """
    ta, tb = Counter(_tokens(a)), Counter(_tokens(b))
    common = sum((ta & tb).values())
    if not common:
        return 0.0
    p, r = common / sum(ta.values()), common / sum(tb.values())
    return 2 * p * r / (p + r)


def phrases(line: str) -> list[list[str]]:
    """The line's clauses (split at sentence and clause punctuation) as lists of words, edge punctuation cut."""
    out = []
    for clause in _CLAUSE.split(line_body(line)):
        words = [w for w in (_EDGE.sub("", w) for w in clause.split()) if w]
        if words:
            out.append(words)
    return out


def spans(lines: Sequence[str], max_words: int = MAX_SPAN_WORDS) -> list[str]:
    """Every run of 1..``max_words`` words inside one clause of the lines, once each, in reading order."""
    out: dict[str, None] = {}
    for line in lines:
        for words in phrases(line):
            for i in range(len(words)):
                for n in range(1, min(max_words, len(words) - i) + 1):
                    out.setdefault(" ".join(words[i : i + n]))
    return list(out)


def snap(answer: str, lines: Sequence[str], *, min_f1: float = 0.5, max_words: int = MAX_SPAN_WORDS,
         items: bool = False) -> str:
    """The span of ``lines`` with the highest token F1 against ``answer`` (the shorter of equals), when that F1 is at
    least ``min_f1``; else ``answer`` unchanged. ``items``: snap each comma-separated item of a list on its own.

    >>> snap("She went to a pottery class", ["[1 May] Ann: I took the kids to a pottery class, it was fun!"])
    'to a pottery class'
    >>> snap("Likely yes", ["[1 May] Ann: I love it."])
    'Likely yes'
    """
    if items and "," in answer:
        return ", ".join(snap(part.strip(), lines, min_f1=min_f1, max_words=max_words)
                         for part in answer.split(",") if part.strip())
    limit = max(max_words, len(answer.split()) + 2)
    best: str | None = None
    best_f1 = min_f1
    for span in spans(lines, limit):
        f1 = token_f1(answer, span)
        if f1 > best_f1 or (f1 == best_f1 and (best is None or len(span) < len(best))):
            best, best_f1 = span, f1
    return answer if best is None else best


def candidate_spans(question: str, lines: Sequence[str], *, max_words: int = 4, limit: int = 256) -> list[str]:
    """Short phrases of the lines a constrained answer may be: runs of 1..``max_words`` words of one clause that
    neither start nor end with a stop word and hold a word the question does not (an answer adds something),
    in the lines' reading order, at most ``limit``.

    >>> candidate_spans("What kind of flooring is Jon looking for?",
    ...                 ["[2 pm] Jon: I'm after Marley flooring, which dance studios use."])[:4]
    ["I'm", "I'm after", "I'm after Marley", "I'm after Marley flooring"]
    """
    asked = set(_tokens(question)) | set(_tokens(" ".join(QUESTION_WORDS)))
    out: dict[str, None] = {}
    for span in spans(lines, max_words):
        words = span.split()
        if words[0].lower() in _SKIP or words[-1].lower() in _SKIP:
            continue
        if not set(_tokens(span)) - asked:
            continue
        out.setdefault(span)
        if len(out) == limit:
            break
    return list(out)
