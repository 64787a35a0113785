"""bench.route_recall counts a lines-mode activation by its routed lines only."""

from __future__ import annotations

from datetime import datetime

from bench.route_recall import evidence_recall, routed_lines
from corpora.locomo import Question
from memory.routing import Activation
from memory.segmenter import Segment

T0 = datetime(2023, 5, 8, 13, 56)


def test_routed_lines_and_recall_honour_activation_lines():
    a = Segment(0, ["D1:1", "D1:2", "D1:3"], ["x", "y", "z"], [T0] * 3, [4, 5, 6])
    b = Segment(1, ["D1:4", "D1:5"], ["u", "v"], [T0] * 2, [7, 8])
    by_id = {0: a, 1: b}
    acts = [Activation(0, 1.0, frozenset({"kw"}), lines=(0, 2)), Activation(1, 0.5, frozenset())]
    lines = routed_lines(acts, by_id)
    assert lines == [("D1:1", 4), ("D1:3", 6), ("D1:4", 7), ("D1:5", 8)]
    q = Question(conv_id="conv-1", question="?", answer="", category=1, evidence=["D1:2", "D1:3"])
    assert evidence_recall(lines, q) == 0.5
    assert evidence_recall([a], q) == 1.0  # whole segments still count every turn
