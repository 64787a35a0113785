"""Evidence extraction on the real SmolLM2-135M: the output is valid by construction, on both backends and
with both extraction methods; a scored request's log-probabilities are those of the continuation."""

from datetime import datetime, timedelta

import pytest

from core.config import EpisodicConfig
from core.evidence import Evidence
from core.generation import GenerationRequest
from inference.assistant import AssistantHost
from inference.master import Master
from inference.question_kind import QuestionKind
from memory.segmenter import segment_turns

pytestmark = pytest.mark.model

TEXTS = [
    ("Mel", "I finally signed up for the pottery class on Saturdays."),
    ("Caroline", "That's great! I went to an LGBTQ support group yesterday."),
    ("Mel", "How was it? I remember you said you were nervous."),
    ("Caroline", "It was powerful. I'm thinking about studying counseling."),
    ("Mel", "My kids and I are going camping at the lake next month."),
    ("Caroline", "Send me pictures! I'm also researching adoption agencies."),
    ("Mel", "My daughter turned eight and we baked a chocolate cake."),
    ("Caroline", "Happy birthday to her! I bought a new guitar last week."),
]
QUESTIONS = ["What class did Mel sign up for?", "What is Caroline researching?", "When is the camping trip?",
             "What did Caroline buy?", "Who likes skiing?"]


class Turn:
    def __init__(self, i, speaker, text):
        self.turn_id, self.speaker, self.text = f"D1:{i + 1}", speaker, text
        self.timestamp = datetime(2023, 5, 8, 13, 56) + timedelta(minutes=i)
        self.date_time = "1:56 pm on 8 May, 2023"


def check_scoring(engine):
    """The likelier line for a question scores higher; one log-probability per continuation token."""
    question = " What class did Mel sign up for?"
    lines = ["Mel: I finally signed up for the pottery class on Saturdays.", "Caroline: I bought a new guitar."]
    results = engine.generate([GenerationRequest(prompt=f"Conversation line: {line}\nA question about this line:",
                                                 continuation=question) for line in lines])
    n = len(engine.tokenizer(question, add_special_tokens=False).input_ids)
    assert [len(r.continuation_logprobs) for r in results] == [n, n]
    assert all(x <= 0 for r in results for x in r.continuation_logprobs) and all(r.text == "" for r in results)
    pottery, guitar = (sum(r.continuation_logprobs) for r in results)
    assert pottery > guitar


def check(engine, method):
    segments = segment_turns([Turn(i, s, t) for i, (s, t) in enumerate(TEXTS)], 90, 0.1)
    assert len(segments) >= 2
    host = AssistantHost(engine, evidence_per_segment=3, method=method, shortlist=2)
    host.add(segments)
    pairs = [(seg.id, q) for seg in segments for q in QUESTIONS]
    found, bill = host.extract(pairs)
    calls = len(pairs) if method == "choose" else sum(min(2, len(host.segment(sid).lines)) for sid, _ in pairs)
    assert len(found) == len(pairs) and bill.calls == calls and bill.prompt_tokens > 0
    for (sid, _), evidence in zip(pairs, found, strict=True):
        seg = host.segment(sid)
        assert len(evidence) <= (3 if method == "choose" else 2)
        for e in evidence:  # verbatim lines of the segment that was asked, with their turn id and time
            i = seg.turn_ids.index(e.turn_id)
            assert e.content == seg.lines[i] and e.timestamp == seg.timestamps[i]
    if method == "likelihood":  # the pottery line is the best evidence for the pottery question
        evidence = found[pairs.index((segments[0].id, QUESTIONS[0]))]
        assert "pottery" in max(evidence, key=lambda e: e.score).content
    master = Master(engine, EpisodicConfig())
    seg = segments[0]
    every = [Evidence(t, line, ts, seg.id) for t, line, ts in zip(seg.turn_ids, seg.lines, seg.timestamps, strict=True)]
    answers = master.respond_batch([(q, every, QuestionKind.TEMPORAL) for q in QUESTIONS[:2]])
    assert all(a.text.split()[-1] == "2023" for a in answers)  # temporal answers are dates of evidence lines


@pytest.mark.parametrize("method", ["likelihood", "choose"])
def test_extraction_is_valid_with_transformers(tf_engine, method):
    check(tf_engine, method)


@pytest.mark.parametrize("method", ["likelihood", "choose"])
def test_extraction_is_valid_with_vllm(vllm_engine, method):
    check(vllm_engine, method)


def test_scored_requests_with_transformers(tf_engine):
    check_scoring(tf_engine)


def test_scored_requests_with_vllm(vllm_engine):
    check_scoring(vllm_engine)
