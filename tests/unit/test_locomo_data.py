"""LoCoMo loader: counts, split, dates, captions and evidence repair against the real file."""

from __future__ import annotations

import os
from collections import Counter
from datetime import datetime
from pathlib import Path

import pytest

from corpora.locomo import (
    TEST_IDS,
    TRAIN_IDS,
    Turn,
    load_locomo,
    normalize_evidence,
    parse_session_datetime,
    render_turn,
    split,
)


def _locomo_path() -> Path:
    env = os.environ.get("ENGRAM_DATA__LOCOMO_PATH")
    if env:
        return Path(env)
    from core.config import DataConfig, load_config

    try:
        return load_config().data.locomo_path
    except FileNotFoundError:  # no configs/<profile>.yaml yet: the section's own default
        return DataConfig().locomo_path


@pytest.fixture(scope="module")
def convs():
    path = _locomo_path()
    if not path.is_file():
        pytest.skip(f"LoCoMo not found at {path}; set ENGRAM_DATA__LOCOMO_PATH to locomo10.json")
    return load_locomo(path)


# -- pure helpers (no data file) ------------------------------------------------------
@pytest.mark.parametrize(
    "raw, expected",
    [
        ("1:56 pm on 8 May, 2023", datetime(2023, 5, 8, 13, 56)),
        ("10:04 am on 19 October, 2023", datetime(2023, 10, 19, 10, 4)),
        ("12:00 am on 1 January, 2023", datetime(2023, 1, 1, 0, 0)),
        ("12:30 pm on 29 February, 2024", datetime(2024, 2, 29, 12, 30)),
    ],
)
def test_parse_session_datetime(raw, expected):
    assert parse_session_datetime(raw) == expected


@pytest.mark.parametrize("raw", ["13:00 pm on 8 May, 2023", "1:56 pm on 8 Mai, 2023", "8 May 2023", ""])
def test_parse_session_datetime_rejects_garbage(raw):
    with pytest.raises(ValueError):
        parse_session_datetime(raw)


def test_normalize_evidence_repairs_and_drops():
    raw = ["D8:6; D9:17", "D9:1 D4:4", "D:11:26", "D30:05", "D", "D4:4", ""]
    assert normalize_evidence(raw) == ["D8:6", "D9:17", "D9:1", "D4:4", "D11:26", "D30:5"]
    assert normalize_evidence(raw, valid={"D9:17", "D30:5"}) == ["D9:17", "D30:5"]


def test_render_turn():
    turn = Turn("c", "D1:1", 1, 0, "Ann", "Hi there", "1:56 pm on 8 May, 2023", datetime(2023, 5, 8, 13, 56))
    assert render_turn(turn) == "[1:56 pm on 8 May, 2023] Ann: Hi there"


# -- the real file -------------------------------------------------------------------
def test_counts(convs):
    assert len(convs) == 10
    assert sum(len(c.turns) for c in convs) == 5882
    assert sum(len(c.questions) for c in convs) == 1986
    cats = Counter(q.category for c in convs for q in c.questions)
    assert dict(cats) == {1: 282, 2: 321, 3: 96, 4: 841, 5: 446}


def test_split(convs):
    assert [c.sample_id for c in convs[:7]] == list(TRAIN_IDS)  # train = conversations 1-7 in file order
    train, test, everything = split(convs, "train"), split(convs, "test"), split(convs, "all")
    assert [c.sample_id for c in train] == list(TRAIN_IDS)
    assert [c.sample_id for c in test] == list(TEST_IDS) == ["conv-48", "conv-49", "conv-50"]
    assert len(everything) == 10
    assert (sum(len(c.turns) for c in train), sum(len(c.turns) for c in test)) == (4124, 1758)
    assert (sum(len(c.questions) for c in train), sum(len(c.questions) for c in test)) == (1347, 639)
    with pytest.raises(ValueError):
        split(convs, "dev")


def test_stream_order_and_sessions(convs):
    conv = convs[0]
    assert conv.sample_id == "conv-26" and conv.speakers == ("Caroline", "Melanie")
    first = conv.turns[0]
    assert (first.dia_id, first.session, first.index, first.speaker) == ("D1:1", 1, 0, "Caroline")
    assert first.date_time == "1:56 pm on 8 May, 2023"
    assert first.timestamp == datetime(2023, 5, 8, 13, 56)
    # conv-26 has 35 session dates but only 19 session lists.
    assert sorted({t.session for t in conv.turns}) == list(range(1, 20))
    assert len(conv.turns) == 419
    for c in convs:
        assert [t.index for t in c.turns] == list(range(len(c.turns)))
        assert all(a.timestamp <= b.timestamp for a, b in zip(c.turns, c.turns[1:], strict=False))
        assert all(t.dia_id.startswith(f"D{t.session}:") for t in c.turns)
        assert len({t.dia_id for t in c.turns}) == len(c.turns)


def test_image_caption_in_text(convs):
    turn = convs[0].turn_map()["D1:5"]
    assert turn.text.startswith("The transgender stories were so inspiring!")
    assert turn.text.endswith(
        "[shares a photo: a photo of a dog walking past a wall with a painting of a woman]"
    )
    assert sum("[shares a photo: " in t.text for c in convs for t in c.turns) == 1226


def test_answers(convs):
    questions = [q for c in convs for q in c.questions]
    assert all(isinstance(q.answer, str) for q in questions)
    by_text = {q.question: q for q in questions if q.conv_id == "conv-26"}
    assert by_text["When did Melanie paint a sunrise?"].answer == "2022"  # int 2022 in the file
    assert by_text["How many children does Melanie have?"].answer == "3"  # int 3 in the file
    adversarial = [q for q in questions if q.category == 5]
    assert all(q.adversarial for q in adversarial)
    assert all(q.adversarial is None for q in questions if q.category != 5)
    assert sorted(q.answer for q in adversarial if q.answer) == ["No", "No"]
    assert sum(q.answer == "" for q in adversarial) == 444


def test_evidence_normalised(convs):
    by_conv = {c.sample_id: c for c in convs}
    for c in convs:
        ids = set(c.turn_map())
        for q in c.questions:
            assert set(q.evidence) <= ids
            assert len(q.evidence) == len(set(q.evidence))
    raws = {(q.conv_id, tuple(q.raw_evidence)): q.evidence for c in convs for q in c.questions}
    assert raws[("conv-26", ("D8:6; D9:17",))] == ["D8:6", "D9:17"]
    assert raws[("conv-42", ("D1:18", "D", "D1:20"))] == ["D1:18", "D1:20"]
    assert raws[("conv-47", ("D4:36", "D18:1", "D18:7"))] == ["D18:1", "D18:7"]  # no turn D4:36
    assert raws[("conv-50", ("D30:05",))] == ["D30:5"]
    assert raws[("conv-49", ("D9:1 D4:4 D4:6",))] == ["D9:1", "D4:4", "D4:6"]
    assert "D11:26" in next(q.evidence for q in by_conv["conv-43"].questions if "D:11:26" in q.raw_evidence)
    # Distinct evidence turns over the whole file (the ADD labels of REFERENCE.md).
    assert len({(q.conv_id, e) for c in convs for q in c.questions for e in q.evidence}) == 1430
