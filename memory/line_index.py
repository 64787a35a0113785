"""The episodic router's ``lines`` mode index: per chunk row (a segment's line), its BM25 document, token
count and turn id, and the pick of the lines routed for one question within a token budget."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from core.config import RouterConfig
from memory.bm25 import BM25Factory, bm25_index
from memory.segmenter import Segment

__all__ = ["LineIndex"]


class LineIndex:
    """``lines`` mode: each chunk row's (line's) BM25 document, token count and turn id, in chunk-row order; a
    turn repeated by a segment's overlap is routed at its first row only."""

    def __init__(self, config: RouterConfig, factory: BM25Factory) -> None:
        self.bm25 = bm25_index(config, factory)
        self.tokens = np.zeros(0, dtype=np.int64)
        self.turns: list[str] = []
        self._stream: np.ndarray | None = None  # first rows of each turn, in row (stream) order

    def add(self, segments: Sequence[Segment], chunk_lists: Sequence[Sequence[str]]) -> None:
        tokens, turns = [], []
        for seg, chunks in zip(segments, chunk_lists, strict=True):
            kept = [(t, n) for line, t, n in zip(seg.lines, seg.turn_ids, seg.token_counts, strict=True) if line]
            if len(kept) != len(chunks):  # a segment without a non-empty line: its text is one chunk
                kept = [(seg.turn_ids[0] if seg.turn_ids else f"segment-{seg.id}", seg.tokens)]
            turns += [t for t, _ in kept]
            tokens += [n for _, n in kept]
        self.bm25.add([c for chunks in chunk_lists for c in chunks])
        self.tokens = np.concatenate([self.tokens, np.asarray(tokens, dtype=np.int64)])
        self.turns += turns
        self._stream = None

    def drop(self, rows: Sequence[int]) -> None:
        for r in sorted(rows, reverse=True):
            self.bm25.replace(int(r), None)
            del self.turns[int(r)]
        self.tokens = np.delete(self.tokens, np.asarray(rows, dtype=np.int64))
        self._stream = None

    @property
    def stream(self) -> np.ndarray:
        if self._stream is None:
            seen: set[str] = set()
            first = []
            for r, t in enumerate(self.turns):
                if t not in seen:
                    seen.add(t)
                    first.append(r)
            self._stream = np.asarray(first, dtype=np.int64)
        return self._stream

    def pick(self, score: np.ndarray, window: int, budget: int) -> list[int]:
        """Rows routed for one question: the best-scored first rows (``score`` > 0; -inf where not eligible),
        each with ``window`` eligible neighbours in stream order, while ``budget`` tokens last."""
        stream = self.stream
        ranked = score[stream]
        order = np.argsort(-ranked, kind="stable").tolist()
        s, rows, tokens = ranked.tolist(), stream.tolist(), self.tokens.tolist()
        chosen: dict[int, None] = {}
        used = 0
        for p in order:
            if not s[p] > 0 or used >= budget:  # NOTE: as fusion, a line with no signal (or not eligible) seeds nothing
                break
            for q in range(max(0, p - window), min(len(rows), p + window + 1)):
                r = rows[q]
                if r not in chosen and s[q] > -math.inf and used + tokens[r] <= budget:
                    chosen[r] = None
                    used += tokens[r]
        return list(chosen)
