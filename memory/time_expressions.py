"""Relative time expressions in a turn, resolved against the turn's own date ("grounded dates").

A turn said on 8 May 2023 that reads "we went hiking yesterday" holds the fact "hiking on 7 May 2023"; a reader
that sees only the line and a session header has to do the date arithmetic itself, which small models do badly
(LoCoMo's temporal questions). :func:`resolve` finds the expressions and gives each one absolute value in the
form LoCoMo's answers use; :func:`ground` writes the values into the line::

    >>> ground("We went hiking yesterday and I start a class next month.", date(2023, 5, 8))
    'We went hiking yesterday [7 May 2023] and I start a class next month [June 2023].'

The anchor is the *local* date of the turn (the timestamp in the speaker's own zone, before it is stored in UTC):
"yesterday" said at 1 am on 8 May in Berlin is 7 May, although the turn is stored at 23:00 UTC on 7 May.

Kinds resolved (anything vaguer — "recently", "the other day", "a few days ago", a bare month name — is left
alone: a wrong date is worse than none):

- days: ``yesterday``, ``last night``, ``today``, ``tonight``, ``this morning|afternoon|evening``, ``tomorrow``,
  ``the day before yesterday``, ``the day after tomorrow`` → ``7 May 2023``;
- weekdays: ``last|this past|on|this|next Friday`` (``last Wed`` too) and a bare ``Friday`` (not ``Fridays``,
  ``every Friday``) → ``Friday, 5 May 2023`` (``on``/``this``/bare look back in a sentence in the past tense and
  forward otherwise);
- weeks and weekends: ``last|this|next week|weekend``, ``over the weekend`` → ``the week before 8 May 2023``,
  ``the weekend of 13 May 2023`` ("the last week" — the past seven days — is left alone);
- months, years, seasons: ``last|this|next month|year|summer…`` → ``April 2023``, ``2022``, ``summer 2022``;
- counts: ``two days|weeks|months|years ago``, ``in 3 weeks``, ``a year ago`` → ``6 May 2023``,
  ``the week of 24 April 2023``, ``March 2023``, ``2021``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date, datetime, timedelta

__all__ = ["Resolved", "anchor_of", "ground", "grounded_values", "resolve"]

WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
SEASONS = {"spring": 3, "summer": 6, "fall": 9, "autumn": 9, "winter": 12}  # the month a season starts in
NUMBERS = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7,
           "eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "a couple of": 2, "couple of": 2}
_NUM = r"(?P<n>\d{1,2}|a couple of|couple of|an?|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve)"
_UNIT = r"(?P<unit>day|week|month|year)s?"
ABBREVIATIONS = {"mon": 0, "tue": 1, "tues": 1, "wed": 2, "thu": 3, "thur": 3, "thurs": 3, "fri": 4}  # not sat, sun
_DAY = r"(?P<day>" + "|".join(WEEKDAYS) + r")"
_SHORT_DAY = r"(?P<day>" + "|".join(WEEKDAYS + tuple(ABBREVIATIONS)) + r")"
_PERIOD = r"(?P<period>week(?:end)?|month|year|spring|summer|fall|autumn|winter)"
_RULES = [
    ("before_yesterday", r"the day before yesterday"),
    ("after_tomorrow", r"the day after tomorrow"),
    ("ago", _NUM + r"\s+" + _UNIT + r"\s+ago"),
    ("in", r"in\s+" + _NUM + r"\s+" + _UNIT),
    ("weekday", r"(?P<rel>last|this past|this coming|on|this|next|coming)\s+" + _SHORT_DAY + r"\.?"),
    ("bare_weekday", r"(?<!every )(?<!each )(?<!a )" + _DAY + r"(?!s\b|')"),
    ("period", r"(?<!the )(?P<rel>last|this past|this coming|this|next)\s+" + _PERIOD),  # not "in the last month"
    ("over_weekend", r"over the weekend"),
    ("yesterday", r"yesterday|last night"),
    ("today", r"today|tonight|this (?:morning|afternoon|evening)"),
    ("tomorrow", r"tomorrow"),
]
RULES = {kind: re.compile(rf"\b(?:{rx})\b", re.IGNORECASE) for kind, rx in _RULES}
# NOTE: one pass over the text finds the kind (Python's re allows a group name once, so the outer pattern drops
# the rules' names); the kind's own pattern then reads the parts of the match
PATTERN = re.compile("|".join(rf"(?P<{kind}>\b(?:{re.sub(r'[(][?]P<[a-z]+>', '(?:', rx)})\b)" for kind, rx in _RULES),
                     re.IGNORECASE)
# a sentence that speaks of the past: "on Friday" in it looks back
PAST = re.compile(r"\b(?:was|were|did|had|went|got|took|made|saw|came|met|found|gave|told|said|felt|been|ago|"
                  r"won|lost|ran|wrote|bought|brought|thought|caught|taught|began|ate|drank|swam|sang|wore|flew|"
                  r"drove|rode|left|kept|slept|spent|sent|built|heard|held|stood|sold|paid|yesterday|last)\b|\b(?!(?:excit|interest|tir|scar|worri|bor|pleas|thrill|amaz|suppos|"
                  r"plann|schedul|book|need)ed\b)\w{3,}ed\b", re.IGNORECASE)  # not the -ed words of plans, moods
FUTURE = re.compile(r"\b(?:will|won't|going to|gonna|plan(?:ning)? to|can't wait|looking forward|'ll|shall)\b",
                    re.IGNORECASE)
SENTENCE_END = re.compile(r"[.!?]+(?:\s|$)")
# the values :func:`ground` writes, as they appear in a line (a turn's header "[1:56 pm on 8 May, 2023]" is not one)
VALUE = re.compile(r" \[((?:the (?:week|weekend) (?:before|of|after) )?(?:[A-Z][a-z]+day, )?\d{1,2} [A-Z][a-z]+ \d{4}|"
                   r"[A-Z][a-z]+ \d{4}|\d{4}|(?:spring|summer|fall|autumn|winter) \d{4})\]")


@dataclass(frozen=True)
class Resolved:
    """One expression: ``text[start:end]`` of the line, its ``value`` (as LoCoMo's answers write dates) and the
    days it covers (``first`` … ``last``, inclusive)."""

    start: int
    end: int
    expression: str
    value: str
    first: date
    last: date


def anchor_of(timestamp: datetime) -> date:
    """The date a turn was said on, in the speaker's zone: the timestamp as sent, before it is stored in UTC."""
    return timestamp.date()


def day_text(d: date) -> str:
    """LoCoMo's style for a day (a datetime gives its date): ``day_text(date(2023, 5, 7)) == '7 May 2023'``."""
    return f"{d.day} {d.strftime('%B')} {d.year}"


def _month_shift(d: date, months: int) -> tuple[int, int]:
    index = d.year * 12 + d.month - 1 + months
    return index // 12, index % 12 + 1


def _month_range(year: int, month: int) -> tuple[date, date]:
    nxt = date(year + month // 12, month % 12 + 1, 1)
    return date(year, month, 1), nxt - timedelta(days=1)


def _month(year: int, month: int) -> tuple[str, date, date]:
    first, last = _month_range(year, month)
    return f"{first.strftime('%B')} {year}", first, last


def _year(year: int) -> tuple[str, date, date]:
    return str(year), date(year, 1, 1), date(year, 12, 31)


def _sentence(text: str, start: int, end: int) -> str:
    left = max((m.end() for m in SENTENCE_END.finditer(text, 0, start)), default=0)
    right = SENTENCE_END.search(text, end)
    return text[left : right.start() if right else len(text)]


def _looks_back(text: str, start: int, end: int) -> bool:
    sentence = _sentence(text, start, end)
    return bool(PAST.search(sentence)) and not FUTURE.search(sentence)


def _day(d: date) -> tuple[str, date, date]:
    return day_text(d), d, d


def _weekday(anchor: date, rel: str, day: str, back: bool) -> tuple[str, date, date]:
    day = day.lower()
    target = WEEKDAYS.index(day) if day in WEEKDAYS else ABBREVIATIONS[day]
    behind = (anchor.weekday() - target) % 7 or 7  # days back to the last such day before the anchor
    ahead = (target - anchor.weekday()) % 7 or 7
    if rel in ("last", "this past") or (rel in ("on", "this") and back):
        d = anchor - timedelta(days=behind)
    elif rel == "next" and ahead < 3:  # NOTE: "next Friday" said on a Wednesday is rarely the day after tomorrow
        d = anchor + timedelta(days=ahead + 7)
    else:
        d = anchor + timedelta(days=ahead)
    return f"{d.strftime('%A')}, {day_text(d)}", d, d


def _period(anchor: date, rel: str, period: str) -> tuple[str, date, date]:
    step = -1 if rel in ("last", "this past") else 1 if rel in ("next", "this coming") else 0
    period = period.lower()
    if period == "week":
        monday = anchor - timedelta(days=anchor.weekday()) + timedelta(weeks=step)
        words = {-1: "the week before", 0: "the week of", 1: "the week after"}[step]
        return f"{words} {day_text(anchor)}", monday, monday + timedelta(days=6)
    if period == "weekend":  # Saturday and Sunday
        wd = anchor.weekday()
        if step < 0:  # the last one that is over (said at a weekend: the one before it)
            saturday = anchor - timedelta(days=(wd - 5) % 7 + (7 if wd >= 5 else 0))
            return f"the weekend before {day_text(anchor)}", saturday, saturday + timedelta(days=1)
        if step == 0 and wd >= 5:  # "this weekend" said at a weekend: this one
            saturday = anchor - timedelta(days=wd - 5)
        else:  # the next one to come
            saturday = anchor + timedelta(days=(5 - wd) % 7 or 7)
        return f"the weekend of {day_text(saturday)}", saturday, saturday + timedelta(days=1)
    if period == "month":
        return _month(*_month_shift(anchor, step))
    if period == "year":
        return _year(anchor.year + step)
    start_month = SEASONS[period]  # a season: the one of the anchor's year, or of the year before/after
    year = anchor.year - (start_month == 12 and anchor.month <= 2)  # "this winter" in January began in December
    if step < 0:  # the last one that is over: "last summer" said in October is this year's
        year -= 1 if _month_shift(date(year, start_month, 1), 3) > (anchor.year, anchor.month) else 0
    else:
        year += step
    first = date(year, start_month, 1)
    last_year, last_month = _month_shift(first, 2)
    return f"{period} {year}", first, _month_range(last_year, last_month)[1]


def _count(anchor: date, n: int, unit: str, sign: int) -> tuple[str, date, date]:
    unit = unit.lower()
    if unit == "day":
        return _day(anchor + timedelta(days=sign * n))
    if unit == "week":
        d = anchor + timedelta(weeks=sign * n)
        monday = d - timedelta(days=d.weekday())
        return f"the week of {day_text(monday)}", monday, monday + timedelta(days=6)
    if unit == "month":
        return _month(*_month_shift(anchor, sign * n))
    return _year(anchor.year + sign * n)


def resolve(text: str, anchor: date) -> list[Resolved]:
    """Every relative time expression of ``text`` that can be pinned to dates, resolved against ``anchor``."""
    out = []
    for m in PATTERN.finditer(text):
        kind = m.lastgroup
        g = RULES[kind].fullmatch(m.group()).groupdict()
        if kind == "yesterday":
            value = _day(anchor - timedelta(days=1))
        elif kind == "today":
            value = _day(anchor)
        elif kind == "tomorrow":
            value = _day(anchor + timedelta(days=1))
        elif kind == "before_yesterday":
            value = _day(anchor - timedelta(days=2))
        elif kind == "after_tomorrow":
            value = _day(anchor + timedelta(days=2))
        elif kind in ("ago", "in"):
            raw = g["n"].lower()
            n = int(raw) if raw.isdigit() else NUMBERS[raw]
            value = _count(anchor, n, g["unit"], -1 if kind == "ago" else 1)
        elif kind in ("weekday", "bare_weekday"):
            rel = g.get("rel") or "on"
            value = _weekday(anchor, rel.lower(), g["day"], _looks_back(text, m.start(), m.end()))
        elif kind == "over_weekend":
            value = _period(anchor, "last" if _looks_back(text, m.start(), m.end()) else "this", "weekend")
        else:
            value = _period(anchor, g["rel"].lower(), g["period"])
        out.append(Resolved(m.start(), m.end(), m.group(), *value))
    return out


def ground(text: str, anchor: date) -> str:
    """``text`` with each resolved expression followed by its value in brackets."""
    parts, at = [], 0
    for r in resolve(text, anchor):
        parts += [text[at : r.end], f" [{r.value}]"]
        at = r.end
    return "".join(parts) + text[at:]


def grounded_values(line: str) -> list[str]:
    """The values :func:`ground` wrote into ``line``, in order.

    >>> grounded_values("[1:56 pm on 8 May, 2023] Ann: We met yesterday [7 May 2023], last week [the week before "
    ...                 "8 May 2023] too.")
    ['7 May 2023', 'the week before 8 May 2023']
    """
    return VALUE.findall(line)
