"""Relative time expressions resolved against the turn's date: each kind, year boundaries, the speaker's zone."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta, timezone

import pytest

from memory.time_expressions import anchor_of, ground, resolve

MONDAY = date(2023, 5, 8)  # a Monday


def value(text: str, anchor: date = MONDAY) -> str:
    [r] = resolve(text, anchor)
    return r.value


@pytest.mark.parametrize(("text", "expected"), [
    ("We met yesterday.", "7 May 2023"),
    ("I slept badly last night.", "7 May 2023"),
    ("I'm baking today.", "8 May 2023"),
    ("See you tomorrow!", "9 May 2023"),
    ("It rained the day before yesterday.", "6 May 2023"),
    ("The exam is the day after tomorrow.", "10 May 2023"),
])
def test_days(text, expected):
    assert value(text) == expected


@pytest.mark.parametrize(("text", "expected"), [
    ("I ran a race last Saturday.", "Saturday, 6 May 2023"),
    ("This past Friday was great.", "Friday, 5 May 2023"),
    ("We went to the beach on Sunday.", "Sunday, 7 May 2023"),     # past tense: looks back
    ("I'll call you on Friday.", "Friday, 12 May 2023"),           # future: looks ahead
    ("I'm so excited for the show on Friday.", "Friday, 12 May 2023"),  # a mood, not a past event
    ("Next Tuesday is my birthday.", "Tuesday, 16 May 2023"),      # not tomorrow
    ("Next Friday we fly.", "Friday, 12 May 2023"),
    ("Last Monday I started.", "Monday, 1 May 2023"),              # a week before, not today
    ("I won the tournament on Friday!", "Friday, 5 May 2023"),    # an irregular past tense
    ("We met last Wed. at noon.", "Wednesday, 3 May 2023"),        # an abbreviation
    ("Saturday was the best day.", "Saturday, 6 May 2023"),        # a bare weekday, past
    ("Does Saturday work for you?", "Saturday, 13 May 2023"),      # a bare weekday, to come
])
def test_weekdays(text, expected):
    assert value(text) == expected


@pytest.mark.parametrize(("text", "expected", "first", "last"), [
    ("I was sick last week.", "the week before 8 May 2023", date(2023, 5, 1), date(2023, 5, 7)),
    ("Busy this week!", "the week of 8 May 2023", date(2023, 5, 8), date(2023, 5, 14)),
    ("We move next week.", "the week after 8 May 2023", date(2023, 5, 15), date(2023, 5, 21)),
    ("Last weekend we camped.", "the weekend before 8 May 2023", date(2023, 5, 6), date(2023, 5, 7)),
    ("This weekend I'll rest.", "the weekend of 13 May 2023", date(2023, 5, 13), date(2023, 5, 14)),
    ("I went fishing over the weekend.", "the weekend before 8 May 2023", date(2023, 5, 6), date(2023, 5, 7)),
])
def test_weeks_and_weekends(text, expected, first, last):
    [r] = resolve(text, MONDAY)
    assert (r.value, r.first, r.last) == (expected, first, last)


def test_weekend_said_at_a_weekend():
    sunday = date(2023, 5, 7)
    assert value("this weekend", sunday) == "the weekend of 6 May 2023"
    assert value("last weekend", sunday) == "the weekend before 7 May 2023"
    assert resolve("last weekend", sunday)[0].first == date(2023, 4, 29)


@pytest.mark.parametrize(("text", "expected"), [
    ("I started a job last month.", "April 2023"),
    ("Next month I travel.", "June 2023"),
    ("We married last year.", "2022"),
    ("It opens next year.", "2024"),
    ("We went to Spain last summer.", "summer 2022"),
    ("This summer we'll swim.", "summer 2023"),
    ("Last winter was cold.", "winter 2022"),
    ("Two weeks ago I adopted a dog.", "the week of 24 April 2023"),
    ("I moved here 4 years ago.", "2019"),
    ("She called three days ago.", "5 May 2023"),
    ("I quit a couple of months ago.", "March 2023"),
    ("The trip is in 2 weeks.", "the week of 22 May 2023"),
])
def test_months_years_seasons_and_counts(text, expected):
    assert value(text) == expected


def test_year_boundaries():
    new_year = date(2024, 1, 2)
    assert value("last month", new_year) == "December 2023"
    assert value("yesterday", date(2024, 1, 1)) == "31 December 2023"
    assert value("next month", date(2023, 12, 15)) == "January 2024"
    assert value("last week", new_year) == "the week before 2 January 2024"
    assert resolve("last week", new_year)[0].first == date(2023, 12, 25)
    assert value("this winter", date(2024, 1, 10)) == "winter 2023"  # the winter that began in December
    assert value("last winter", date(2024, 1, 10)) == "winter 2022"  # not the one still going on
    assert value("last summer", date(2023, 10, 17)) == "summer 2023"  # the summer just over
    assert value("last summer", date(2023, 8, 17)) == "summer 2022"
    [r] = resolve("last month", date(2024, 3, 31))
    assert (r.first, r.last) == (date(2024, 2, 1), date(2024, 2, 29))  # a leap year's February


def test_the_anchor_is_the_speakers_local_date():
    berlin = timezone(timedelta(hours=2))
    said = datetime(2023, 5, 8, 1, 0, tzinfo=berlin)  # 23:00 UTC on 7 May
    assert said.astimezone(UTC).date() == date(2023, 5, 7)
    assert anchor_of(said) == date(2023, 5, 8)
    assert value("yesterday", anchor_of(said)) == "7 May 2023"


def test_vague_expressions_are_left_alone():
    for text in ("I saw it recently.", "The other day I fell.", "A few days ago it snowed.", "In May we go.",
                 "One day I will fly.", "I love Fridays.", "Weekends are for rest.", "I run every Sunday.",
                 "So much happened in the last month.", "Over the last week I slept badly."):
        assert resolve(text, MONDAY) == [], text


def test_ground_writes_each_value_after_its_expression_and_keeps_the_rest():
    text = "Yesterday I ran; next month I race, and last week I rested."
    grounded = ground(text, MONDAY)
    assert grounded == ("Yesterday [7 May 2023] I ran; next month [June 2023] I race, and last week "
                        "[the week before 8 May 2023] I rested.")
    spans = resolve(text, MONDAY)
    assert [text[r.start : r.end] for r in spans] == ["Yesterday", "next month", "last week"]
    assert ground("Nothing relative here.", MONDAY) == "Nothing relative here."


def test_the_benchmark_scores_right_wrong_and_missed_expressions():
    from bench.time_expressions import score

    labels = [
        {"conv_id": "c", "dia_id": "D1:1", "anchor": "2023-05-08", "text": "Yesterday I ran and last week I swam.",
         "gold": [{"expression": "Yesterday", "value": "7 May 2023"},
                  {"expression": "last week", "value": "the week of 1 May 2023"}]},  # a value the resolver differs on
        {"conv_id": "c", "dia_id": "D1:2", "anchor": "2023-05-08", "text": "Next month, two weekends ago.",
         "gold": [{"expression": "two weekends ago", "value": "the weekend of 22 April 2023"}]},
    ]
    out = score(labels)
    # resolved: Yesterday (right), last week (wrong value), Next month (spurious: no gold item names it)
    assert (out["gold"], out["resolved"], out["right"], out["wrong_value"], out["spurious"]) == (3, 3, 1, 1, 1)
    assert (out["precision"], out["recall"]) == (round(1 / 3, 3), round(1 / 3, 3))
    assert [m["expression"] for m in out["missed"]] == ["last week", "two weekends ago"]
