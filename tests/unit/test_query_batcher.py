"""The ingress's query batcher: a lone query runs at once; queries that queue behind a batch share the next one."""

from __future__ import annotations

import asyncio
import threading

import numpy as np
import pytest

from serve.query_batcher import QueryBatcher


class GatedEncoder:
    """Rows = [len(text)] per text; each call waits for the test to open its gate."""

    def __init__(self) -> None:
        self.calls: list[list[str]] = []
        self.gate = threading.Event()

    def __call__(self, texts: list[str], *, is_query: bool) -> np.ndarray:
        assert is_query
        self.calls.append(list(texts))
        self.gate.wait(5)
        if any(t == "boom" for t in texts):
            raise ValueError("bad text")
        return np.array([[float(len(t))] for t in texts], dtype=np.float32)


async def _settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0.005)


def test_lone_query_does_not_wait_and_queued_queries_share_one_call() -> None:
    async def scenario() -> None:
        encoder = GatedEncoder()
        batcher = QueryBatcher(encoder, max_batch=8)
        first = asyncio.create_task(batcher.embed(["a"]))
        await _settle()
        assert encoder.calls == [["a"]]  # ran at once, alone
        rest = [asyncio.create_task(batcher.embed(["b" * n])) for n in range(2, 6)]
        await _settle()
        encoder.gate.set()
        out = await asyncio.gather(first, *rest)
        assert encoder.calls == [["a"], ["bb", "bbb", "bbbb", "bbbbb"]]
        assert [float(v[0, 0]) for v in out] == [1.0, 2.0, 3.0, 4.0, 5.0]  # each caller gets its own rows
        assert batcher.batches == 2

    asyncio.run(scenario())


def test_batches_respect_max_batch_and_multi_text_calls() -> None:
    async def scenario() -> None:
        encoder = GatedEncoder()
        batcher = QueryBatcher(encoder, max_batch=3)
        blocker = asyncio.create_task(batcher.embed(["x"]))
        await _settle()
        calls = [asyncio.create_task(batcher.embed(texts)) for texts in (["p", "q"], ["r", "s"], ["t"])]
        await _settle()
        encoder.gate.set()
        out = await asyncio.gather(blocker, *calls)
        assert encoder.calls == [["x"], ["p", "q"], ["r", "s", "t"]]
        assert [v.shape for v in out] == [(1, 1), (2, 1), (2, 1), (1, 1)]

    asyncio.run(scenario())


def test_an_error_reaches_only_its_batch_and_the_batcher_recovers() -> None:
    async def scenario() -> None:
        encoder = GatedEncoder()
        encoder.gate.set()
        batcher = QueryBatcher(encoder)
        with pytest.raises(ValueError, match="bad text"):
            await batcher.embed(["boom"])
        assert float((await batcher.embed(["ok"]))[0, 0]) == 2.0

    asyncio.run(scenario())


def test_cancelled_callers_are_skipped() -> None:
    async def scenario() -> None:
        encoder = GatedEncoder()
        batcher = QueryBatcher(encoder)
        blocker = asyncio.create_task(batcher.embed(["x"]))
        await _settle()
        gone = asyncio.create_task(batcher.embed(["gone"]))
        kept = asyncio.create_task(batcher.embed(["kept"]))
        await _settle()
        gone.cancel()
        encoder.gate.set()
        await blocker
        assert float((await kept)[0, 0]) == 4.0
        assert encoder.calls == [["x"], ["kept"]]

    asyncio.run(scenario())


def test_max_batch_must_be_positive() -> None:
    with pytest.raises(ValueError, match="max_batch"):
        QueryBatcher(GatedEncoder(), max_batch=0)
