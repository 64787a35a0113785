"""The vLLM engine backend: vLLM's offline ``LLM`` (continuous batching, xgrammar structured outputs), and the
environment it reads at start-up (see :mod:`serve.engine`)."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Sequence
from typing import Any

from core.config import EngineConfig
from core.generation import GenerationRequest, GenerationResult
from core.model_store import resolve_model
from serve.request_tokens import check_fits, continuation_ids, render_prompt, scored_result

log = logging.getLogger(__name__)


def cpu_ranges(cpus: Iterable[int]) -> str:
    """Compress core ids into vLLM's binding syntax: ``cpu_ranges({0, 1, 2, 5}) == "0-2,5"``."""
    parts: list[str] = []
    for c in sorted(set(cpus)):
        if parts and int(parts[-1].split("-")[-1]) == c - 1:
            parts[-1] = f"{parts[-1].split('-')[0]}-{c}"
        else:
            parts.append(str(c))
    return ",".join(parts)


def vllm_env(config: EngineConfig) -> dict[str, str]:
    """Environment vLLM reads at start-up; variables already set in the process win (and are logged)."""
    wanted = {
        "VLLM_CPU_KVCACHE_SPACE": str(config.kv_cache_gib),
        "VLLM_CPU_OMP_THREADS_BIND": config.cpu_threads_bind or cpu_ranges(os.sched_getaffinity(0)),
        # NOTE: vLLM (like Ray) otherwise advertises the machine's external address.
        "VLLM_HOST_IP": "127.0.0.1",
    }
    for key, value in wanted.items():
        if os.environ.get(key, value) != value:
            log.info(
                "%s=%s from the environment overrides the engine config (%s)", key, os.environ[key], value
            )
        os.environ.setdefault(key, value)
    return {k: os.environ[k] for k in wanted}


class VLLMEngine:
    """vLLM backend (offline ``LLM``); build it under a ``__main__`` guard (engine core: a child process)."""

    supports_regex = True

    def __init__(self, config: EngineConfig | None = None) -> None:
        self.config = config or EngineConfig(backend="vllm")
        self.max_model_len = self.config.max_model_len
        path = resolve_model(self.config.model, self.config.cache_dir)
        log.info("vLLM environment: %s", vllm_env(self.config))  # NOTE: before vllm is imported
        from transformers import AutoTokenizer
        from vllm import LLM
        from vllm.sampling_params import SamplingParams, StructuredOutputsParams

        self._params, self._structured = SamplingParams, StructuredOutputsParams
        self.tokenizer = AutoTokenizer.from_pretrained(path)
        self._llm = LLM(
            model=path,
            dtype=self.config.dtype,
            max_model_len=self.max_model_len,
            enforce_eager=self.config.enforce_eager,
            gpu_memory_utilization=self.config.gpu_memory_utilization,
            seed=self.config.seed,
        )

    def _sampling(self, r: GenerationRequest) -> Any:
        if r.continuation is not None:  # read the prompt, report its tokens' log-probabilities, emit one token
            return self._params(max_tokens=1, temperature=0.0, prompt_logprobs=0)
        so = None
        max_tokens = r.max_tokens or self.config.max_tokens
        if r.choice is not None:
            so = self._structured(choice=list(r.choice))
            if r.max_tokens is None:  # room for the longest choice and the end-of-turn token
                longest = max(len(self.tokenizer(c, add_special_tokens=False).input_ids) for c in r.choice)
                max_tokens = max(max_tokens, longest + 1)
        elif r.regex is not None:
            so = self._structured(regex=r.regex)
        elif r.json_schema is not None:
            so = self._structured(json=r.json_schema)
        return self._params(max_tokens=max_tokens, temperature=r.temperature, structured_outputs=so)

    def generate(self, requests: Sequence[GenerationRequest]) -> list[GenerationResult]:
        from vllm.inputs import TokensPrompt

        prompts = [render_prompt(self.tokenizer, r) for r in requests]
        tails = [continuation_ids(self.tokenizer, r) if r.continuation is not None else [] for r in requests]
        params = [self._sampling(r) for r in requests]
        for i, (ids, tail, sp) in enumerate(zip(prompts, tails, params, strict=True)):
            check_fits(i, len(ids) + len(tail), sp.max_tokens, self.max_model_len)
        if not requests:
            return []
        outs = self._llm.generate(
            [TokensPrompt(prompt_token_ids=ids + tail) for ids, tail in zip(prompts, tails, strict=True)],
            params, use_tqdm=False,
        )
        results = []
        for ids, tail, o in zip(prompts, tails, outs, strict=True):
            if tail:  # NOTE: prompt_logprobs[k] maps token ids to Logprob at position k (None at 0)
                full = o.prompt_token_ids
                results.append(scored_result(len(ids), [o.prompt_logprobs[k][full[k]].logprob
                                                        for k in range(len(ids), len(full))]))
            else:
                out = o.outputs[0]
                results.append(GenerationResult(out.text, len(o.prompt_token_ids), len(out.token_ids),
                                                out.finish_reason))
        return results

    def close(self) -> None:
        """Stop the engine-core child process now rather than at interpreter exit."""
        engine = getattr(self, "_llm", None)
        core = getattr(getattr(engine, "llm_engine", None), "engine_core", None)
        if core is not None:
            core.shutdown()
            # NOTE: vLLM 0.32's sync client leaves its zmq context open (a ResourceWarning at garbage
            # collection). Once its output thread has closed its sockets, the context can be destroyed.
            thread = getattr(core, "output_queue_thread", None)
            if thread is not None:
                thread.join(timeout=10)
            ctx = getattr(core, "ctx", None)
            if ctx is not None and not ctx.closed and (thread is None or not thread.is_alive()):
                ctx.destroy(linger=0)
        self._llm = None
