"""The packaged GGUF converts into a loadable HF model that still knows things."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import torch

from core.config.models import PACKAGED_SMOLLM2
from core.model_store import MARKER, convert, converted_dir, is_converted, known, resolve_model

SMOLLM2 = known(PACKAGED_SMOLLM2)

pytestmark = pytest.mark.model


def test_conversion_is_complete_and_reused(smollm_dir: Path) -> None:
    assert smollm_dir == converted_dir(SMOLLM2)
    assert is_converted(smollm_dir)
    names = {p.name for p in smollm_dir.iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json", "generation_config.json", MARKER} <= names
    assert json.loads((smollm_dir / MARKER).read_text()).get("format_version") == 1
    marker_mtime = (smollm_dir / MARKER).stat().st_mtime_ns
    t0 = time.perf_counter()
    assert resolve_model(PACKAGED_SMOLLM2) == str(convert(SMOLLM2)) == str(smollm_dir)
    assert time.perf_counter() - t0 < 1.0  # a finished conversion is not redone
    assert (smollm_dir / MARKER).stat().st_mtime_ns == marker_mtime


def test_converted_model_loads_with_its_architecture_and_knowledge(tf_engine) -> None:
    cfg = tf_engine.model.config
    assert (cfg.model_type, cfg.num_hidden_layers, cfg.hidden_size, cfg.vocab_size) == (
        "llama",
        30,
        576,
        49152,
    )
    assert "quantization_config" not in cfg.to_dict()
    assert tf_engine.model.lm_head.weight.data_ptr() == tf_engine.model.model.embed_tokens.weight.data_ptr()
    # Real weights, not a fresh initialisation: the next token after a well-known prefix.
    ids = tf_engine.tokenizer("The capital of France is", return_tensors="pt").input_ids
    with torch.inference_mode():
        nxt = tf_engine.model(ids).logits[0, -1].argmax().item()
    assert tf_engine.tokenizer.decode([nxt]).strip() == "Paris"
