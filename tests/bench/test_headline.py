"""bench.headline: the headline tables come from the answer files through the project's scorer, and cannot drift."""

from __future__ import annotations

import json

import pytest

from bench import headline
from bench.locomo_score import official_f1

README_TABLE = """# answers

| file | command | code | state |
|---|---|---|---|
| `engram-aaaaaaaaaaaa.jsonl` | `--system engram --profile cpu` | `abc` | complete |
| `rag-bbbbbbbbbbbb.jsonl` | `--system rag --profile cpu` | `abc` | stopped early |
| `rag-cccccccccccc.jsonl` | `--system rag --profile cpu` | `abd` | complete |
| `engram-dddddddddddd.jsonl` | `--system engram --profile cpu --category gold` | `abc` | complete |
| `admission-rag-random-eeeeeeeeeeee.jsonl` | `bench.admission_downstream --profile cpu --policies random` | `c` | ok |
"""

# (category, gold, prediction) per question
ENGRAM = [(1, "Paris, Rome", "Rome"), (2, "7 May 2023", "May 2023"), (4, "a red car", "red car"),
          (4, "blue", "green"), (5, "", "Not mentioned in the conversation"), (5, "", "Lisbon")]
RAG_PARTIAL = [(4, "red car", "red car")]
RAG = [(1, "tea", "coffee"), (3, "hiking; she likes it", "hiking"), (4, "red car", "car")]
GOLD_KINDS = [(4, "red car", "red car")]
RANDOM = [(2, "2023", "2022"), (4, "red car", "a red car")]
UNLISTED = [(4, "x", "x")]


def _write(path, system: str, questions) -> None:
    rows = [{"kind": "ingest", "conv_id": "c1", "turns": 10, "seconds": 2.0}]
    for i, (cat, gold, pred) in enumerate(questions):
        rows.append({"kind": "question", "system": system, "conv_id": "c1", "q_index": i, "category": cat,
                     "question": f"q{i}?", "gold": gold, "adversarial": None, "evidence": ["D1:1"],
                     "prediction": pred, "evidence_turn_ids": ["D1:1"], "routed_turn_ids": ["D1:1"], "segments": 1,
                     "assistant_bill": {"prompt": 1, "completion": 1, "calls": 1},
                     "master_bill": {"prompt": 10, "completion": 2, "calls": 1}, "latency_s": 1.0 + i})
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def _expected(questions, categories) -> float:
    scores = [official_f1(pred, gold, cat) for cat, gold, pred in questions if cat in categories]
    return sum(scores) / len(scores)


@pytest.fixture
def tree(tmp_path):
    answers = tmp_path / "answers"
    answers.mkdir()
    (answers / "README.md").write_text(README_TABLE)
    _write(answers / "engram-aaaaaaaaaaaa.jsonl", "engram", ENGRAM)
    _write(answers / "rag-bbbbbbbbbbbb.jsonl", "rag", RAG_PARTIAL)
    _write(answers / "rag-cccccccccccc.jsonl", "rag", RAG)
    _write(answers / "engram-dddddddddddd.jsonl", "engram", GOLD_KINDS)
    _write(answers / "admission-rag-random-eeeeeeeeeeee.jsonl", "rag", RANDOM)
    _write(answers / "full_context-ffffffffffff.jsonl", "full_context", UNLISTED)
    readme = tmp_path / "README.md"
    readme.write_text(f"# Project\n\nintro\n\n## Headline\n\n{headline.START}\nold table\n{headline.END}\n\ntail\n")
    args = ["--answers-dir", str(answers), "--readme", str(readme), "--page", str(tmp_path / "headline.md")]
    return tmp_path, args


def test_tables_hold_the_scorers_values_for_predicted_files_only(tree, capsys):
    _, args = tree
    out = headline.main(args)
    rows = {(r["system"], r["profile"], r["mode"]): r for r in out["locomo"]}
    assert list(rows) == [("engram", "cpu", "predicted"), ("rag", "cpu", "predicted")]  # no gold, no unlisted file
    engram, rag = rows["engram", "cpu", "predicted"], rows["rag", "cpu", "predicted"]
    assert engram["categories_1_4"]["f1"]["overall"] == pytest.approx(_expected(ENGRAM, {1, 2, 3, 4}))
    assert engram["categories_1_4"]["questions"] == 4
    assert engram["category_5"]["f1"]["5"] == pytest.approx(_expected(ENGRAM, {5})) == pytest.approx(0.5)
    assert engram["categories_1_4"]["f1"]["1"] == pytest.approx(_expected(ENGRAM, {1}))
    # the longer rag file wins over the stopped one; it has no category 5
    assert rag["files"] == ["rag-cccccccccccc.jsonl"]
    assert rag["categories_1_4"]["f1"]["overall"] == pytest.approx(_expected(RAG, {1, 2, 3, 4}))
    assert rag["category_5"] is None
    policies = {a["policy"]: a for a in out["admission"]}
    assert policies["store_all"]["file"] == "rag-cccccccccccc.jsonl"
    assert policies["random"]["categories_1_4"]["f1"]["overall"] == pytest.approx(_expected(RANDOM, {1, 2, 3, 4}))

    table = headline.readme_table(headline.headline_rows(headline.load_files(tree[0] / "answers")))
    assert f"| engram | cpu | {_expected(ENGRAM, {1, 2, 3, 4}):.3f} (4) | 0.500 (2) |" in table
    assert f"| rag | cpu | {_expected(RAG, {1, 2, 3, 4}):.3f} (3) | – (0) |" in table
    assert out["stale"] == [] and out["written"] == []
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1]) == out  # the contract's last line


def test_check_fails_on_a_stale_copy_and_passes_after_write(tree, capsys):
    tmp_path, args = tree
    with pytest.raises(SystemExit) as stale:
        headline.main([*args, "--check"])
    assert stale.value.code == 1
    assert set(json.loads(capsys.readouterr().out.strip().splitlines()[-1])["stale"]) == {
        str(tmp_path / "headline.md"), str(tmp_path / "README.md")}

    written = headline.main([*args, "--write"])
    assert len(written["written"]) == 2
    readme = (tmp_path / "README.md").read_text()
    assert readme.startswith("# Project\n\nintro\n\n## Headline\n\n") and readme.endswith("\n\ntail\n")
    assert "old table" not in readme and "| engram | cpu |" in readme
    page = (tmp_path / "headline.md").read_text()
    assert "Generated by `python -m bench.headline --write`" in page and "`rag-bbbbbbbbbbbb.jsonl`" in page
    assert headline.main([*args, "--check"])["stale"] == []

    (tmp_path / "README.md").write_text(readme.replace("| engram | cpu |", "| engram | cpu-quality |"))
    with pytest.raises(SystemExit):
        headline.main([*args, "--check"])


def test_write_needs_the_markers(tree):
    tmp_path, args = tree
    (tmp_path / "README.md").write_text("# Project\n")
    with pytest.raises(SystemExit) as err:
        headline.main([*args, "--write"])
    assert err.value.code == 2


def test_committed_readme_and_page_are_current(capsys):
    """The README's table and docs/results/headline.md equal what the committed bench/answers give."""
    out = headline.main(["--check"])
    assert out["stale"] == []
    assert any(r["mode"] == "predicted" and r["categories_1_4"] for r in out["locomo"])
