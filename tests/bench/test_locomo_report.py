"""bench.locomo_report's command line: the report from answer files alone, as bench.locomo writes them."""

from __future__ import annotations

import json

import pytest

from bench import locomo_report


def _row(system: str, conv: str, index: int, category: int, gold: str, prediction: str) -> dict:
    return {"kind": "question", "system": system, "conv_id": conv, "q_index": index, "category": category,
            "question": f"q{index} of {conv}?", "gold": gold, "adversarial": None, "evidence": ["D1:1"],
            "prediction": prediction, "evidence_turn_ids": ["D1:1"] if prediction == gold else [],
            "routed_turn_ids": ["D1:1"], "segments": 2,
            "assistant_bill": {"prompt": 10, "completion": 2, "calls": 1},
            "master_bill": {"prompt": 100, "completion": 5, "calls": 1}, "latency_s": 2.0}


def _write(path, rows) -> str:
    ingest = {"kind": "ingest", "conv_id": "c1", "seconds": 3.0}
    path.write_text("".join(json.dumps(r) + "\n" for r in [ingest, *rows]) + '{"kind": "question", "conv_id": "cu')
    return str(path)


def test_report_from_answer_files_scores_the_chosen_categories(tmp_path, capsys):
    a = _write(tmp_path / "a.jsonl", [_row("engram", "c1", 0, 1, "Paris", "Paris"),
                                      _row("engram", "c1", 1, 4, "red car", "blue"),
                                      _row("engram", "c2", 0, 5, "x", "Not mentioned")])
    b = _write(tmp_path / "b.jsonl", [_row("rag", "c1", 0, 1, "Paris", "London"),
                                      _row("rag", "c1", 1, 4, "red car", "red car")])
    out = locomo_report.main([a, b, "--out", str(tmp_path / "res"), "--name", "t"])
    engram, rag = out["systems"]
    assert (engram["system"], rag["system"]) == ("engram", "rag")
    assert engram["questions"] == 2 and engram["counts"]["5"] == 0  # category 5 left out by default
    assert engram["f1"]["overall"] == pytest.approx(0.5) and engram["f1"]["1"] == 1.0
    assert rag["f1"]["4"] == 1.0 and rag["answer_evidence_recall"] == pytest.approx(0.5)
    assert engram["conversations"] == 1 and engram["tokens_per_question"]["master"] == 105
    folder = tmp_path / "res" / "locomo"
    assert {"locomo-t.md", "locomo-t.png", "locomo-t.json", "locomo-t-rag.jsonl"} <= {p.name for p in folder.iterdir()}
    assert "| engram | 2 |" in (folder / "locomo-t.md").read_text()
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1]) == json.loads(json.dumps(out))
    with_5 = locomo_report.main([a, "--categories", "5", "--out", str(tmp_path / "res5")])
    assert with_5["systems"][0]["questions"] == 1 and with_5["systems"][0]["f1"]["5"] == 1.0


def test_files_without_such_questions_or_of_one_system_twice_are_refused(tmp_path, capsys):
    a = _write(tmp_path / "a.jsonl", [_row("engram", "c1", 0, 1, "Paris", "Paris")])
    a2 = _write(tmp_path / "a2.jsonl", [_row("engram", "c2", 0, 1, "Paris", "Paris")])
    for argv, message in (([a, "--categories", "2"], "no answered question"), ([a, a2], "a second file"),
                          ([str(tmp_path / "missing.jsonl")], "no answers file")):
        with pytest.raises(SystemExit):
            locomo_report.main([*argv, "--out", str(tmp_path / "res")])
        assert message in capsys.readouterr().err
