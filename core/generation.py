"""The model-engine protocol every layer speaks: a request, its result, the token bill, the engine seam.

``serve/engine.py`` holds the engines (transformers, vLLM) that implement :class:`GenerationEngine`; cores
(assistants, the master) take any engine that does, including the test doubles of the unit tests.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field, model_validator


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    role: Literal["system", "user", "assistant"]
    content: str


class GenerationRequest(BaseModel):
    """One prompt: chat ``messages`` (rendered with the model's chat template) or a raw ``prompt``.

    At most one output constraint: ``choice`` (the output is exactly one of the strings), ``regex``
    (the output matches it) or ``json_schema`` (the output is a JSON instance of it; give strings a
    ``maxLength`` and arrays a ``maxItems``, or a small model loops inside a string until cut off).

    A request with ``continuation`` generates nothing: the model reads the prompt followed by the
    continuation (tokenised on its own) and the result carries the log-probability of each
    continuation token (``GenerationResult.continuation_logprobs``) — a likelihood score in one pass.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    messages: list[ChatMessage] | None = Field(
        None, min_length=1, description="Chat turns; the assistant replies."
    )
    prompt: str | None = Field(None, description="Raw text continued as is (no chat template).")
    max_tokens: int | None = Field(
        None, gt=0, le=32_768, description="Completion cap; None: the engine default."
    )
    temperature: float = Field(0.0, ge=0, le=2, description="0 = greedy (deterministic).")
    choice: list[str] | None = Field(None, min_length=1, max_length=256, description="Allowed outputs.")
    regex: str | None = Field(None, min_length=1, description="Pattern the whole output must match.")
    json_schema: dict[str, Any] | None = Field(None, description="JSON schema the output must satisfy.")
    continuation: str | None = Field(
        None, min_length=1, description="Score this text after the prompt instead of generating (no constraint)."
    )

    @model_validator(mode="after")
    def _one_input_one_constraint(self) -> GenerationRequest:
        if (self.messages is None) == (self.prompt is None):
            raise ValueError("give exactly one of 'messages' or 'prompt'")
        if sum(c is not None for c in (self.choice, self.regex, self.json_schema)) > 1:
            raise ValueError("at most one of 'choice', 'regex', 'json_schema'")
        if self.choice is not None and (len(set(self.choice)) != len(self.choice) or "" in self.choice):
            raise ValueError("'choice' must hold distinct non-empty strings")
        if self.continuation is not None and self.constraint is not None:
            raise ValueError("a scored request ('continuation') takes no output constraint")
        return self

    @property
    def constraint(self) -> Literal["choice", "regex", "json_schema"] | None:
        for name in ("choice", "regex", "json_schema"):
            if getattr(self, name) is not None:
                return name  # type: ignore[return-value]
        return None


@dataclass(frozen=True)
class TokenBill:
    """Tokens paid for over ``calls`` model calls; bills add up (``sum(bills)`` works, it starts at 0).

    >>> TokenBill(10, 2, 1) + TokenBill(5, 1, 1)
    TokenBill(prompt_tokens=15, completion_tokens=3, calls=2)
    """

    prompt_tokens: int = 0
    completion_tokens: int = 0
    calls: int = 0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def __add__(self, other: object) -> TokenBill:
        if not isinstance(other, TokenBill):
            return NotImplemented
        return TokenBill(
            self.prompt_tokens + other.prompt_tokens,
            self.completion_tokens + other.completion_tokens,
            self.calls + other.calls,
        )

    def __radd__(self, other: object) -> TokenBill:
        if other == 0:  # sum() starts from 0
            return self
        return NotImplemented

    @classmethod
    def of(cls, results: Iterable[GenerationResult]) -> TokenBill:
        return sum((r.bill for r in results), cls())


@dataclass(frozen=True)
class GenerationResult:
    text: str
    prompt_tokens: int
    completion_tokens: int
    finish_reason: str  # "stop" (end of turn / choice complete) or "length" (hit max_tokens)
    choice_logprobs: dict[str, float] | None = None  # TransformersEngine's choice scores, best first
    continuation_logprobs: tuple[float, ...] | None = None  # a scored request's per-token log-probabilities

    @property
    def bill(self) -> TokenBill:
        return TokenBill(self.prompt_tokens, self.completion_tokens, 1)


@runtime_checkable
class GenerationEngine(Protocol):
    """A loaded model that answers a batch of requests: one result per request, in request order.

    - One ``generate`` call is one batched model invocation; callers gather requests, the engine batches.
    - ``temperature == 0`` is greedy: a request's output does not depend on what else is in the batch
      (up to floating-point ties).
    - ``prompt_tokens`` counts the tokens the model read (chat template included); ``completion_tokens``
      the tokens it produced, including the end-of-turn token when it stopped on one (``text`` leaves
      that token out). Both backends render prompts identically, so bills compare across backends.
    - A constrained request (``choice``/``regex``/``json_schema``) returns output that satisfies the
      constraint unless ``finish_reason == "length"``. An engine that cannot honour a constraint raises
      ``NotImplementedError`` before running anything; a request longer than ``max_model_len`` raises
      ``ValueError``, also before running anything.
    """

    max_model_len: int

    def generate(self, requests: Sequence[GenerationRequest]) -> list[GenerationResult]: ...

    def close(self) -> None: ...
