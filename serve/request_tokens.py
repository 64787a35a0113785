"""A generation request as token ids, for both engine backends (:mod:`serve.transformers_engine`,
:mod:`serve.vllm_engine`): the prompt the model reads, a scored request's continuation, the length check against
``max_model_len``, and the result of a scored request."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from core.generation import GenerationRequest, GenerationResult


def render_prompt(tokenizer: Any, request: GenerationRequest) -> list[int]:
    """Token ids the model reads: the chat template with the assistant turn opened, or the raw prompt."""
    if request.messages is not None:
        text = tokenizer.apply_chat_template(
            [m.model_dump() for m in request.messages], tokenize=False, add_generation_prompt=True
        )
        return list(tokenizer(text, add_special_tokens=False).input_ids)
    return list(tokenizer(request.prompt).input_ids)


def continuation_ids(tokenizer: Any, request: GenerationRequest) -> list[int]:
    """Token ids of a scored request's continuation, tokenised on its own (no special tokens)."""
    return list(tokenizer(request.continuation, add_special_tokens=False).input_ids)


def scored_result(prompt_len: int, logprobs: Sequence[float]) -> GenerationResult:
    """The result of a scored request: no text, the continuation's log-probabilities."""
    return GenerationResult("", prompt_len + len(logprobs), 0, "stop",
                            continuation_logprobs=tuple(float(x) for x in logprobs))


def check_fits(i: int, prompt_len: int, budget: int, max_model_len: int) -> None:
    if prompt_len + budget > max_model_len:
        raise ValueError(
            f"request {i}: {prompt_len} prompt tokens + {budget} completion tokens "
            f"exceed max_model_len={max_model_len}"
        )
