"""Test doubles. Never used by the product: unit tests only."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence

import numpy as np


class HashingEncoder:
    """Bag of lowercased word tokens hashed into ``dim`` buckets, L2-normalised.

    Texts sharing words are similar, which is all the unit tests need; no model involved.
    """

    def __init__(self, dim: int = 64) -> None:
        self.dim = dim

    def encode(self, texts: Sequence[str], *, is_query: bool = False) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for row, text in enumerate(texts):
            for token in re.findall(r"[a-z0-9]+", text.lower()):
                bucket = int.from_bytes(hashlib.blake2b(token.encode(), digest_size=4).digest(), "little")
                out[row, bucket % self.dim] += 1.0
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        return out / np.where(norms == 0, 1, norms)


def unit_vectors(n: int, dim: int, seed: int = 0) -> np.ndarray:
    v = np.random.default_rng(seed).normal(size=(n, dim)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


class ScriptedEngine:
    """A generation engine double: answers by a rule, bills one token per word. Unit tests only.

    ``reply(request) -> str`` decides each output; by default a regex request gets "1, 2", a choice
    request its first choice, anything else "a short answer". A scored request (``continuation``)
    gets per-word log-probabilities from ``likelihood``: by default 0 for a word the prompt holds, -5
    for one it does not.
    """

    max_model_len = 2048
    supports_regex = True

    def __init__(self, reply=None, likelihood=None) -> None:
        self.reply = reply or self.default_reply
        self.likelihood = likelihood or self.default_likelihood
        self.batches: list[list] = []

    @staticmethod
    def default_likelihood(prompt: str, continuation: str) -> list[float]:
        seen = set(re.findall(r"\w+", prompt.lower()))
        return [0.0 if w in seen else -5.0 for w in re.findall(r"\w+", continuation.lower())] or [-5.0]

    @staticmethod
    def default_reply(request) -> str:
        if request.regex is not None:
            return "1, 2"
        if request.choice is not None:
            return request.choice[0]
        return "a short answer"

    def generate(self, requests):
        from core.generation import GenerationResult

        self.batches.append(list(requests))
        out = []
        for r in requests:
            prompt = " ".join(m.content for m in r.messages) if r.messages else r.prompt
            if r.continuation is not None:
                logprobs = tuple(self.likelihood(prompt, r.continuation))
                out.append(GenerationResult("", len(prompt.split()) + len(logprobs), 0, "stop",
                                            continuation_logprobs=logprobs))
                continue
            text = self.reply(r)
            out.append(GenerationResult(text, len(prompt.split()), len(text.split()) + 1, "stop"))
        return out

    def close(self) -> None:
        pass
