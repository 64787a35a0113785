"""The small-model pool: one engine per replica that every assistant actor and the master call.

``LLMPool`` (the deployment's class) gathers the requests of concurrent callers with ``serve.batch`` and
runs them as one engine batch, so many activated assistants on many actors share one forward pass.
``PoolEngine`` is the :class:`~serve.engine.GenerationEngine` that callers hold: it forwards to the pool's
deployment handle (looked up lazily, so the object pickles into actors). ``TokenizerCounter`` counts
tokens with the pool model's tokenizer without loading the model.
"""

from __future__ import annotations

import asyncio
import functools
import os
import threading
from collections.abc import Sequence
from typing import Any

from ray import serve

from core import tracing
from core.config import EngineConfig, EngramConfig, Role
from core.generation import GenerationRequest, GenerationResult
from serve.engine import build_engine

LLM_POOL = "LLMPool"  # the pool of the assistants' model; a pool of another model is "LLMPool-<role>"
_LOAD_LOCK = threading.Lock()


def use_cores(n: int | None) -> None:
    """torch intra-op threads of this replica: ``n``, or every core of the machine when ``n`` is None.

    NOTE: Ray sets OMP_NUM_THREADS=1 in a worker that reserves no CPU, and torch then runs on one core.
    """
    import torch

    torch.set_num_threads(n or os.cpu_count() or 1)


class _Failed:
    """A group's error, carried through ``serve.batch`` and raised to that caller only."""

    def __init__(self, error: Exception) -> None:
        self.error = error


class LLMPool:
    def __init__(self, engine: dict[str, Any]) -> None:
        self.config = EngineConfig.model_validate(engine)
        if self.config.backend == "transformers":
            use_cores(self.config.num_threads)
        self.engine = build_engine(self.config)

    def info(self) -> dict[str, Any]:
        return {"model": self.config.model, "backend": self.config.backend,
                "max_model_len": self.engine.max_model_len,
                "supports_regex": bool(getattr(self.engine, "supports_regex", False))}

    async def generate(self, requests: list[GenerationRequest]) -> list[GenerationResult]:
        out = await self._batched(list(requests))
        if isinstance(out, _Failed):
            raise out.error
        return out

    @serve.batch(max_batch_size=32, batch_wait_timeout_s=0.01)
    async def _batched(self, groups: list[list[GenerationRequest]]) -> list[list[GenerationResult] | _Failed]:
        flat = [r for g in groups for r in g]
        try:
            results = await asyncio.to_thread(self.engine.generate, flat)
        except (ValueError, NotImplementedError):
            # NOTE: the engine refuses a bad request before running anything; run the groups one by one so
            # that only the caller who sent it gets the error.
            return [await self._alone(g) for g in groups]
        out, start = [], 0
        for g in groups:
            out.append(results[start : start + len(g)])
            start += len(g)
        return out

    async def _alone(self, group: list[GenerationRequest]) -> list[GenerationResult] | _Failed:
        try:
            return await asyncio.to_thread(self.engine.generate, group)
        except (ValueError, NotImplementedError) as e:
            return _Failed(e)

    def __del__(self) -> None:
        engine = getattr(self, "engine", None)
        if engine is not None:
            engine.close()


def pools(config: EngramConfig) -> dict[str, tuple[EngineConfig, tuple[Role, ...]]]:
    """One LLM pool per distinct engine (model and ``models.engines`` settings): ``{deployment name: (its engine
    config, the roles it serves)}``.

    The assistants' pool is :data:`LLM_POOL`; another pool is named after the first role (in ``assistant, master,
    summary`` order) it serves, e.g. ``LLMPool-master``."""
    return {(LLM_POOL if roles[0] == "assistant" else f"{LLM_POOL}-{roles[0]}"): (engine, roles)
            for engine, roles in config.engine_groups()}


def pool_name(config: EngramConfig, role: Role) -> str:
    """The deployment that serves ``role``'s model."""
    return next(name for name, (_, roles) in pools(config).items() if role in roles)


class PoolEngine:
    """A ``GenerationEngine`` that runs on the pool deployment (blocking; call it outside an event loop)."""

    def __init__(self, app_name: str, *, max_model_len: int, supports_regex: bool,
                 deployment: str = LLM_POOL) -> None:
        self.app_name, self.deployment = app_name, deployment
        self.max_model_len = max_model_len
        self.supports_regex = supports_regex
        self._handle: Any = None

    @classmethod
    def for_role(cls, config: EngramConfig, role: Role, app_name: str) -> PoolEngine:
        """The pool of ``app_name`` that serves ``role``'s model (vLLM honours regex constraints)."""
        engine = config.engine_for(role)
        return cls(app_name, max_model_len=engine.max_model_len, supports_regex=engine.backend == "vllm",
                   deployment=pool_name(config, role))

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_handle": None}

    def generate(self, requests: Sequence[GenerationRequest]) -> list[GenerationResult]:
        if not requests:
            return []
        if self._handle is None:
            self._handle = serve.get_deployment_handle(self.deployment, app_name=self.app_name)
        with tracing.span("llm.generate", pool=self.deployment, requests=len(requests)) as sp:
            results = self._handle.generate.remote(list(requests)).result()
            tracing.annotate(sp, prompt_tokens=sum(r.prompt_tokens for r in results),
                             completion_tokens=sum(r.completion_tokens for r in results))
            return results

    def close(self) -> None:
        self._handle = None


class TokenizerCounter:
    """Exact token counts with the engine model's tokenizer, loaded on first use (picklable)."""

    def __init__(self, config: EngineConfig) -> None:
        self.model, self.cache_dir = config.model, config.cache_dir
        self._count: Any = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_count": None}

    def __call__(self, text: str) -> int:
        if self._count is None:
            # NOTE: threads (asyncio.to_thread callers) may arrive together; transformers' lazy imports are not
            # safe to race ("cannot import name 'AutoTokenizer'", seen under load).
            with _LOAD_LOCK:
                if self._count is None:
                    self._count = self._load()
        return self._count(text)

    def _load(self) -> Any:
        from transformers import AutoTokenizer

        from core.model_store import resolve_model

        tokenizer = AutoTokenizer.from_pretrained(resolve_model(self.model, self.cache_dir))
        return functools.lru_cache(maxsize=1 << 16)(lambda t: len(tokenizer(t, add_special_tokens=False).input_ids))
