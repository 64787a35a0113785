"""LoCoMo scorers against hand-computed cases of every category rule."""

from __future__ import annotations

import math

import pytest

from bench.locomo_score import (
    EMEM_NOT_MENTIONED,
    aggregate,
    emem_f1,
    emem_normalize,
    official_f1,
    official_normalize,
    token_f1,
)


def test_normalisers():
    # ',' dropped, lowercased, ASCII punctuation stripped, a/an/the/and dropped, spaces collapsed.
    assert official_normalize("The Cat, and a Dog!") == "cat dog"
    assert official_normalize("  An   apple-pie  ") == "applepie"
    assert official_normalize("Santa Ana") == "santa ana"  # whole words only
    # E-mem keeps "and".
    assert emem_normalize("The cat and a dog!") == "cat and dog"


def test_token_f1_is_multiset():
    assert token_f1(["a", "b"], ["b", "c", "d"]) == pytest.approx(0.4)  # P 1/2, R 1/3
    assert token_f1(["x", "x"], ["x"]) == pytest.approx(2 / 3)  # P 1/2, R 1
    assert token_f1([], ["x"]) == 0.0


@pytest.mark.parametrize("category", [2, 4])
def test_official_plain_f1_with_stemming(category):
    assert official_f1("running dogs", "run dog", category) == 1.0  # Porter: running->run, dogs->dog
    assert official_f1("May 2023", "7 May, 2023", category) == pytest.approx(0.8)  # P 1, R 2/3
    assert official_f1("salt and pepper", "Salt, pepper", category) == 1.0
    assert official_f1("", "Paris", category) == 0.0
    assert official_f1("2022", 2022, category) == 1.0  # int answers compare as text


def test_official_category_1_splits_on_commas():
    gold = "painting, swimming, hiking"
    # Gold parts: painting -> 1, swimming -> 1, hiking -> 0; mean 2/3 (whole-string F1 would be 0.8).
    assert official_f1("swimming, painting", gold, 1) == pytest.approx(2 / 3)
    assert official_f1("Sweden, Norway", "Sweden", 1) == 1.0  # best predicted part per gold part
    # One gold part, one predicted part: plain F1, P 1/2, R 1.
    assert official_f1("beach trips", "beach", 1) == pytest.approx(2 / 3)


def test_official_category_3_cuts_gold_at_semicolon():
    gold = "Likely no; though she likes reading"
    assert official_f1("likely no", gold, 3) == 1.0
    assert official_f1("likely no", gold, 4) == pytest.approx(0.5)  # uncut: P 1, R 2/6


@pytest.mark.parametrize(
    "prediction, expected",
    [
        ("Not mentioned in the conversation", 1.0),
        ("It is NOT MENTIONED.", 1.0),
        ("No information available", 1.0),
        ("no info", 0.0),
        ("Yes, every week", 0.0),
        ("", 0.0),
    ],
)
def test_official_category_5_looks_for_abstention(prediction, expected):
    assert official_f1(prediction, "", 5) == expected
    assert official_f1(prediction, "No", 5) == expected  # the gold answer is not read


def test_official_rejects_unknown_category():
    with pytest.raises(ValueError):
        official_f1("x", "x", 6)


def test_emem_variant():
    # No stemming, no comma split, no ';' cut, "and" kept.
    assert emem_f1("running dogs", "run dog", 4) == 0.0
    assert emem_f1("swimming, painting", "painting, swimming, hiking", 1) == pytest.approx(0.8)
    assert emem_f1("likely no", "Likely no; though she likes reading", 3) == pytest.approx(0.5)
    assert emem_f1("salt and pepper", "salt, pepper", 4) == pytest.approx(0.8)  # P 2/3, R 1
    # Empty after normalising: 1 only if both are empty.
    assert emem_f1("The", "a", 4) == 1.0
    assert emem_f1("", "Paris", 4) == 0.0


def test_emem_category_5_is_f1_against_not_mentioned():
    assert emem_f1(EMEM_NOT_MENTIONED + ".", "", 5) == 1.0
    # "not mentioned" vs "not mentioned in conversation": P 1, R 1/2.
    assert emem_f1("not mentioned", "", 5) == pytest.approx(2 / 3)
    assert emem_f1("Yes", "", 5) == 0.0
    # Items with a real answer next to the adversarial one are scored against that answer.
    assert emem_f1("No", "No", 5) == 1.0
    assert emem_f1(EMEM_NOT_MENTIONED, "No", 5) == 0.0


def test_aggregate():
    summary = aggregate([(1, 1.0), (1, 0.0), (2, 0.5), (5, 1.0), (5, 1.0)])
    assert summary.per_category == {1: 0.5, 2: 0.5, 5: 1.0}
    assert summary.counts == {1: 2, 2: 1, 5: 2}
    assert summary.n == 5
    assert summary.overall == pytest.approx(3.5 / 5)  # micro: every question weighs the same
    assert summary.overall_without_adversarial == pytest.approx(1.5 / 3)
    assert summary.as_dict()["overall"] == summary.overall


def test_aggregate_empty_is_nan():
    summary = aggregate([(5, 1.0)])
    assert summary.overall == 1.0
    assert math.isnan(summary.overall_without_adversarial)
    assert math.isnan(aggregate([]).overall)
