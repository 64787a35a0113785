"""Admission classifier on the real frozen SmolLM2-135M backbone and real MiniLM turn embeddings."""

import json
from dataclasses import dataclass
from datetime import datetime

import numpy as np
import pytest
import torch

from core.config.models import PACKAGED_SMOLLM2
from inference.admission import AdmissionClassifier, AdmissionModel, ChunkStream, load_backbone, pad_chunks

pytestmark = pytest.mark.model


@dataclass(frozen=True)
class Turn:
    conv_id: str
    turn_id: str
    speaker: str
    text: str
    date_time: str = "1:56 pm on 8 May, 2023"
    timestamp: datetime = datetime(2023, 5, 8, 13, 56)


TEXTS = [
    ("Mel", "Hey, how are you?"),
    ("Caroline", "Good! I went to an LGBTQ support group yesterday."),
    ("Mel", "I finally signed up for the pottery class on Saturdays."),
    ("Caroline", "I'm thinking about studying counseling next year."),
    ("Mel", "My daughter turned eight and we baked a chocolate cake."),
    ("Caroline", "Ha, nice."),
]


@pytest.fixture(scope="module")
def backbone(smollm_dir):
    return load_backbone(PACKAGED_SMOLLM2)


def test_real_backbone_takes_inputs_embeds(backbone):
    assert backbone.config.hidden_size == 576
    embeds = torch.randn(2, 5, 576) * 0.05
    mask = torch.tensor([[1] * 5, [0, 0, 1, 1, 1]])
    with torch.no_grad():
        out = backbone(inputs_embeds=embeds, attention_mask=mask, position_ids=(mask.cumsum(-1) - 1).clamp(min=0))
    assert out.last_hidden_state.shape == (2, 5, 576)
    assert torch.isfinite(out.last_hidden_state).all()


def test_classifier_decides_the_same_alone_and_in_a_batch(backbone, minilm):
    torch.manual_seed(0)
    model = AdmissionModel(backbone, minilm.dim, projector_hidden=256)
    assert all(not p.requires_grad for p in model.backbone.parameters())
    assert model.trainable_parameters() < 0.01 * sum(p.numel() for p in model.parameters())
    chunks = ChunkStream(minilm, max_turns=5).push([Turn("c", f"D1:{i}", s, t) for i, (s, t) in enumerate(TEXTS)])
    assert [len(c) for c in chunks] == [1, 2, 3, 4, 5, 5]
    assert pad_chunks(chunks)[0].shape == (6, 5, 384)
    median = float(np.median(AdmissionClassifier(model, threshold=0.5).p_add(chunks)[0]))
    clf = AdmissionClassifier(model, threshold=median)
    batch_p, _ = clf.p_add(chunks)
    batch = clf.classify(chunks)
    for i, chunk in enumerate(chunks):
        alone = clf.classify([chunk])[0]
        assert alone.p_add == pytest.approx(batch_p[i], abs=1e-4)
        assert alone.op == batch[i].op and alone.content_type == batch[i].content_type


def test_the_committed_heads_load_and_int8_agrees_with_float(minilm):
    from core.config import load_config
    from inference.admission import SETTINGS_FILE, WEIGHTS_FILE, packaged_weights

    heads = packaged_weights()
    assert (heads / WEIGHTS_FILE).stat().st_size <= 5 * 2**20
    settings = json.loads((heads / SETTINGS_FILE).read_text())
    assert settings["trained_from"]["data_sha256"] and settings["holdout_conversation"] == "conv-47"
    cfg = load_config("cpu")
    assert cfg.admission.mode == "classifier" and cfg.admission.weights == "packaged"
    clf = AdmissionClassifier.from_config(cfg)
    assert clf.model.exit_layer == settings["exit_layer"] == len(clf.model.backbone.layers)
    chunks = ChunkStream(minilm, max_turns=5).push([Turn("c", f"D1:{i}", s, t) for i, (s, t) in enumerate(TEXTS)])
    p_float = clf.p_add(chunks)[0]
    assert clf.threshold == pytest.approx(settings["threshold"])
    int8 = AdmissionClassifier.from_config(load_config("cpu", {"admission": {"dtype": "int8"}}))
    # measured max 0.06 (heads trained on rule labels), 0.114 (teacher labels, committed 2026-12-03)
    np.testing.assert_allclose(int8.p_add(chunks)[0], p_float, atol=0.15)
    # the greeting and the filler are worth less than the turns with news in them
    assert max(p_float[0], p_float[5]) < min(p_float[1:5])
