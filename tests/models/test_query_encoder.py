"""The ingress's ONNX query encoders against the float MiniLM model (exported once into a temporary cache)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from core.config import EmbedderConfig
from serve.embedder import ModelNotAvailableError
from serve.query_encoder import OnnxQueryEncoder, SentenceModelSpec, build_query_encoder

pytestmark = pytest.mark.model

SENTENCES = [
    "What did Caroline research?",
    "When did Melanie go to the museum with her kids?",
    "Where did Jon move last year after the job offer?",
    "How many children does Melanie have?",
    "[1:56 pm on 8 May, 2023] Caroline: I went to a LGBTQ support group yesterday and it was so powerful.",
    "Which book did Melanie read on her trip to the mountains, and did she like it?",
    "ok",
    "What is Gina's favourite dance style, and why did she start her own studio in 2022?",
]


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("engram-cache")


@pytest.fixture(scope="module")
def reference(minilm) -> np.ndarray:
    return minilm.encode(SENTENCES, is_query=True)


# int8 agrees at cosine >= 0.99 on average (0.9937 over the 1,345 LoCoMo train questions, min 0.986, recall@10 of
# evidence 0.995 of the float model's: bench.query_encoder); a one-word text ("ok") is its worst case (~0.973)
@pytest.mark.parametrize(("runtime", "floor", "mean_floor"), [("onnx", 0.9999, 0.9999), ("onnx-int8", 0.97, 0.99)])
def test_onnx_query_vectors_agree_with_the_float_model(cache, reference, runtime, floor, mean_floor) -> None:
    encoder = build_query_encoder(EmbedderConfig(query_runtime=runtime), cache)
    assert isinstance(encoder, OnnxQueryEncoder)
    singles = np.concatenate([encoder.encode([s], is_query=True) for s in SENTENCES])
    assert singles.shape == reference.shape and singles.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(singles, axis=1), 1.0, atol=1e-5)
    cosine = (singles * reference).sum(axis=1)
    assert cosine.min() >= floor and cosine.mean() >= mean_floor, cosine
    # in one call (padded into one batch for onnx; int8 runs one text at a time, its activation scales per call)
    batched = encoder.encode(SENTENCES, is_query=True)
    assert (batched * singles).sum(axis=1).min() >= 0.9999


def test_the_export_is_cached_and_reused(cache) -> None:
    first = OnnxQueryEncoder(EmbedderConfig(), cache, int8=True)
    stamp = first.path.stat().st_mtime_ns
    second = OnnxQueryEncoder(EmbedderConfig(), cache, int8=True)
    assert second.path == first.path and second.path.stat().st_mtime_ns == stamp
    assert sorted(p.name for p in first.path.parent.iterdir()) == ["model.int8.onnx", "model.onnx"]  # no tmp left


def test_torch_runtime_is_the_write_side_embedder(cache) -> None:
    from serve.embedder import Embedder

    assert isinstance(build_query_encoder(EmbedderConfig(query_runtime="torch"), cache), Embedder)


def test_models_the_onnx_path_cannot_run_are_refused_with_advice(tmp_path) -> None:
    (tmp_path / "1_Pooling").mkdir()
    (tmp_path / "1_Pooling" / "config.json").write_text(json.dumps({"pooling_mode_max_tokens": True}))
    modules = [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
               {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}]
    (tmp_path / "modules.json").write_text(json.dumps(modules))
    with pytest.raises(ModelNotAvailableError, match="query_runtime: torch"):
        SentenceModelSpec(tmp_path)
    modules.append({"idx": 2, "name": "2", "path": "2_Dense", "type": "sentence_transformers.models.Dense"})
    (tmp_path / "modules.json").write_text(json.dumps(modules))
    with pytest.raises(ModelNotAvailableError, match="Dense"):
        SentenceModelSpec(tmp_path)
    with pytest.raises(ModelNotAvailableError, match="local folder"):
        OnnxQueryEncoder(EmbedderConfig(model="some-org/hub-model"), tmp_path)
