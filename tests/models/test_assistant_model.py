"""Evidence extraction on the real SmolLM2-135M: the output is valid by construction, on both backends."""

from datetime import datetime, timedelta

import pytest

from actors.assistant import AssistantHost, Evidence
from actors.segmenter import segment_turns
from serve.master import Master

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


def check(engine):
    segments = segment_turns([Turn(i, s, t) for i, (s, t) in enumerate(TEXTS)], 90, 0.1)
    assert len(segments) >= 2
    host = AssistantHost(engine, evidence_per_segment=3)
    host.add(segments)
    pairs = [(seg.id, q) for seg in segments for q in QUESTIONS]
    found, bill = host.extract(pairs)
    assert len(found) == len(pairs) and bill.calls == len(pairs) and bill.prompt_tokens > 0
    for (sid, _), evidence in zip(pairs, found, strict=True):
        seg = host.segment(sid)
        assert len(evidence) <= 3
        for e in evidence:  # verbatim lines of the segment that was asked, with their turn id and time
            i = seg.turn_ids.index(e.turn_id)
            assert e.content == seg.lines[i] and e.timestamp == seg.timestamps[i]
    master = Master(engine)
    seg = segments[0]
    every = [Evidence(t, line, ts, seg.id) for t, line, ts in zip(seg.turn_ids, seg.lines, seg.timestamps, strict=True)]
    answers = master.answer_batch([(q, every, 2, None) for q in QUESTIONS[:2]])
    assert all(a.text.split()[-1] == "2023" for a in answers)  # temporal answers are dates of evidence lines


def test_extraction_is_valid_with_transformers(tf_engine):
    check(tf_engine)


def test_extraction_is_valid_with_vllm(vllm_engine):
    check(vllm_engine)
