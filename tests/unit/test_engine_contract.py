"""Engine request/bill/config contracts and the conversion cache logic, without loading a model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

import core.model_store as model_store
from core.config import EngineConfig
from core.config.models import KNOWN_MODELS, PACKAGED_SMOLLM2
from core.generation import GenerationRequest, GenerationResult, TokenBill
from serve.vllm_engine import cpu_ranges, vllm_env


def test_request_needs_one_input_and_at_most_one_constraint() -> None:
    ok = GenerationRequest(messages=[{"role": "user", "content": "hi"}], choice=["a", "b"])
    assert ok.constraint == "choice" and GenerationRequest(prompt="x").constraint is None
    bad = [
        {},
        {"prompt": "x", "messages": [{"role": "user", "content": "hi"}]},
        {"prompt": "x", "choice": ["a"], "regex": "a"},
        {"prompt": "x", "choice": ["a", "a"]},
        {"prompt": "x", "choice": []},
        {"prompt": "x", "temperature": -1},
        {"prompt": "x", "max_tokens": 0},
        {"messages": [{"role": "robot", "content": "hi"}]},
        {"prompt": "x", "stop": ["\n"]},
    ]
    for kwargs in bad:
        with pytest.raises(ValidationError):
            GenerationRequest(**kwargs)


def test_token_bills_add_up() -> None:
    results = [GenerationResult("a", 10, 2, "stop"), GenerationResult("b", 5, 1, "stop")]
    assert sum(r.bill for r in results) == TokenBill.of(results) == TokenBill(15, 3, 2)
    assert TokenBill.of([]) == TokenBill() and TokenBill(15, 3, 2).total_tokens == 18


def test_cpu_ranges() -> None:
    assert cpu_ranges({0, 1, 2, 5}) == "0-2,5"
    assert (
        cpu_ranges([3]) == "3"
        and cpu_ranges([1, 0]) == "0-1"
        and cpu_ranges([0, 2, 3, 4, 7, 8]) == "0,2-4,7-8"
    )


def test_vllm_env_keeps_variables_already_set(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in ("VLLM_CPU_KVCACHE_SPACE", "VLLM_CPU_OMP_THREADS_BIND", "VLLM_HOST_IP"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "4")
    env = vllm_env(EngineConfig(kv_cache_gib=1, cpu_threads_bind="0-1"))
    assert env == {
        "VLLM_CPU_KVCACHE_SPACE": "4",
        "VLLM_CPU_OMP_THREADS_BIND": "0-1",
        "VLLM_HOST_IP": "127.0.0.1",
    }


SMOLLM2 = KNOWN_MODELS["smollm2-135m"]


def test_engine_config_is_strict() -> None:
    assert EngineConfig().model == PACKAGED_SMOLLM2
    for kwargs in (
        {"backend": "llamacpp"},
        {"max_model_len": 0},
        {"kv_cache_gib": 0},
        {"unknown": 1},
        {"model": " "},
    ):
        with pytest.raises(ValidationError):
            EngineConfig(**kwargs)


def test_resolve_model_passes_other_names_through(tmp_path: Path) -> None:
    assert (
        model_store.resolve_model("HuggingFaceTB/SmolLM2-135M-Instruct", tmp_path)
        == "HuggingFaceTB/SmolLM2-135M-Instruct"
    )
    assert model_store.resolve_model(str(tmp_path), tmp_path) == str(tmp_path)
    with pytest.raises(ValueError, match="unknown packaged model"):
        model_store.resolve_model("packaged:Llama-70B", tmp_path)
    assert model_store.converted_dir(SMOLLM2, tmp_path) == tmp_path / "models" / "SmolLM2-135M-Instruct"


def test_convert_redoes_a_half_written_dir_and_skips_a_finished_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[Path] = []

    def fake_convert_into(gguf: Path, out: Path, architecture: str) -> None:  # stands in for the GGUF conversion
        calls.append(out)
        out.mkdir(parents=True)
        (out / "config.json").write_text("{}")

    gguf = tmp_path / SMOLLM2.file
    gguf.write_bytes(b"GGUF")
    monkeypatch.setattr(model_store, "_convert_into", fake_convert_into)
    monkeypatch.setattr(model_store, "source_file", lambda model, cache_dir=None: gguf)
    target = model_store.converted_dir(SMOLLM2, tmp_path)
    target.mkdir(parents=True)
    (target / "model.safetensors").write_text("truncated")  # an interrupted earlier run: no marker

    assert model_store.resolve_model(PACKAGED_SMOLLM2, tmp_path) == str(target)
    assert len(calls) == 1 and not (target / "model.safetensors").exists()
    assert json.loads((target / model_store.MARKER).read_text())["model"] == "smollm2-135m"
    assert sorted(p.name for p in target.parent.iterdir()) == ["SmolLM2-135M-Instruct"]  # no temp dir left

    assert model_store.convert(SMOLLM2, tmp_path) == target and len(calls) == 1  # finished: skipped
    assert model_store.convert(SMOLLM2, tmp_path, force=True) == target and len(calls) == 2
