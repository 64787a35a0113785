"""Content-type labels from a teacher model: the prompt, the label files, how training and the bench read them."""

import json
from dataclasses import dataclass, field

import numpy as np
import pytest
import torch

from bench.content_types import compare, load_hand
from core.config import AdmissionTrainingConfig
from core.generation import GenerationResult
from inference.admission import CONTENT_TYPES, AdmissionModel
from training.content_teacher import PACKAGED_LABELS, label_texts, load_labels, pending_turns, teacher_request
from training.train_admission import IGNORE, build_chunkset, label_source, train_step, type_labeller


@dataclass
class Turn:
    dia_id: str
    text: str


@dataclass
class Question:
    evidence: list


@dataclass
class Conv:
    sample_id: str
    turns: list
    questions: list = field(default_factory=list)


class ScriptedEngine:
    """Test double: answers each request with the next scripted text and records the requests."""

    def __init__(self, answers):
        self.answers, self.seen = list(answers), []

    def generate(self, requests):
        self.seen += requests
        return [GenerationResult(self.answers.pop(0), 10, 1, "stop") for _ in requests]


def test_the_request_is_a_choice_over_the_six_types_and_defines_each():
    req = teacher_request("[8 May, 2023] Mel: I ran a charity race last Saturday.")
    assert req.choice == list(CONTENT_TYPES) and req.temperature == 0.0
    system, user = req.messages
    assert system.role == "system" and all(f"{t} - " in system.content for t in CONTENT_TYPES)
    assert user.content.startswith("Turn to sort: [8 May, 2023] Mel: I ran") and user.content.endswith("or other?")


def test_label_texts_keeps_order_and_refuses_an_answer_outside_the_choice():
    engine = ScriptedEngine(["event", "plan"])
    assert label_texts(engine, ["a", "b"]) == ["event", "plan"]
    assert [r.messages[-1].content.split("\n")[0] for r in engine.seen] == ["Turn to sort: a", "Turn to sort: b"]
    with pytest.raises(RuntimeError, match="'maybe'"):
        label_texts(ScriptedEngine(["maybe"]), ["c"])


def test_pending_turns_takes_cited_turns_not_yet_labelled():
    conv = Conv("conv-1", [Turn(f"D1:{i}", f"t{i}") for i in range(4)], [Question(["D1:1", "D1:3"])])
    assert [t.dia_id for _, t in pending_turns([conv], "evidence", set())] == ["D1:1", "D1:3"]
    assert [t.dia_id for _, t in pending_turns([conv], "evidence", {("conv-1", "D1:1")})] == ["D1:3"]
    assert len(pending_turns([conv], "all", set())) == 4


def test_label_files_round_trip_and_bad_types_are_refused(tmp_path):
    path = tmp_path / "labels.jsonl"
    path.write_text("\n".join(json.dumps({"sample_id": "c", "dia_id": f"D1:{i}", "type": t, "model": "m"})
                              for i, t in enumerate(["fact", "event"])) + "\n")
    assert load_labels(path) == {("c", "D1:0"): "fact", ("c", "D1:1"): "event"}
    path.write_text(json.dumps({"sample_id": "c", "dia_id": "D1:0", "type": "gossip"}) + "\n")
    with pytest.raises(ValueError, match="gossip"):
        load_labels(path)


def test_training_reads_teacher_labels_and_leaves_unlabelled_turns_out(tmp_path):
    path = tmp_path / "labels.jsonl"
    path.write_text(json.dumps({"sample_id": "c", "dia_id": "D1:1", "type": "plan"}) + "\n")
    conv = Conv("c", [Turn("D1:0", "I love pottery"), Turn("D1:1", "I went hiking yesterday")], [Question(["D1:1"])])
    vectors = np.zeros((2, 4), dtype=np.float32)
    taught = build_chunkset([conv], vectors, 5, type_labeller(str(path)))
    assert taught.ctype.tolist() == [IGNORE, CONTENT_TYPES.index("plan")]  # the teacher, not the rule's "event"
    ruled = build_chunkset([conv], vectors, 5)
    assert ruled.ctype.tolist() == [CONTENT_TYPES.index("preference"), CONTENT_TYPES.index("event")]
    assert "content_type_rule" in label_source("rule") and "labels.jsonl" in label_source(str(path))
    with pytest.raises(FileNotFoundError, match="training.content_teacher"):
        type_labeller(str(tmp_path / "missing.jsonl"))
    assert AdmissionTrainingConfig().type_labels == "teacher"


def test_an_add_turn_without_a_type_label_adds_no_type_loss():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    backbone = LlamaForCausalLM(LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                            num_attention_heads=4, num_key_value_heads=2, vocab_size=64)).eval()
    model = AdmissionModel(backbone, 4, projector_hidden=16)
    opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.0)
    chunks = [np.ones((2, 4), dtype=np.float32), np.zeros((1, 4), dtype=np.float32)]
    op = np.array([1, 1])
    with_types = train_step(model, opt, chunks, op, np.array([0, 2]), torch.ones(2), 1.0)
    without = train_step(model, opt, chunks, op, np.array([IGNORE, IGNORE]), torch.ones(2), 1.0)
    only_op = train_step(model, opt, chunks, op, np.array([0, 2]), torch.ones(2), 0.0)
    assert without == pytest.approx(only_op) and with_types > without
    opt.zero_grad()
    train_step(model, opt, chunks, op, np.array([IGNORE, IGNORE]), torch.ones(2), 1.0)
    assert all(p.grad is None or not p.grad.abs().sum() for p in model.type_head.parameters())


def test_compare_scores_teacher_and_rule_against_hand_labels(tmp_path):
    hand_path = tmp_path / "hand.jsonl"
    hand_path.write_text("\n".join(json.dumps(r) for r in [
        {"sample_id": "c", "dia_id": "D1:0", "text": "I went hiking yesterday", "hand": "event"},
        {"sample_id": "c", "dia_id": "D1:1", "text": "I love pottery", "hand": "preference"},
    ]) + "\n")
    teacher = {("c", "D1:0"): "event", ("c", "D1:1"): "fact"}
    got = compare(load_hand(hand_path), teacher, {("c", "D1:0"): "I went hiking yesterday",
                                                  ("c", "D1:1"): "I love pottery"})
    assert got["teacher_vs_hand"]["accuracy"] == 0.5 and got["rule_vs_hand"]["accuracy"] == 1.0
    assert got["rule_vs_teacher"]["accuracy"] == 0.5 and got["teacher_counts"] == {"event": 1, "fact": 1}
    hand_path.write_text(json.dumps({"sample_id": "c", "dia_id": "D1:0", "text": "x", "hand": "gossip"}) + "\n")
    with pytest.raises(ValueError, match="gossip"):
        load_hand(hand_path)


def test_committed_label_files_are_well_formed():
    hand = load_hand(PACKAGED_LABELS.with_name("content_types_hand.jsonl"))
    assert len(hand) == 100 and len({(r["sample_id"], r["dia_id"]) for r in hand}) == 100
    if PACKAGED_LABELS.exists():  # NOTE: written by python -m training.content_teacher (committed)
        assert set(load_labels(PACKAGED_LABELS).values()) <= set(CONTENT_TYPES)
