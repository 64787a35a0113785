"""The episodic router's plain scoring pieces: chunking a segment's text for P_vec, min-max normalisation,
top-k rows, and the per-segment mean cosine of the top chunks (fusion's P_vec). Numpy only, no state."""

from __future__ import annotations

import re

import numpy as np

__all__ = ["chunk_text", "minmax", "top_chunk_means", "top_k"]

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


def chunk_text(text: str, max_chars: int) -> list[str]:
    """Pack sentences (split after ``.!?`` + whitespace) greedily into pieces of ≤ ``max_chars``.

    As E-mem's ``chunk_text``: a sentence longer than ``max_chars`` is packed word by word, and a
    single longer word stays whole; unlike it, the joining space counts towards the limit.
    ``chunk_text("One. Two! Three?", 9) == ["One. Two!", "Three?"]``
    """
    if len(text) <= max_chars:
        return [text]
    chunks: list[str] = []
    current = ""

    def push(piece: str) -> None:
        nonlocal current
        if current and len(current) + 1 + len(piece) <= max_chars:
            current += " " + piece
            return
        if current:
            chunks.append(current)
        current = piece

    for sentence in _SENTENCE_END.split(text):
        if len(sentence) <= max_chars:
            push(sentence)
        else:
            for word in sentence.split():
                push(word)
    if current:
        chunks.append(current)
    return chunks


def minmax(x: np.ndarray, valid: np.ndarray | None = None) -> np.ndarray:
    """Row-wise min-max to [0, 1] over ``valid`` entries; flat rows and invalid entries -> 0."""
    if x.shape[1] == 0:
        return x
    if valid is None:
        valid = np.ones(x.shape[1], dtype=bool)
    lo = np.where(valid, x, np.inf).min(axis=1, keepdims=True)
    hi = np.where(valid, x, -np.inf).max(axis=1, keepdims=True)
    span = hi - lo
    ok = np.isfinite(span) & (span > 1e-10)
    out = np.where(ok, (x - np.where(ok, lo, 0)) / np.where(ok, span, 1), 0.0)
    return np.where(valid, out, 0.0)


def top_k(scores: np.ndarray, k: int, eligible: np.ndarray | None) -> np.ndarray:
    """Rows of the ``k`` highest ``scores`` among ``eligible`` (ties: lower row first)."""
    rows = np.arange(len(scores)) if eligible is None else np.flatnonzero(eligible)
    if k <= 0 or len(rows) == 0:
        return rows[:0]
    return rows[np.argsort(-scores[rows], kind="stable")[:k]]


def top_chunk_means(sims: np.ndarray, owner: np.ndarray, n: int, top_chunks: int) -> tuple[np.ndarray, np.ndarray]:
    """Per question row and segment (``owner``: each chunk's segment row, of ``n``): the mean cosine of the
    segment's chunks among the row's top ``top_chunks``, and whether any of its chunks is."""
    nq, m = sims.shape
    top = min(top_chunks, m)
    # NOTE: a stable sort, not argpartition: ties (common at cosine 0) must resolve the same way on
    # every call, and a tied chunk that gets in lowers its segment's mean.
    idx = np.argsort(-sims, axis=1, kind="stable")[:, :top]
    keys = (np.arange(nq)[:, None] * n + owner[idx]).ravel()
    sums = np.bincount(keys, weights=np.take_along_axis(sims, idx, axis=1).ravel(), minlength=nq * n)
    counts = np.bincount(keys, minlength=nq * n)
    means = np.divide(sums, counts, out=np.zeros_like(sums), where=counts > 0)
    return means.reshape(nq, n), (counts > 0).reshape(nq, n)
