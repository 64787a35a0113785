"""The KV caches of the last prompts a transformers engine read, found again by their longest common token prefix.

vLLM keeps a prefix cache of its own; HF ``generate`` forgets every prompt. On a CPU the 1.5B master reads a prompt
slowly (docs/results/2026-12-06-engine.md), and consecutive prompts often share most of their tokens: the worked
example and the instructions of a question kind, or a whole context window when a conversation's questions are asked
over the same lines (the full-context baseline). :class:`PrefixCache` keeps the caches of the last ``entries``
prompts; a new prompt starts from a copy of the cache with the longest common prefix, cut to it, and only its
remaining tokens are read. Greedy answers stay those of a full read up to floating-point summation order.

The class holds no model: ``copy`` copies a cache, a cache's ``get_seq_length()`` counts its positions and
``crop(-n)`` drops its last ``n`` (``transformers.DynamicCache`` has all three).
"""

from __future__ import annotations

import copy as copy_module
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np


def cut(cache: Any, length: int) -> None:
    """Keep the first ``length`` positions of ``cache`` (no-op when it holds no more)."""
    extra = cache.get_seq_length() - length
    if extra > 0:
        cache.crop(-extra)


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the longest common prefix of two token sequences: ``common_prefix([1, 2, 3], [1, 2, 4]) == 2``"""
    n = min(len(a), len(b))
    if n == 0:
        return 0
    differ = np.flatnonzero(np.asarray(a[:n]) != np.asarray(b[:n]))
    return int(differ[0]) if len(differ) else n


class PrefixCache:
    """The caches of the last ``entries`` prompts (least recently used evicted first); :meth:`lookup` hands out a
    copy cut to the longest common prefix of at least ``min_tokens`` tokens, :meth:`store` keeps a cache."""

    def __init__(self, entries: int, min_tokens: int, copy: Callable[[Any], Any] = copy_module.deepcopy) -> None:
        if entries < 0 or min_tokens < 1:
            raise ValueError(f"entries must be >= 0 and min_tokens >= 1, got {entries} and {min_tokens}")
        self.entries, self.min_tokens, self._copy = entries, min_tokens, copy
        self._caches: OrderedDict[tuple[int, ...], Any] = OrderedDict()
        self._lock = threading.Lock()  # NOTE: an engine may serve calls from several threads
        self.hits = self.misses = self.tokens_reused = 0

    def __len__(self) -> int:
        return len(self._caches)

    def lookup(self, ids: Sequence[int]) -> tuple[int, Any | None]:
        """``(k, cache of ids[:k])`` for the stored prompt sharing the longest prefix with ``ids``; ``k`` leaves at
        least one token of ``ids`` to read (the model must read one to predict the next). ``(0, None)`` below
        ``min_tokens``. The cache handed out is a copy: the caller may extend it."""
        with self._lock:
            return self._lookup(ids)

    def _lookup(self, ids: Sequence[int]) -> tuple[int, Any | None]:
        best, key = 0, None
        for stored in self._caches:
            n = common_prefix(stored, ids)
            if n > best:
                best, key = n, stored
        k = min(best, len(ids) - 1)
        if key is None or k < self.min_tokens:
            self.misses += 1
            return 0, None
        self._caches.move_to_end(key)
        cache = self._copy(self._caches[key])
        cut(cache, k)
        self.hits += 1
        self.tokens_reused += k
        return k, cache

    def store(self, ids: Sequence[int], cache: Any) -> None:
        """Keep ``cache`` (taken over, not copied) as the cache of ``ids``, cut to ``len(ids)`` positions (a cache
        that went on to generate holds more)."""
        if self.entries == 0 or len(ids) < self.min_tokens:
            return
        cut(cache, len(ids))
        key = tuple(int(t) for t in ids)
        with self._lock:
            self._caches[key] = cache
            self._caches.move_to_end(key)
            while len(self._caches) > self.entries:
                self._caches.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._caches.clear()
