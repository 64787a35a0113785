"""bench.fusion_fit: its ranking with today's weights is the read path's fusion, and the held-out fit."""

import json
from datetime import datetime

import numpy as np

from bench.fusion_fit import FEATURES, TODAY, Question, candidate_rows, fit, grid, leave_one_out
from core.evidence import Evidence, by_score, dedupe_evidence
from inference.assistant import fuse

WHEN = datetime(2023, 5, 8)


def ev(turn: str, rank: float, likelihood: float, text: str = "A: hi") -> Evidence:
    return Evidence(turn, f"[1:56 pm on 8 May, 2023] {text}", WHEN, 0, signals=(rank, likelihood))


def groups_of(rng: np.random.Generator, n_groups: int = 4) -> list[list[Evidence]]:
    # NOTE: turn "t1" in two groups, as overlapping segments offer a turn twice
    return [[ev(f"t{g * 3 + k}" if (g, k) != (1, 0) else "t1", *rng.normal(size=2)) for k in range(3)]
            for g in range(n_groups)]


def test_todays_weights_rank_as_the_read_path_fuses():
    rng = np.random.default_rng(3)
    for _ in range(20):
        groups = groups_of(rng)
        evidence = ["t1", "t4", "t9"]
        fused = dedupe_evidence(by_score([e for g in fuse(groups, 10) for e in g]))
        q = Question({"conv_id": "c", "category": 1, "evidence": evidence,
                      "candidates": candidate_rows(groups, n_routed=3, temporal=False)})
        for cap in (1, 3, 5):
            kept = [e.turn_id for e in fused[:cap]]
            assert q.recall(np.array(TODAY), cap) == len(set(evidence) & set(kept)) / 3


def test_candidate_rows_features():
    groups = [[ev("a", 0.5, -2.0, "A: we met yesterday [7 May 2023]")], [ev("b", 0.1, -3.0)], [ev("c", 0.2, -1.0)]]
    rows = candidate_rows(groups, n_routed=2, temporal=True)
    assert [r["routing"] for r in rows] == [0.0, -1.0, -2.0]
    assert [r["open"] for r in rows] == [0.0, 0.0, 1.0]
    assert [r["dated"] for r in rows] == [1.0, 0.0, 0.0]  # the header's date is not a grounded one
    assert candidate_rows(groups, n_routed=2, temporal=False)[0]["dated"] == 0.0
    assert set(rows[0]) == {"turn_id", *FEATURES}


def test_fit_prefers_the_signal_that_finds_the_evidence():
    # the evidence is always the line the model scores highest, low in the router's rank
    rows = []
    for c in range(3):
        for i in range(4):
            cands = [{"turn_id": f"{c}-{i}-{k}", "rank": float(r), "likelihood": float(-abs(k - 3)), "routing": 0.0,
                      "open": 0.0, "dated": 0.0} for k, r in enumerate((0, 3, 5, 1, 4, 2))]
            rows.append({"conv_id": f"conv-{c}", "category": 1, "evidence": [f"{c}-{i}-3"], "candidates": cands})
    [result] = fit([Question(r) for r in rows], [1])
    assert result["today"] == 0.0
    assert result["best_in_sample"] == 1.0 and result["held_out"] == 1.0
    assert result["best_weights"]["likelihood"] > result["best_weights"]["rank"]


def test_leave_one_out_scores_each_group_with_the_others_choice():
    table = np.array([[1.0, 1.0, 0.0], [0.0, 0.0, 1.0]])  # weights x questions
    out = leave_one_out(table, ["a", "a", "b"], baseline=0)
    assert out["chosen"] == {"a": 1, "b": 0}
    assert out["held_out"].tolist() == [0.0, 0.0, 0.0]
    assert len(grid()) == 5 * 5 * 4 * 3 * 4 - 1  # without the all-zero vector


def test_collect_keeps_the_read_paths_candidates(tmp_path, monkeypatch):
    """The collected candidates, ranked with today's weights, give the lines the read path's own extraction keeps."""
    import asyncio

    from bench import fusion_fit
    from bench.locomo import _Models
    from bench.systems import TENANT, build_system
    from core.config import load_config
    from corpora.locomo import load_locomo, select_questions
    from tests.doubles import HashingEncoder, ScriptedEngine

    topics = ["pizza in Rome", "a blue car", "painting a lake at sunset", "the dog Max", "running a marathon",
              "a trip to Paris yesterday", "guitar lessons", "the new job at the bank"]
    turns = [{"speaker": "Mel" if i % 2 else "Jon", "dia_id": f"D1:{i}", "text": f"I talked about {topics[i % 8]} "
              f"and more {topics[(i * 3) % 8]}"} for i in range(1, 41)]
    qa = [{"question": q, "answer": "x", "category": c, "evidence": ev} for q, c, ev in (
        ("What car does Jon have?", 4, ["D1:2", "D1:10"]), ("When did Mel go to Paris?", 2, ["D1:5"]),
        ("Which dog does Mel have?", 1, ["D1:4", "D1:12"]))]
    data = tmp_path / "locomo.json"
    data.write_text(json.dumps([{"sample_id": "conv-26", "qa": qa, "conversation": {
        "speaker_a": "Jon", "speaker_b": "Mel", "session_1_date_time": "1:56 pm on 8 May, 2023", "session_1": turns}}]))
    monkeypatch.setenv("ENGRAM_PATHS__CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("ENGRAM_EPISODIC__SEGMENT_TOKENS", "128")
    cfg = load_config("cpu")
    encoder, engine = HashingEncoder(), ScriptedEngine()
    [conv] = load_locomo(data)
    selection = {conv.sample_id: select_questions(conv, [1, 2, 4], None, None)}
    path = tmp_path / "candidates.jsonl"
    rows = fusion_fit.collect(cfg, [conv], selection, path, _Models(cfg, encoder, engine, load=False))
    assert [r["q_index"] for r in rows] == [0, 1, 2] and all(r["candidates"] for r in rows)
    assert fusion_fit.collect(cfg, [conv], selection, path, None) == rows  # read back, no model needed

    system = build_system("engram", cfg, encoder=encoder, engine=engine)
    system.ingest(list(conv.turns))
    for row, (_, q) in zip(rows, selection[conv.sample_id], strict=True):
        vector = encoder.encode([q.question], is_query=True)[0]
        route = asyncio.run(system.memory.reads.route(TENANT, q.question, vector))
        offered, _ = asyncio.run(system.memory.reads.extract(TENANT, q.question, route))
        kept = [e.turn_id for e in dedupe_evidence(by_score(offered))]
        for cap in (1, 2, 4):
            want = len(set(q.evidence) & set(kept[:cap])) / len(q.evidence)
            assert Question(row).recall(np.array(TODAY), cap) == want, (q.question, cap)
