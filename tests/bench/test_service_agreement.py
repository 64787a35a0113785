"""bench.service_agreement: a /v1/ask reply as a bench.locomo row, and the agreement of two row lists."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from bench.locomo import score_row
from bench.service_agreement import HARNESS_TENANT, agreement, main, service_row
from corpora.locomo import Question
from serve.schemas import AskResponse

T0 = datetime(2023, 5, 8, 13, 56, tzinfo=timezone.utc)


def _reply(answer: str, evidence: list[str], segments: list[list[str]]) -> AskResponse:
    return AskResponse.model_validate({
        "user_id": "conv-1", "answer": answer,
        "evidence": [{"turn_id": t, "content": f"line {t}", "timestamp": T0, "segment_id": 0} for t in evidence],
        "segments": [{"segment_id": i, "paths": ["vec"], "score": 1.0, "turn_ids": ids}
                     for i, ids in enumerate(segments)],
        "tokens": {"assistants": {"prompt": 300, "completion": 20, "total": 320},
                   "master": {"prompt": 500, "completion": 5, "total": 505}, "total": 825},
    })


def _row(index: int, category: int, prediction: str, gold: str, routed: list[str], read: list[str]) -> dict:
    return score_row({
        "kind": "question", "system": "x", "conv_id": "conv-1", "q_index": index, "category": category,
        "question": f"q{index}", "gold": gold, "adversarial": None, "evidence": ["D1:1"],
        "prediction": prediction, "evidence_turn_ids": read, "routed_turn_ids": routed, "segments": 1,
        "assistant_bill": {"prompt": 0, "completion": 0, "calls": 0},
        "master_bill": {"prompt": 10, "completion": 1, "calls": 1}, "latency_s": 1.0,
    })


def test_service_row_keeps_the_reply_in_the_harness_form():
    q = Question(conv_id="conv-1", question="Where did Mel go?", answer="Paris", category=4, evidence=["D1:2"])
    row = service_row(7, q, _reply("Paris", ["D1:2"], [["D1:1", "D1:2"], ["D1:2", "D2:1"]]), 1.5)
    assert row["routed_turn_ids"] == ["D1:1", "D1:2", "D2:1"]  # each turn once, in routing order
    assert row["segments"] == 2 and row["evidence_turn_ids"] == ["D1:2"]
    assert row["assistant_bill"]["prompt"] == 300 and row["master_bill"]["completion"] == 5
    scored = score_row(row)
    assert scored["f1"] == 1.0 and scored["evidence_recall"] == 1.0


def test_agreement_counts_what_differs():
    harness = [_row(0, 4, "Paris", "Paris", ["D1:1"], ["D1:1"]), _row(1, 2, "May 2023", "7 May 2023", ["D1:1"], [])]
    service = [_row(0, 4, "Paris ", "Paris", ["D1:1"], ["D1:1"]), _row(1, 2, "June", "7 May 2023", ["D1:2"], [])]
    a = agreement(service, harness)
    assert a["questions"] == 2
    assert a["identical_answers"] == 0.5  # trailing space ignored; "June" differs
    assert a["same_routed_turns"] == 0.5 and a["same_evidence"] == 1.0
    assert a["f1_diff_no5"] == pytest.approx((0.0 + (0.0 - harness[1]["f1"])) / 2)
    assert a["f1_abs_diff_mean"] == pytest.approx(harness[1]["f1"] / 2)


def test_agreement_refuses_rows_out_of_step():
    with pytest.raises(ValueError, match="out of step"):
        agreement([_row(0, 4, "a", "a", [], [])], [_row(1, 4, "a", "a", [], [])])
    with pytest.raises(ValueError, match="against"):
        agreement([_row(0, 4, "a", "a", [], [])], [])
    assert agreement([], [])["identical_answers"] is None


@pytest.mark.parametrize("argv, message", [
    (["--per-category", "0"], "--per-category must be a positive integer"),
    (["--categories", "1,7"], "--categories must be within"),
    (["--compare", "/nonexistent/cache.jsonl"], "--compare: no file"),
])
def test_bad_flags_are_errors(argv, message, capsys):
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2 and message in capsys.readouterr().err


def test_the_harness_tenant_is_the_one_bench_systems_stores_under():
    from bench.systems import TENANT

    assert HARNESS_TENANT == TENANT
