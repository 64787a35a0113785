"""bench.route_signals: the named speaker, the per-segment signals and the learned mix (hashing encoder, no model)."""

import numpy as np

from bench.route_signals import _top_mean, conversation_signals, fit_logistic, recall_rows
from core.config import RouterConfig
from corpora.locomo import Question
from memory.segmenter import line_speaker, named_speaker
from tests.doubles import HashingEncoder
from tests.unit.test_episodic import segments


def test_named_speaker_needs_exactly_one_first_name_as_a_word():
    speakers = ["Ann Lee", "Bob"]
    assert named_speaker("What did Ann's sister say?", speakers) == "Ann Lee"
    assert named_speaker("What do Ann and Bob share?", speakers) is None
    assert named_speaker("Where did Annabel go?", speakers) is None
    assert named_speaker("What happened?", speakers) is None
    assert line_speaker("[1:56 pm on 8 May, 2023] Ann Lee: Hi: there") == "Ann Lee"
    assert line_speaker("no header: here") is None


def test_top_mean_averages_each_segments_lines_among_the_best():
    sims = np.array([[0.9, 0.1, 0.8, 0.7]])
    owner = np.array([0, 0, 1, 1])
    assert np.allclose(_top_mean(sims, owner, 2, top=2), [[0.9, 0.8]])
    assert np.allclose(_top_mean(sims, owner, 2, top=3), [[0.9, 0.75]])


def test_logistic_weights_the_informative_signal():
    rng = np.random.default_rng(0)
    x = rng.random((400, 2))
    y = (x[:, 0] > 0.5).astype(float)
    theta = fit_logistic(x, y)
    assert theta[0] > 5 * abs(theta[1])


def test_signals_follow_the_named_speaker_and_rank_the_evidence_segment_first():
    segs = segments()
    line, turn_id = next((ln, t) for ln, t in zip(segs[1].lines, segs[1].turn_ids, strict=True) if "Ann:" in ln)
    words = line.split(": ", 1)[1]
    q = Question("c", f"What did Ann say about {words}?", "", 4, [turn_id])
    conv = conversation_signals("c", segs, [q], HashingEncoder(dim=512), RouterConfig(chunking="turn"), 3)
    assert set(conv.signals) >= {"kw", "vec_mean", "vec_max", "vec_max_speaker", "vec_max_stripped_speaker",
                                 "prf_kw", "line_hybrid_max"}
    assert all(v.shape == (1, len(segs)) and v.min() >= 0 and v.max() <= 1 for v in conv.signals.values())
    assert conv.labels[0].tolist() == [turn_id in s.turn_ids for s in segs]
    for signal in ("vec_max_stripped_speaker", "line_hybrid_max"):
        best = int(np.argmax(conv.signals[signal][0]))
        assert turn_id in segs[best].turn_ids, signal
    recall, cats = recall_rows([conv], lambda _, c: c.signals["kw"] + c.signals["vec_max_stripped_speaker"], 1)
    assert recall.tolist() == [1.0] and cats.tolist() == [4]
