"""Answers kept to the evidence's words: spans, snapping, the constrained phrase choice (inference/answer_spans.py and
the master's ``episodic.answer_form``)."""

from __future__ import annotations

from datetime import datetime

import pytest

from core.config.episodic import EpisodicConfig
from core.evidence import Evidence
from inference.answer_spans import candidate_spans, line_body, phrases, snap, spans, token_f1
from inference.master import Master
from inference.question_kind import QuestionKind as K
from tests.doubles import ScriptedEngine

LINES = [
    "[2:32 pm on 29 January, 2023] Jon: Yeah, good flooring's crucial. I'm after Marley flooring, which dance "
    "studios usually use.",
    "[4:04 pm on 20 January, 2023] Gina: We went to the beach yesterday [19 January 2023] with my two dogs!",
]


def _is_span(answer: str, lines: list[str]) -> bool:
    """Every item of ``answer`` is a run of whole words of one clause of one line."""
    runs = [" ".join(words) for line in lines for words in phrases(line)]
    return all(any(f" {item} " in f" {run} " for run in runs) for item in answer.split(", "))


def test_line_body_drops_header_and_grounded_values():
    assert line_body(LINES[1]) == "We went to the beach yesterday with my two dogs!"
    assert line_body("no header here") == "no header here"


def test_spans_stay_inside_one_clause_and_leave_edge_punctuation():
    found = spans(LINES[:1], max_words=3)
    assert "Marley flooring" in found and "I'm after Marley" in found
    assert not any("crucial I'm" in s or "flooring which" in s for s in found)  # clauses are not joined
    assert all(not s.endswith((",", ".")) for s in found)


def test_token_f1_is_symmetric_and_ignores_articles_and_inflection():
    assert token_f1("the dogs", "dog") == 1.0
    assert token_f1("a pottery class", "pottery classes with kids") == token_f1("pottery classes with kids",
                                                                                 "a pottery class")
    assert token_f1("beach", "mountains") == 0.0


@pytest.mark.parametrize("answer", ["Marley flooring", "she is after Marley flooring", "the beach with dogs",
                                    "two dogs, the beach"])
def test_snapped_answers_are_spans_of_the_evidence(answer):
    snapped = snap(answer, LINES, items=True)
    assert _is_span(snapped, LINES), snapped


def test_snap_keeps_an_answer_the_evidence_does_not_hold():
    assert snap("Likely yes", LINES) == "Likely yes"
    assert snap("Paris", LINES) == "Paris"


def test_snap_prefers_the_shorter_of_equal_spans():
    assert snap("Marley flooring", LINES) == "Marley flooring"


def test_candidate_spans_add_something_to_the_question_and_skip_stop_word_edges():
    found = candidate_spans("What kind of flooring is Jon looking for?", LINES, limit=1000)
    assert "Marley flooring" in found and "Marley" in found
    assert "flooring" not in found  # nothing beyond the question's own words
    assert all(s.split()[0].lower() not in ("the", "with", "to") and s.split()[-1].lower() not in ("the", "my")
               for s in found)
    assert len(candidate_spans("What?", LINES, limit=5)) == 5


def _evidence() -> list[Evidence]:
    return [Evidence(f"D1:{i}", line, datetime(2023, 1, 20 + i), 0) for i, line in enumerate(LINES)]


def test_extract_answers_with_a_chosen_phrase_of_the_evidence():
    engine = ScriptedEngine(lambda r: "Marley flooring" if r.choice and "Marley flooring" in r.choice else "x")
    master = Master(engine, EpisodicConfig(answer_form="extract"))
    answer = master.answer("What kind of flooring is Jon looking for?", _evidence(), kind=K.FACT)
    request = engine.batches[0][0]
    assert answer.text == "Marley flooring"
    assert request.choice and all(_is_span(c, LINES) for c in request.choice)


def test_extract_leaves_dates_lists_and_yes_no_to_their_own_paths():
    engine = ScriptedEngine(lambda r: r.choice[-1] if r.choice else "Likely yes, she loves them")
    master = Master(engine, EpisodicConfig(answer_form="extract"))
    assert master.answer("Does Gina like dogs?", _evidence(), kind=K.INFERENCE).text == "Likely yes"
    assert engine.batches[-1][0].choice is None
    assert master.answer("When did Gina go to the beach?", _evidence(), kind=K.TEMPORAL).text == "19 January 2023"
    master.answer("What pets and places does Gina like?", _evidence(), kind=K.LIST)
    assert engine.batches[-1][0].choice is None


def test_snap_form_turns_a_free_answer_into_evidence_spans():
    engine = ScriptedEngine(lambda r: "Gina went to the beach with her two dogs.")
    snapped = Master(engine, EpisodicConfig(answer_form="snap")).answer("Where did Gina go?", _evidence(), kind=K.FACT)
    free = Master(engine, EpisodicConfig(answer_form="free")).answer("Where did Gina go?", _evidence(), kind=K.FACT)
    assert _is_span(snapped.text, LINES) and snapped.text != free.text
    nothing = Master(ScriptedEngine(lambda r: "Not mentioned in the conversation"),
                     EpisodicConfig(answer_form="snap")).answer("Where did Gina go?", _evidence(), kind=K.FACT)
    assert nothing.text == "Not mentioned in the conversation"  # an abstention is never snapped to words
