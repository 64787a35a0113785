"""Episodic router mechanics with the hashing encoder: union vs fusion, newest segment, chunking.

The router takes vectors; ``bench.encoding`` embeds with the hashing encoder of the router's width, then calls."""

from __future__ import annotations

import random
from datetime import datetime

import numpy as np
import pytest

from bench import encoding
from core.config import RouterConfig
from memory.bm25 import RankBM25Index
from memory.routing import EpisodicRouter, chunk_text
from memory.segmenter import Segment
from tests.doubles import HashingEncoder

T0 = datetime(2023, 5, 8, 13, 56)


def seg(sid: int, *lines: str, summary: str | None = None) -> Segment:
    n = len(lines)
    return Segment(sid, [f"D{sid}:{i}" for i in range(n)], list(lines), [T0] * n, [10] * n, summary=summary)


def router(**overrides) -> EpisodicRouter:
    return EpisodicRouter(256, RouterConfig(**overrides))


def add(r: EpisodicRouter, segments: list[Segment]) -> None:
    encoding.add_segments(r, HashingEncoder(r.dim), segments)


def route(r: EpisodicRouter, question: str, eligible=None) -> list:
    return encoding.route(r, HashingEncoder(r.dim), question, eligible)


# Segment 1 shares the question's stop words (dense match), segment 2 its one keyword (BM25 match).
DENSE = seg(1, "the the the the")
KEYWORD = seg(2, "alpha beta gamma delta epsilon zeta eta theta")
OTHER = seg(3, "kappa lambda mu")
NEWEST = seg(4, "omicron pi rho")
QUESTION = "alpha the the the the"


def by_id(acts):
    return {a.segment_id: a for a in acts}


def test_chunk_text():
    assert chunk_text("One. Two! Three?", 9) == ["One. Two!", "Three?"]
    assert chunk_text("short", 512) == ["short"]
    text = " ".join(f"word{i}." for i in range(200))
    pieces = chunk_text(text, 64)
    assert all(len(p) <= 64 for p in pieces) and " ".join(pieces) == text
    assert chunk_text("tiny " + "x" * 40, 16) == ["tiny", "x" * 40]  # a long word stays whole


def test_chunking_modes():
    s = seg(0, "[d] A: Hello there, my friend.", "[d] B: Hi there friend! How are you today?")
    assert router(chunking="turn").chunks_of(s) == s.lines
    assert router(chunking="chars", chunk_chars=512).chunks_of(s) == [s.text]
    assert router(chunking="chars", chunk_chars=32).chunks_of(s) == [
        "[d] A: Hello there, my friend.", "[d] B: Hi there friend!", "How are you today?",
    ]


def test_union_takes_each_paths_top_k():
    r = router(mode="union", k_global=0, k_vec=1, k_kw=1, include_newest=False)
    add(r, [DENSE, KEYWORD, OTHER])
    acts = by_id(route(r, QUESTION))
    assert set(acts) == {1, 2}
    assert acts[1].paths == {"vec"} and acts[2].paths == {"kw"}
    assert acts[2].scores["kw"] > 0 and acts[1].scores["kw"] == 0
    assert "global" not in acts[1].scores  # no summary, no P_global score

    only_vec = router(mode="union", k_global=0, k_vec=1, k_kw=0, include_newest=False)
    add(only_vec, [DENSE, KEYWORD, OTHER])
    assert [a.segment_id for a in route(only_vec, QUESTION)] == [1]


def test_union_kw_ignores_segments_without_a_shared_term():
    r = router(mode="union", k_global=0, k_vec=0, k_kw=3, include_newest=False)
    add(r, [DENSE, KEYWORD, OTHER])
    assert [a.segment_id for a in route(r, "alpha")] == [2]
    assert route(r, "nothing shares this") == []


def test_global_path_uses_summaries_only():
    r = router(mode="union", k_global=1, k_vec=0, k_kw=0, include_newest=False)
    add(r, [seg(1, "kappa lambda"), seg(2, "mu nu", summary="a trip to paris")])
    acts = route(r, "paris trip")
    assert [(a.segment_id, a.paths) for a in acts] == [(2, {"global"})]
    assert acts[0].scores["global"] > 0
    encoding.set_summary(r, HashingEncoder(r.dim), 1, "paris trip plans")
    assert [a.segment_id for a in route(r, "paris trip plans")] == [1]


@pytest.mark.parametrize("mode", ["union", "fusion"])
def test_newest_is_always_included(mode):
    r = router(mode=mode, k_global=0, k_vec=1, k_kw=1, max_segments=2)
    add(r, [DENSE, KEYWORD, OTHER, NEWEST])
    acts = route(r, QUESTION)
    assert acts[-1].segment_id == 4 and acts[-1].newest and acts[-1].paths == frozenset()
    assert sum(a.newest for a in acts) == 1
    off = router(mode=mode, k_global=0, k_vec=1, k_kw=1, max_segments=2, include_newest=False)
    add(off, [DENSE, KEYWORD, OTHER, NEWEST])
    assert 4 not in by_id(route(off, QUESTION))


def test_newest_within_the_fusion_cap():
    extra = router(mode="fusion", max_segments=2)
    within = router(mode="fusion", max_segments=2, newest_extra=False)
    for r in (extra, within):
        add(r, [DENSE, KEYWORD, OTHER, NEWEST])
    assert [a.segment_id for a in route(extra, QUESTION)] == [2, 1, 4]
    assert [a.segment_id for a in route(within, QUESTION)] == [2, 4]


def test_newest_found_by_a_path_keeps_its_paths():
    r = router(mode="union", k_global=0, k_vec=1, k_kw=1)
    add(r, [DENSE, KEYWORD, OTHER, NEWEST])
    acts = by_id(route(r, "omicron"))
    assert acts[4].newest and "kw" in acts[4].paths


def test_fusion_boost_puts_keyword_segments_first():
    # The keyword segment has the top BM25 (normalised 1.0 >= 0.7), so it leads even though the
    # dense segment has the higher combined score.
    r = router(mode="fusion", global_weight=0, vec_weight=0.9, kw_weight=0.1, include_newest=False)
    add(r, [DENSE, KEYWORD, OTHER])
    acts = route(r, QUESTION)
    assert acts[0].segment_id == 2 and acts[0].score < acts[1].score
    unboosted = router(
        mode="fusion", global_weight=0, vec_weight=0.9, kw_weight=0.1, include_newest=False, bm25_boost=None
    )
    add(unboosted, [DENSE, KEYWORD, OTHER])
    assert route(unboosted, QUESTION)[0].segment_id == 1


def reference_fusion(r: EpisodicRouter, segments: list[Segment], question: str, cfg: RouterConfig) -> list:
    """E-mem's HybridRouter._map_blocks, written out with plain loops (no newest)."""
    enc = HashingEncoder(r.dim)
    q = enc.encode([question], is_query=True)[0]
    n = len(segments)

    def norm(xs, valid):
        vals = [x for x, v in zip(xs, valid, strict=True) if v]
        lo, hi = (min(vals), max(vals)) if vals else (0, 0)
        ok = hi - lo > 1e-10
        return [(x - lo) / (hi - lo) if v and ok else 0.0 for x, v in zip(xs, valid, strict=True)]

    has = [bool(s.summary) for s in segments]
    a = norm([float(enc.encode([s.summary])[0] @ q) if s.summary else 0.0 for s in segments], has)
    chunks = [(i, float(enc.encode([c])[0] @ q)) for i, s in enumerate(segments) for c in r.chunks_of(s)]
    top = sorted(chunks, key=lambda t: -t[1])[: cfg.top_chunks]
    b = []
    for i in range(n):
        mine = [s for j, s in top if j == i]
        b.append(sum(mine) / len(mine) if mine else 0.0)
    b = norm(b, [True] * n)
    bm = RankBM25Index(k1=cfg.bm25_k1, b=cfg.bm25_b, idf=cfg.bm25_idf, epsilon=cfg.bm25_epsilon)
    bm.add([s.text for s in segments])
    c = norm(list(bm.scores(question)), [True] * n)
    combined = [cfg.global_weight * a[i] + cfg.vec_weight * b[i] + cfg.kw_weight * c[i] for i in range(n)]
    chosen = sorted((i for i in range(n) if c[i] >= cfg.bm25_boost), key=lambda i: -c[i])[: cfg.max_segments]
    for i in sorted(range(n), key=lambda i: -combined[i]):
        if len(chosen) < cfg.max_segments and i not in chosen and combined[i] > 0:
            chosen.append(i)
    return [segments[i].id for i in chosen]


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_fusion_matches_a_loop_reference(seed):
    rng = random.Random(seed)
    vocab = [f"w{i}" for i in range(60)]
    segments = []
    for sid in range(12):
        lines = [" ".join(rng.choices(vocab, k=rng.randint(3, 12))) + "." for _ in range(rng.randint(1, 6))]
        summary = " ".join(rng.choices(vocab, k=5)) if rng.random() < 0.6 else None
        segments.append(seg(sid, *lines, summary=summary))
    cfg = RouterConfig(mode="fusion", chunking="chars", chunk_chars=48, top_chunks=8, include_newest=False)
    r = EpisodicRouter(512, cfg)
    add(r, segments[:5])
    add(r, segments[5:])  # incremental adds keep the chunk -> segment map right
    for _ in range(10):
        question = " ".join(rng.choices(vocab, k=4))
        assert [a.segment_id for a in route(r, question)] == reference_fusion(r, segments, question, cfg)


@pytest.mark.parametrize("mode", ["union", "fusion"])
def test_route_batch_equals_route(mode):
    r = EpisodicRouter(256, RouterConfig(mode=mode, chunking="turn"))
    add(r, [DENSE, KEYWORD, OTHER, NEWEST])
    questions = [QUESTION, "kappa", "rho pi", "unrelated words"]
    q = HashingEncoder(256).encode(questions, is_query=True)
    batch = r.route_batch(questions, q)
    single = [r.route(text, q[i]) for i, text in enumerate(questions)]
    assert batch == single


def test_the_router_takes_one_vector_per_chunk_summary_and_question():
    r = router(chunking="turn")
    enc = HashingEncoder(256)
    two = seg(1, "alpha beta", "gamma", summary="a summary")
    with pytest.raises(ValueError, match="2 chunks"):
        r.add([two], enc.encode(["alpha beta"]), enc.encode(["a summary"]))
    with pytest.raises(ValueError, match="summary"):
        r.add([two], enc.encode(two.lines))
    assert len(r) == 0  # a refused add indexes nothing
    r.add([two], enc.encode(two.lines), enc.encode(["a summary"]))
    chunks, summary = r.vectors_of(1)
    assert np.array_equal(chunks, enc.encode(two.lines)) and np.array_equal(summary, enc.encode(["a summary"])[0])
    with pytest.raises(ValueError, match="vectors"):
        r.route_batch(["q1", "q2"], enc.encode(["q1"]))
    with pytest.raises(ValueError, match="vector"):
        r.set_summary(1, "new summary", None)
    r.set_summary(1, "", None)  # an empty summary needs no vector
    assert r.vectors_of(1)[1] is None


@pytest.mark.parametrize("mode", ["union", "fusion"])
def test_bm25_backend_is_pluggable(mode):
    sparse = router(mode=mode)
    ranked = EpisodicRouter(256, RouterConfig(mode=mode), bm25_factory=RankBM25Index)
    for r in (sparse, ranked):
        add(r, [DENSE, KEYWORD, OTHER, NEWEST])
    for q in [QUESTION, "kappa mu", "omicron"]:
        a, b = route(sparse, q), route(ranked, q)
        assert [x.segment_id for x in a] == [x.segment_id for x in b]
        np.testing.assert_allclose([x.score for x in a], [x.score for x in b], rtol=1e-9)


def test_bm25_tokenizer_comes_from_config():
    plain = router(mode="union", k_global=0, k_vec=0, k_kw=1, include_newest=False)
    stemmed = router(mode="union", k_global=0, k_vec=0, k_kw=1, include_newest=False, bm25_stem=True)
    for r in (plain, stemmed):
        add(r, [seg(1, "Melanie paints sunsets"), seg(2, "Caroline went hiking")])
    assert route(plain, "painting") == []
    assert [a.segment_id for a in route(stemmed, "painting")] == [1]


def test_add_rejects_known_ids_and_empty_router_routes_nothing():
    r = router()
    assert route(r, "anything") == [] and r.route_batch([], np.zeros((0, r.dim), np.float32)) == []
    add(r, [DENSE])
    with pytest.raises(ValueError, match="already indexed"):
        add(r, [seg(1, "again")])
    assert len(r) == 1 and r.segment_ids == [1]


@pytest.mark.parametrize("mode", ["union", "fusion"])
def test_shrinking_a_segment_routes_as_if_its_lines_had_never_been_there(mode):
    rng = random.Random(4)
    vocab = [f"w{i}" for i in range(50)]
    segments = [seg(sid, *(" ".join(rng.choices(vocab, k=rng.randint(3, 9))) for _ in range(rng.randint(2, 5))),
                    summary=" ".join(rng.choices(vocab, k=4)))
                for sid in range(8)]
    segments[3].lines[1] += " zebraquartz"
    cfg = RouterConfig(mode=mode, chunking="turn", include_newest=True)
    edited = EpisodicRouter(256, cfg)
    add(edited, segments)
    # segment 3 loses its line 1, segment 5 loses every line (it leaves the router)
    pruned = [s for s in segments if s.id != 5]
    pruned[3] = seg(3, *(line for i, line in enumerate(segments[3].lines) if i != 1), summary=segments[3].summary)
    edited.shrink(3, [i != 1 for i in range(len(segments[3].lines))], pruned[3].text)
    edited.shrink(5, [False] * len(segments[5].lines), "")
    fresh = EpisodicRouter(256, cfg)
    add(fresh, pruned)
    assert edited.segment_ids == fresh.segment_ids == [0, 1, 2, 3, 4, 6, 7]
    for question in ["zebraquartz", "w1 w2 w3", *(" ".join(rng.choices(vocab, k=4)) for _ in range(8))]:
        assert route(edited, question) == route(fresh, question)
    with pytest.raises(ValueError, match="chunks"):
        edited.shrink(3, [True], "x")


def test_activations_carry_each_lines_cosine_when_chunks_are_lines():
    segs = [seg(1, "alpha beta", "gamma delta", "alpha"), seg(2, "kappa lambda"), seg(3, "alpha mu", "rho")]
    enc = HashingEncoder(dim=256)
    question = "alpha gamma"
    q = enc.encode([question], is_query=True)[0]
    for mode in ("fusion", "union"):
        r = EpisodicRouter(enc.dim, RouterConfig(mode=mode, chunking="turn"))
        add(r, segs)
        acts = route(r, question)
        assert acts
        for a in acts:
            lines = next(s for s in segs if s.id == a.segment_id).lines
            assert np.allclose(a.line_scores, enc.encode(lines) @ q, atol=1e-6)
    chars = EpisodicRouter(enc.dim, RouterConfig(chunking="chars"))
    add(chars, segs)
    assert all(a.line_scores == () for a in route(chars, question))  # chunks are not lines: nothing to give


# -- lines mode ------------------------------------------------------------------------------------


def lines_router(**overrides) -> EpisodicRouter:
    cfg = {"mode": "lines", "chunking": "turn", "vec_weight": 0.0, "kw_weight": 1.0, "include_newest": False,
           "line_window": 0, **overrides}
    return router(**cfg)


def stream_segments() -> list[Segment]:
    """Three segments of 10-token lines; the last line of each is replayed first in the next (overlap 1)."""
    a = Segment(0, ["t0", "t1", "t2"], ["kappa", "alpha one", "lambda"], [T0] * 3, [10] * 3)
    b = Segment(1, ["t2", "t3", "t4"], ["lambda", "mu", "alpha two"], [T0] * 3, [10] * 3, overlap=1)
    c = Segment(2, ["t4", "t5", "t6"], ["alpha two", "nu", "alpha three"], [T0] * 3, [10] * 3, overlap=1)
    return [a, b, c]


def routed(acts, segments) -> list[str]:
    by = {s.id: s for s in segments}
    return [by[a.segment_id].turn_ids[i] for a in acts for i in (a.lines or range(len(by[a.segment_id].lines)))]


def test_lines_mode_routes_the_best_lines_within_the_budget():
    segs = stream_segments()
    r = lines_router(line_budget=20)
    add(r, segs)
    acts = route(r, "alpha")
    # Three lines hold "alpha"; 20 tokens take two of them, each turn once, grouped by segment.
    turns = routed(acts, segs)
    assert len(turns) == 2 and set(turns) <= {"t1", "t4", "t6"} and len(set(turns)) == 2
    assert all(a.lines for a in acts) and all("kw" in a.paths for a in acts)
    assert [a.score for a in acts] == sorted((a.score for a in acts), reverse=True)
    everything = lines_router(line_budget=1000)
    add(everything, segs)
    assert sorted(routed(route(everything, "alpha"), segs)) == ["t1", "t4", "t6"]  # lines with no match stay out
    assert route(everything, "nothing matches") == []


def test_lines_mode_window_reads_neighbours_across_segments_once():
    segs = stream_segments()
    r = lines_router(line_budget=1000, line_window=1)
    add(r, segs)
    turns = routed(route(r, "mu"), segs)
    # "mu" is t3; its neighbours t2 and t4 sit at the edges of segments 0/1 and 1/2 (replayed by the overlap):
    # each is routed once, at its first row.
    assert sorted(turns) == ["t2", "t3", "t4"] and len(turns) == 3
    acts = route(r, "mu")
    assert [(a.segment_id, a.lines) for a in acts] == [(1, (1, 2)), (0, (2,))]  # the best line's segment first


def test_lines_mode_scoped_newest_and_shrink():
    segs = stream_segments()
    r = lines_router(line_budget=1000)
    add(r, segs)
    assert {a.segment_id for a in route(r, "alpha", eligible={2})} == {2}
    newest = lines_router(line_budget=10, include_newest=True)
    add(newest, segs)
    # The newest closed segment is not added whole: it competes line by line.
    assert [(a.segment_id, a.lines, a.newest) for a in route(newest, "one")] == [(0, (1,), False)]
    assert [(a.segment_id, a.lines, a.newest) for a in route(newest, "three")] == [(2, (2,), True)]
    # A line that leaves a segment leaves the line index too.
    r.shrink(0, [True, False, True], "kappa\nlambda")
    assert "t1" not in routed(route(r, "alpha"), [Segment(0, ["t0", "t2"], ["kappa", "lambda"], [T0] * 2,
                                                         [10] * 2), *segs[1:]])
    assert route(r, "one") == []


def test_lines_mode_needs_turn_chunking():
    with pytest.raises(ValueError, match="chunking"):
        RouterConfig(mode="lines", chunking="chars")
