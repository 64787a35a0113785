"""bench.paired on two small answer files written as bench.locomo writes them."""

from __future__ import annotations

import json

import numpy as np
import pytest

from bench import paired


def _row(conv: str, index: int, category: int, gold: str, prediction: str, question: str | None = None) -> dict:
    return {"kind": "question", "system": "x", "conv_id": conv, "q_index": index, "category": category,
            "question": question or f"q{index} of {conv}?", "gold": gold, "adversarial": None, "evidence": ["D1:1"],
            "prediction": prediction, "evidence_turn_ids": [], "routed_turn_ids": [], "segments": 0,
            "assistant_bill": {}, "master_bill": {}, "latency_s": 1.0}


def _write(path, rows) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"kind": "question", "conv_id": "cut sh')
    return str(path)


@pytest.fixture
def files(tmp_path):
    a = _write(tmp_path / "a.jsonl", [_row("c1", 0, 1, "Paris", "Paris"), _row("c1", 1, 4, "red car", "red car"),
                                      _row("c1", 2, 4, "blue", "green"), _row("c2", 0, 2, "7 May 2023", "7 May 2023"),
                                      _row("c2", 1, 5, "x", "Not mentioned"), _row("c3", 0, 4, "only in a", "a")])
    b = _write(tmp_path / "b.jsonl", [_row("c1", 0, 1, "Paris", "London"), _row("c1", 1, 4, "red car", "red"),
                                      _row("c1", 2, 4, "blue", "blue"), _row("c2", 0, 2, "7 May 2023", "7 May 2023"),
                                      _row("c2", 1, 5, "x", "yes")])
    return a, b


def test_pairs_shared_questions_and_scores_each_side(files, capsys):
    a, b = files
    out = paired.main([a, b])
    assert out["questions"] == 4  # category 5 and c3's question (A only) are left out
    assert out["f1_a"] == pytest.approx(0.75) and out["f1_b"] == pytest.approx((0 + 2 / 3 + 1 + 1) / 4)
    assert out["difference"] == pytest.approx(out["f1_a"] - out["f1_b"])
    assert out["ci95"][0] <= out["difference"] <= out["ci95"][1]
    assert (out["a_higher"], out["level"], out["b_higher"]) == (2, 1, 1)
    assert out["by_category"]["4"]["questions"] == 2 and out["by_category"]["1"]["difference"] == 1.0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1]) == json.loads(json.dumps(out))
    assert paired.main([a, b, "--categories", "5"])["difference"] == 1.0


def test_the_interval_is_seeded_and_narrows_to_the_mean_for_a_constant_difference():
    diff = np.array([0.0, 1.0, 0.5, 0.25])
    assert paired.bootstrap_interval(diff, 500, 3) == paired.bootstrap_interval(diff, 500, 3)
    assert paired.bootstrap_interval(np.full(7, 0.2), 100, 0) == pytest.approx((0.2, 0.2))


def test_files_that_ask_different_questions_or_share_none_are_refused(files, tmp_path, capsys):
    a, _ = files
    other = _write(tmp_path / "other.jsonl", [_row("c1", 0, 1, "Paris", "Paris", question="Another question?")])
    with pytest.raises(SystemExit):
        paired.main([a, other])
    assert "differs" in capsys.readouterr().err
    disjoint = _write(tmp_path / "disjoint.jsonl", [_row("c9", 0, 1, "Paris", "Paris")])
    with pytest.raises(SystemExit):
        paired.main([a, disjoint])
    assert "share no answered question" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        paired.main([a, str(tmp_path / "missing.jsonl")])
    assert "no answers file" in capsys.readouterr().err
