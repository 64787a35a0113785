"""Admission classifier (MemRouter) on a tiny random Llama backbone built from a config (no download)."""

import json
from dataclasses import dataclass
from datetime import datetime

import numpy as np
import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from core.config import AdmissionTrainingConfig
from inference.admission import (
    CONTENT_TYPES,
    DEFAULT_THRESHOLD,
    SETTINGS_FILE,
    AdmissionClassifier,
    AdmissionModel,
    ChunkStream,
    chunk_rows,
    content_type_rule,
    pad_chunks,
)
from training.train_admission import (
    ChunkSet,
    best_threshold,
    class_weights,
    evidence_labels,
    fit,
    prf,
    save,
    train_step,
)

DIM = 16


def tiny_backbone(seed: int = 0) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    cfg = LlamaConfig(
        hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        vocab_size=64, max_position_embeddings=64,
    )
    return LlamaForCausalLM(cfg).eval()


def tiny_model(seed: int = 0) -> AdmissionModel:
    model = AdmissionModel(tiny_backbone(seed), DIM, projector_hidden=32)
    torch.manual_seed(seed)
    return model


def random_chunks(rng: np.random.Generator, lengths) -> list[np.ndarray]:
    return [rng.standard_normal((n, DIM)).astype(np.float32) for n in lengths]


def test_shapes_and_left_padding():
    rng = np.random.default_rng(0)
    chunks = random_chunks(rng, [5, 2, 1])
    embeds, mask = pad_chunks(chunks)
    assert embeds.shape == (3, 5, DIM) and mask.tolist()[1] == [0, 0, 0, 1, 1]
    assert torch.equal(embeds[1, 3:], torch.from_numpy(chunks[1]))  # the current turn sits last
    op, ctype = tiny_model()(embeds, mask)
    assert op.shape == (3, 2) and ctype.shape == (3, len(CONTENT_TYPES))
    assert torch.isfinite(op).all() and torch.isfinite(ctype).all()


def test_training_step_leaves_backbone_frozen_and_reaches_projector():
    model = tiny_model()
    before = {k: v.clone() for k, v in model.backbone.state_dict().items()}
    proj_before = [p.detach().clone() for p in model.projector.parameters()]
    assert all(not p.requires_grad for p in model.backbone.parameters())
    assert model.trainable_parameters() == sum(
        p.numel() for m in (model.projector, model.op_head, model.type_head) for p in m.parameters()
    )
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    model.train()
    assert not model.backbone.training  # train() keeps the frozen stack in eval mode
    chunks = random_chunks(np.random.default_rng(1), [5, 3, 5, 1])
    train_step(model, opt, chunks, np.array([1, 0, 1, 0]), np.array([2, 0, 1, 5]), torch.ones(2), 0.5)
    grads = [p.grad for p in model.projector.parameters()]
    assert all(g is not None and g.abs().sum() > 0 for g in grads)
    assert all(not torch.equal(a, b) for a, b in zip(proj_before, model.projector.parameters(), strict=True))
    for k, v in model.backbone.state_dict().items():
        assert torch.equal(v, before[k]), k
    assert all(p.grad is None for p in model.backbone.parameters())
    assert not any(k.startswith("backbone.") for k in model.trainable_state())


def planted(rng: np.random.Generator, n_turns: int) -> ChunkSet:
    """ADD iff the current turn's first coordinate is positive; the type is planted in coordinate 1's sign."""
    vectors = rng.standard_normal((n_turns, DIM)).astype(np.float32)
    op = (vectors[:, 0] > 0).astype(np.int64)
    ctype = np.where(vectors[:, 1] > 0, 2, 3).astype(np.int64)
    return ChunkSet(vectors, chunk_rows(n_turns, 5), op, ctype)


def test_tiny_training_separates_a_planted_pattern():
    rng = np.random.default_rng(0)
    train, holdout = planted(rng, 160), planted(rng, 60)
    model = tiny_model()
    cfg = AdmissionTrainingConfig(epochs=8, patience=8, batch_size=32, lr=1e-2, weight_decay=0.0)
    result = fit(model, train, holdout, cfg, progress=False)
    clf = AdmissionClassifier(model, threshold=result.threshold)
    decisions = clf.classify(holdout.chunks(range(len(holdout.rows))))
    pred = np.array([d.op == "ADD" for d in decisions])
    acc = float((pred == holdout.op.astype(bool)).mean())
    assert acc >= 0.85, acc
    assert prf(pred, holdout.op)["f1"] >= 0.85
    add = holdout.op == 1
    types = np.array([CONTENT_TYPES.index(d.content_type) for d in decisions])
    assert float((types[add] == holdout.ctype[add]).mean()) >= 0.75  # chance: 0.5


def test_decision_alone_equals_decision_in_a_batch():
    rng = np.random.default_rng(3)
    chunks = random_chunks(rng, [5, 1, 3, 5, 2, 4])
    clf = AdmissionClassifier(tiny_model(), threshold=DEFAULT_THRESHOLD)
    batched_p, batched_t = clf.p_add(chunks)
    batch = clf.classify(chunks)
    for i, chunk in enumerate(chunks):
        p, t = clf.p_add([chunk])
        assert p[0] == pytest.approx(batched_p[i], abs=1e-5)
        assert np.allclose(t[0], batched_t[i], atol=1e-5)
        assert clf.classify([chunk])[0].op == batch[i].op


def test_save_and_load_roundtrip_and_missing_weights_message(tmp_path):
    from training.train_admission import FitResult

    model = tiny_model(seed=4)
    with torch.no_grad():
        model.op_head[-1].bias.add_(0.3)
    settings = {"backbone": "tiny", "embed_dim": DIM, "projector_hidden": 32, "threshold": 0.42}
    save(tmp_path, model, FitResult(model.trainable_state(), 0.42, 0.0), settings)
    loaded = AdmissionClassifier.load(tmp_path, backbone_loader=lambda name: tiny_backbone(seed=4))
    chunks = random_chunks(np.random.default_rng(5), [5, 2])
    assert loaded.threshold == 0.42  # nothing configured: the trained threshold
    configured = AdmissionClassifier.load(tmp_path, backbone_loader=lambda name: tiny_backbone(seed=4), threshold=0.3)
    assert configured.threshold == 0.3  # a configured threshold wins over the trained one
    reference = AdmissionClassifier(model, threshold=DEFAULT_THRESHOLD)
    assert np.allclose(loaded.p_add(chunks)[0], reference.p_add(chunks)[0], atol=1e-6)
    settings_file = tmp_path / SETTINGS_FILE
    untrained = {k: v for k, v in json.loads(settings_file.read_text()).items() if k != "threshold"}
    settings_file.write_text(json.dumps(untrained))
    fallback = AdmissionClassifier.load(tmp_path, backbone_loader=lambda name: tiny_backbone(seed=4))
    assert fallback.threshold == DEFAULT_THRESHOLD  # neither configured nor trained
    with pytest.raises(FileNotFoundError, match="python -m training.train_admission"):
        AdmissionClassifier.load(tmp_path / "nothing")


class FakeEncoder:
    """Counts what it embeds: each turn must be embedded once."""

    dim = DIM

    def __init__(self):
        self.seen: list[str] = []

    def encode(self, texts):
        self.seen += list(texts)
        return np.stack([np.full(DIM, float(len(self.seen) - len(texts) + i)) for i in range(len(texts))])


@dataclass(frozen=True)
class T:
    conv_id: str
    turn_id: str
    speaker: str
    text: str
    date_time: str = "1:56 pm on 8 May, 2023"
    timestamp: datetime = datetime(2023, 5, 8, 13, 56)


def test_chunk_stream_embeds_each_turn_once_and_keeps_conversations_apart():
    enc = FakeEncoder()
    stream = ChunkStream(enc, max_turns=3)
    first = stream.push([T("a", f"D1:{i}", "Mel", f"turn {i}") for i in range(4)])
    other = stream.push([T("b", "D1:0", "Jo", "hello"), T("a", "D1:4", "Mel", "turn 4")])
    assert len(enc.seen) == 6 and enc.seen[0] == "[1:56 pm on 8 May, 2023] Mel: turn 0"
    assert [len(c) for c in first] == [1, 2, 3, 3]
    assert first[3][:, 0].tolist() == [1.0, 2.0, 3.0]
    assert other[0][:, 0].tolist() == [4.0]  # conversation b starts fresh
    assert other[1][:, 0].tolist() == [2.0, 3.0, 5.0]


def test_labels_rules_and_helpers():
    @dataclass
    class Q:
        evidence: list

    @dataclass
    class C:
        turns: list
        questions: list

    @dataclass
    class LT:
        dia_id: str

    conv = C([LT(f"D1:{i}") for i in range(3)], [Q(["D1:2"]), Q(["D1:2", "D1:0"])])
    assert evidence_labels(conv).tolist() == [1, 0, 1]
    assert content_type_rule("We are going to Paris next month!") == "plan"
    assert content_type_rule("I went hiking yesterday") == "event"
    assert content_type_rule("I feel so proud") == "emotion"
    assert content_type_rule("I love pottery") == "preference"
    assert content_type_rule("My sister is a nurse") == "fact"
    assert content_type_rule("Hey!") == "other"
    assert chunk_rows(3, 2) == [[0], [0, 1], [1, 2]]
    assert best_threshold(np.array([0.9, 0.2, 0.6]), np.array([1, 0, 1])) == (0.6, 1.0)
    assert class_weights(np.array([0, 0, 0, 1])).tolist() == pytest.approx([2 / 3, 2.0])
    assert prf([1, 0, 1], [1, 1, 0]) == {"precision": 0.5, "recall": 0.5, "f1": 0.5}


def test_bench_helpers():
    from bench.admission import FREE_TOKENS, even_sample, generated_op, generative_request, random_f1

    assert even_sample(10, 3) == [0, 4, 9] and even_sample(2, 5) == [0, 1]
    assert random_f1(0.25, 1.0) == pytest.approx(0.4)
    req = generative_request([T("a", "D1:0", "Mel", "I love pottery"), T("a", "D1:1", "Jo", "Nice")])
    assert req.choice == ["ADD", "NOOP"] and req.temperature == 0.0
    assert req.messages[-1].content.count("\n[1:56 pm on 8 May, 2023]") == 2  # two turns, one per line
    assert "Jo: Nice" in req.messages[-1].content
    free = generative_request([T("a", "D1:0", "Mel", "I love pottery")], constrained=False)
    assert free.choice is None and free.max_tokens == FREE_TOKENS and free.messages == req.messages[:1] + [
        free.messages[-1]]
    assert generated_op(" add.") and generated_op("ADD\n") and not generated_op("NOOP") and not generated_op("")
    assert not generated_op("Additionally") and not generated_op("...")


def test_type_agreement_against_the_rule():
    from bench.admission import type_agreement

    got = type_agreement(["plan", "plan", "event", "other"], ["plan", "event", "event", "event"])
    assert got["n"] == 4 and got["accuracy"] == pytest.approx(0.5)
    assert got["majority_accuracy"] == pytest.approx(0.75)  # "event" is 3 of the 4 rule labels
    # plan: P 1/2, R 1/1 -> 2/3; event: P 1/1, R 1/3 -> 0.5; other: P 0, R 0 -> 0
    assert got["per_type"]["plan"]["f1"] == pytest.approx(2 / 3) and got["per_type"]["event"]["support"] == 3
    assert got["macro_f1"] == pytest.approx((2 / 3 + 0.5 + 0.0) / 3)
    assert set(got["per_type"]) == {"plan", "event", "other"}
    assert type_agreement([], [])["n"] == 0


def deep_backbone(seed: int = 0, layers: int = 4) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    cfg = LlamaConfig(
        hidden_size=32, intermediate_size=64, num_hidden_layers=layers, num_attention_heads=4,
        num_key_value_heads=2, vocab_size=64, max_position_embeddings=64,
    )
    return LlamaForCausalLM(cfg).eval()


@pytest.mark.parametrize("k", [0, 1, 3])
def test_early_exit_heads_read_the_kth_hidden_state(k):
    full = deep_backbone().model
    model = AdmissionModel(deep_backbone().model, DIM, projector_hidden=32, exit_layer=k)
    assert model.exit_layer == k and len(model.backbone.layers) == k  # the later layers are gone
    assert all(not p.requires_grad for p in model.backbone.parameters())
    chunks = random_chunks(np.random.default_rng(k), [4, 2, 1])
    embeds, mask = pad_chunks(chunks)
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    with torch.no_grad():
        soft = model.projector(embeds)
        states = full(inputs_embeds=soft, attention_mask=mask, position_ids=positions, output_hidden_states=True)
        # hidden_states[k] = after k layers (pre-norm); the exit applies the decoder's final norm to it
        expected = full.norm(states.hidden_states[k])[:, -1]
        got = model.backbone(inputs_embeds=soft, attention_mask=mask, position_ids=positions).last_hidden_state[:, -1]
        op, _ = model(embeds, mask)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(op, model.op_head(expected), atol=1e-5, rtol=1e-5)
    if k == 0:  # no layer: the current turn alone decides, whatever came before it
        other = [np.concatenate([np.ones((3, DIM), np.float32), chunks[0][-1:]])]
        p = AdmissionClassifier(model, threshold=0.5).p_add([chunks[0], other[0]])[0]
        assert p[0] == pytest.approx(p[1], abs=1e-6)


def test_exit_layer_is_saved_and_loaded_and_int8_agrees_with_float(tmp_path):
    from training.train_admission import FitResult

    model = AdmissionModel(deep_backbone(seed=2), DIM, projector_hidden=32, exit_layer=2)
    settings = {"backbone": "tiny", "exit_layer": model.exit_layer, "embed_dim": DIM, "projector_hidden": 32,
                "threshold": 0.5}
    save(tmp_path, model, FitResult(model.trainable_state(), 0.5, 0.0), settings)
    float_clf = AdmissionClassifier.load(tmp_path, backbone_loader=lambda name: deep_backbone(seed=2), threshold=0.5)
    int8_clf = AdmissionClassifier.load(tmp_path, backbone_loader=lambda name: deep_backbone(seed=2), threshold=0.5,
                                        dtype="int8")
    assert float_clf.model.exit_layer == 2 and len(float_clf.model.backbone.layers) == 2
    assert any("quantized" in type(m).__module__ for m in int8_clf.model.backbone.modules())
    chunks = random_chunks(np.random.default_rng(6), [5, 3, 1, 5, 2, 4, 5, 5])
    reference = AdmissionClassifier(model, threshold=0.5).p_add(chunks)[0]
    np.testing.assert_allclose(float_clf.p_add(chunks)[0], reference, atol=1e-6)
    np.testing.assert_allclose(int8_clf.p_add(chunks)[0], reference, atol=0.02)
