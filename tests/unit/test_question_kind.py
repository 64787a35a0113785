"""Question kinds from the words alone (no gold category): the rules and the benchmark's tally."""

from __future__ import annotations

import pytest

from bench.question_kind import confusion
from inference.question_kind import FACT, INFERENCE, LIST, TEMPORAL, QuestionKind, predict_kind


@pytest.mark.parametrize(("question", "kind"), [
    ("When did Melanie paint a sunrise?", TEMPORAL),
    ("What year did Audrey adopt her first dog?", TEMPORAL),
    ("How long ago was Caroline's 18th birthday?", TEMPORAL),
    ("How many years ago did John move?", TEMPORAL),
    ("Would Caroline pursue writing as a career option?", INFERENCE),
    ("What job might Maria pursue in the future?", INFERENCE),
    ("Did Andrew have a pet dog during March 2023?", INFERENCE),  # yes/no: answered "Likely yes/no"
    ("What activities does Melanie partake in?", LIST),
    ("How many children does Melanie have?", LIST),
    ("What are Caroline's hobbies?", LIST),
    ("What did Caroline research?", FACT),
    ("How long has Melanie been practicing art?", FACT),  # a duration, not a date
    ("Why did Gina open her store?", FACT),
])
def test_kinds(question, kind):
    assert predict_kind(question) == kind


def test_every_prediction_is_one_of_the_named_kinds():
    # a false premise does not show in the question alone: there is no kind for it
    assert {k.value for k in QuestionKind} == {"list", "temporal", "inference", "fact"}
    for q in ("What did Caroline realize after her charity race?", "When did Melanie go to the LGBTQ conference?"):
        assert isinstance(predict_kind(q), QuestionKind)


def test_confusion_counts_per_gold_category_and_scores_1_to_4_only():
    out = confusion([(2, "When did it rain?"), (2, "Who came?"), (4, "What did Ann bake?"), (5, "What did Bo see?")])
    assert out["predicted"] == {"2": {"fact": 1, "temporal": 1}, "4": {"fact": 1}, "5": {"fact": 1}}
    assert out["recall"] == {"2": 0.5, "4": 1.0} and out["accuracy_1_4"] == round(2 / 3, 3)


def test_yes_no_questions_are_told_from_phrase_questions():
    from inference.question_kind import is_yes_no

    assert is_yes_no("Would Caroline pursue writing as a career option?")
    assert is_yes_no(" Is Deborah married?")
    assert not is_yes_no("What fields would Caroline be likely to pursue?")
    assert not is_yes_no("Which country was Evan visiting?")


def test_a_question_that_offers_its_answers_is_a_phrase_question():
    from inference.question_kind import is_choice, is_yes_no

    for q in ("Does John live close to a beach or the mountains?",
              "Would Tim enjoy reading books by C. S. Lewis or John Greene?"):
        assert is_choice(q) and not is_yes_no(q) and predict_kind(q) == FACT
    # "yes or no" asked for, "and/or", or a question that is not a yes/no one: not a choice
    for q in ("Was September a good month for Nate? Answer yes or no.",
              "Has Tim been to North Carolina and/or Tennesee states in the US?",
              "What kind of classes or groups has Audrey joined?"):
        assert not is_choice(q)
    assert is_yes_no("Has Tim been to North Carolina and/or Tennesee states in the US?")
