"""Each router path finds what only it can find (real all-MiniLM-L6-v2).

One router in union mode, one segment per path and path (k = 1 each), newest segment off:

- an exact code: near-identical codes (same letters, digits swapped) sit in other segments;
  MiniLM embeds them alike and prefers the shorter lines, only BM25 matches the exact token;
- a paraphrase sharing no word with its segment: BM25 scores it 0; the chunk embeddings find it
  (its summary is about something else, as summaries are lossy);
- a topic only the summary names: the raw turns never say it, BM25 scores it 0, and another
  segment's raw text is closer to the question's wording.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from bench import encoding
from core.config import RouterConfig
from corpora.locomo import parse_session_datetime
from memory.bm25 import tokenize
from memory.routing import EpisodicRouter
from memory.segmenter import Segment

pytestmark = pytest.mark.model

DATE = "1:14 pm on 25 May, 2023"


def seg(sid: int, summary: str, *turns: tuple[str, str]) -> Segment:
    lines = [f"[{DATE}] {speaker}: {text}" for speaker, text in turns]
    n = len(lines)
    stamp = parse_session_datetime(DATE)
    return Segment(sid, [f"D{sid}:{i}" for i in range(n)], lines, [stamp] * n, [20] * n, summary=summary)


CODE_TARGET = seg(
    0, "Gina finally receives the paint brushes she ordered for her studio.",
    ("Gina", "Parcel QX7-22841 showed up at the door this morning."),
    ("Jon", "Nice, anything good inside?"),
    ("Gina", "New paint brushes for the studio!"),
)
CODE_DISTRACTORS = [
    seg(1, "Jon asks Gina for the tracking code of his online order.",
        ("Jon", "My tracking code? I think it is QX7-22814."),
        ("Gina", "Try the courier website.")),
    seg(2, "Jon cannot track his delivery with the code he was given.",
        ("Jon", "The tracking code QX7-22481 doesn't work."),
        ("Gina", "Maybe it takes a day to show up.")),
    seg(3, "Gina reads out an order tracking code for Jon.",
        ("Gina", "It's QX7-22184."),
        ("Jon", "Yes, that one.")),
]
PARAPHRASE_TARGET = seg(
    4, "Maria complains about early shifts at the bakery.",
    ("Maria", "Work at the bakery starts at five, so I'm exhausted."),
    ("Maria", "We brought home a tiny kitten from the shelter last week."),
    ("John", "Oh wow, congrats!"),
)
TOPIC_TARGET = seg(
    5, "Jon is preparing for the Berlin marathon.",
    ("Jon", "Did 30 km this morning, my legs are dead."),
    ("Gina", "Only three weeks left, keep at it!"),
    ("Jon", "New shoes arrive tomorrow, fingers crossed."),
)
TOPIC_DISTRACTOR = seg(
    6, "Gina and Jon chat about a gym membership and prices.",
    ("Gina", "How is the training at your gym going?"),
    ("Jon", "Training is going fine, the gym membership is pricey though."),
)
SEGMENTS = [CODE_TARGET, *CODE_DISTRACTORS, PARAPHRASE_TARGET, TOPIC_TARGET, TOPIC_DISTRACTOR]

CODE_QUESTION = "What about QX7-22841?"
PARAPHRASE_QUESTION = "Did anybody adopt a young cat recently?"
TOPIC_QUESTION = "How is the marathon training going?"


@pytest.fixture(scope="module")
def paths_of(minilm) -> Callable[[str], dict[int, frozenset[str]]]:
    """The paths that activated each segment for a question, in one union router over ``SEGMENTS``."""
    cfg = RouterConfig(mode="union", k_global=1, k_vec=1, k_kw=1, chunking="turn", include_newest=False)
    r = EpisodicRouter(minilm.dim, cfg)
    encoding.add_segments(r, minilm, SEGMENTS)
    return lambda question: {a.segment_id: a.paths for a in encoding.route(r, minilm, question)}


def test_exact_code_only_bm25(paths_of):
    assert paths_of(CODE_QUESTION)[CODE_TARGET.id] == {"kw"}


def test_paraphrase_only_dense(paths_of):
    shared = set(tokenize(PARAPHRASE_QUESTION)) & set(tokenize(PARAPHRASE_TARGET.text))
    assert not shared  # no word in common: BM25 cannot see it
    assert paths_of(PARAPHRASE_QUESTION)[PARAPHRASE_TARGET.id] == {"vec"}


def test_topic_only_summary(paths_of):
    assert not set(tokenize(TOPIC_QUESTION)) & set(tokenize(TOPIC_TARGET.text))
    assert paths_of(TOPIC_QUESTION)[TOPIC_TARGET.id] == {"global"}


def test_fusion_also_reaches_all_three(minilm):
    """The reference fusion keeps every target among its five segments."""
    r = EpisodicRouter(minilm.dim, RouterConfig(mode="fusion", chunking="turn", include_newest=False))
    encoding.add_segments(r, minilm, SEGMENTS)
    for question, target in [(CODE_QUESTION, CODE_TARGET), (PARAPHRASE_QUESTION, PARAPHRASE_TARGET),
                             (TOPIC_QUESTION, TOPIC_TARGET)]:
        assert target.id in [a.segment_id for a in encoding.route(r, minilm, question)]
