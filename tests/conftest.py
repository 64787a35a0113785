"""Fixtures shared by every test folder."""

import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
# Every Ray process of a test run must agree on the auth mode (throwaway local clusters: off).
os.environ.setdefault("RAY_AUTH_MODE", "disabled")


@pytest.fixture(scope="session")
def minilm():
    """The real all-MiniLM-L6-v2 embedder from its PyPI package, loaded once per test session."""
    from core.config import EmbedderConfig
    from serve.embedder import Embedder

    return Embedder(EmbedderConfig())
