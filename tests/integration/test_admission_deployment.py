"""The admission classifier as a Serve deployment: it loads the saved projector + heads over the frozen
backbone and decides exactly as the same classifier does in-process.

The checkpoint is an untrained projector + heads (seeded) saved in the training command's format — a
fixture, so that CI needs no 7-minute training run; what is checked is loading and hosting, not quality.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from core.config import load_config
from core.config.models import PACKAGED_SMOLLM2
from core.model_store import resolve_model
from inference.admission import SETTINGS_FILE, WEIGHTS_FILE, AdmissionClassifier, AdmissionModel, load_backbone


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    cache = tmp_path_factory.mktemp("engram-cache")
    backbone_cache = load_config().paths.cache_dir  # the converted SmolLM2 lives in the user's cache
    resolve_model(PACKAGED_SMOLLM2, backbone_cache)
    torch.manual_seed(7)
    model = AdmissionModel(load_backbone(PACKAGED_SMOLLM2, backbone_cache), embed_dim=384, projector_hidden=64)
    out = cache / "admission"
    out.mkdir()
    torch.save(model.trainable_state(), out / WEIGHTS_FILE)
    (out / SETTINGS_FILE).write_text(json.dumps({
        "backbone": PACKAGED_SMOLLM2, "exit_layer": model.exit_layer, "embed_dim": 384,
        "projector_hidden": 64, "threshold": 0.5}))
    return cache


def test_deployment_decides_like_the_in_process_classifier(serve_url, checkpoint):
    from ray import serve

    from serve.deployments import AdmissionService

    weights = str(checkpoint / "admission")
    config = load_config("cpu", {"admission": {"weights": weights}}).model_dump(mode="json")
    app = serve.deployment(AdmissionService, name="Admission",
                           ray_actor_options={"num_cpus": 0, "resources": {"engram_head": 1}}).bind(config)
    handle = serve.run(app, name="admission-test", route_prefix=None)
    try:
        rng = np.random.default_rng(0)
        chunks = [rng.normal(size=(n, 384)).astype(np.float32) for n in (1, 3, 5, 2)]
        chunks = [c / np.linalg.norm(c, axis=1, keepdims=True) for c in chunks]
        served = handle.classify.remote(chunks).result()
        local = AdmissionClassifier.load(weights, threshold=0.5).classify(chunks)
        assert [d.op for d in served] == [d.op for d in local]
        assert [d.content_type for d in served] == [d.content_type for d in local]
        np.testing.assert_allclose([d.p_add for d in served], [d.p_add for d in local], atol=1e-5)
    finally:
        serve.delete("admission-test")
