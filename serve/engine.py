"""Small-model generation engines: two backends of ``core.generation.GenerationEngine`` (plain classes, no Ray).

Assistants (evidence extraction) and the master model call an engine with many requests at once; the
engine runs them as one batched model call and bills the tokens of each::

    engine = build_engine(EngineConfig(backend="transformers"))
    ask = GenerationRequest(messages=[{"role": "user", "content": "What is the capital of France?"}])
    [r] = engine.generate([ask])
    r.text              # 'The capital of France is Paris.'
    r.bill              # TokenBill(prompt_tokens=37, completion_tokens=8, calls=1)

Backends (each in a module of its own; their names are importable from here):
- :class:`TransformersEngine` (:mod:`serve.transformers_engine`): HF ``generate`` with left padding; ``choice``
  is decided by scoring every choice's log-likelihood (valid by construction); ``regex`` / ``json_schema`` are
  not supported.
- :class:`VLLMEngine` (:mod:`serve.vllm_engine`): vLLM's offline ``LLM`` (continuous batching, xgrammar
  structured outputs).
  NOTE: vLLM runs its engine in a child process, so a script that builds one needs an
  ``if __name__ == "__main__":`` guard; on CPU it must also run where Ray/vLLM cannot dial an external
  address (the loopback-only namespace here).
"""

from __future__ import annotations

from core.config import EngineConfig
from core.generation import GenerationEngine
from serve.request_tokens import continuation_ids, render_prompt, scored_result
from serve.transformers_engine import SHARED_PREFIX_MIN, SHARED_ROW_TOKENS, TransformersEngine
from serve.vllm_engine import VLLMEngine, cpu_ranges, vllm_env

__all__ = [
    "SHARED_PREFIX_MIN",
    "SHARED_ROW_TOKENS",
    "TransformersEngine",
    "VLLMEngine",
    "build_engine",
    "continuation_ids",
    "cpu_ranges",
    "render_prompt",
    "scored_result",
    "vllm_env",
]


def build_engine(config: EngineConfig) -> GenerationEngine:
    """The engine ``config.backend`` names, with its model loaded (vLLM: call under a ``__main__`` guard)."""
    if config.backend == "vllm":
        return VLLMEngine(config)
    return TransformersEngine(config)
