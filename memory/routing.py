"""The episodic router (E-mem): which segments' assistants a question activates.

Three orthogonal paths score every segment:

- ``global`` (P_global): cosine(question, segment summary); segments without a summary have
  no score on this path;
- ``vec`` (P_vec): cosine(question, raw chunks) — chunks are the rendered turn lines or
  ≤ ``chunk_chars`` pieces of the segment text (:func:`chunk_text`, as E-mem's code cuts them);
- ``kw`` (P_kw): raw BM25 of the question over each segment's raw text (exact names, ids, dates).

Three ways to combine them (``RouterConfig.mode``):

- ``union`` (the paper's text): each path activates its top ``k_<path>`` segments (``kw`` only
  those with a BM25 score > 0); any segment hit by any path is active. Order: combined score.
- ``fusion`` (E-mem's code): per segment, min-max normalised (a) summary cosine, (b) mean cosine
  of its chunks among the global top ``top_chunks``, (c) BM25; combined
  ``0.3a + 0.4b + 0.3c``; segments with normalised BM25 ≥ ``bm25_boost`` first, then the best
  combined scores (> 0), at most ``max_segments``.
- ``lines``: every line (``chunking: turn``) is scored by ``vec_weight`` x its min-max normalised cosine plus
  ``kw_weight`` x its min-max normalised BM25 over the lines; the best lines, each with ``line_window``
  neighbours on either side (stream order, each turn once), are routed until ``line_budget`` tokens; a segment
  is activated with its routed lines only (``Activation.lines``), best line first. On LoCoMo this covers more of a
  question's evidence than 5 whole segments of the same tokens (docs/results/2026-12-06-episodic.md).

In union and fusion the newest segment can always be included (``include_newest``; in lines mode it competes
line by line). The combined score
of an activation is the fusion formula over the mode's own path scores (in union, the vec score
is the best chunk's cosine rather than a top-chunk mean). The router never embeds: the caller passes the
vectors of the chunks (:meth:`EpisodicRouter.chunks_of`), summaries and questions; scoring is numpy over all
segments and chunks at once (the pieces: ``memory/route_scoring.py``, lines mode's index: ``memory/line_index.py``).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from core.config import RouterConfig
from memory.bm25 import BM25Factory, SparseBM25Index, bm25_index
from memory.line_index import LineIndex
from memory.route_scoring import chunk_text, minmax, top_chunk_means, top_k
from memory.segmenter import Segment

__all__ = ["PATHS", "Activation", "EpisodicRouter", "chunk_text"]

PATHS = ("global", "vec", "kw")


@dataclass(frozen=True, slots=True)
class Activation:
    """One activated segment.

    ``paths``: the paths that activated it (empty when only ``include_newest`` did);
    ``scores``: raw per-path scores (cosine for global/vec, BM25 for kw; no ``global`` key
    without a summary); ``score``: the combined score; ``newest``: it is the newest segment;
    ``line_scores``: cosine(question, each line) in line order when chunks are lines (``chunking:
    turn``), empty otherwise — the assistants' shortlist starts from them; ``lines``: in ``lines`` mode the
    indices of the segment's routed lines (ascending), empty when the whole segment is routed.
    """

    segment_id: int
    score: float
    paths: frozenset[str]
    scores: dict[str, float] = field(default_factory=dict)
    newest: bool = False
    line_scores: tuple[float, ...] = ()
    lines: tuple[int, ...] = ()


class EpisodicRouter:
    """Indexes segments on three paths and routes questions to them. No Ray, no model inside: every vector
    (``dim`` wide) comes in with the call that needs it."""

    _lines: LineIndex | None = None  # NOTE: a class default, so that snapshots from before lines mode still load

    def __init__(
        self,
        dim: int,
        config: RouterConfig | None = None,
        bm25_factory: BM25Factory = SparseBM25Index,
    ) -> None:
        self.config = config or RouterConfig()
        c = self.config
        self._bm25 = bm25_index(c, bm25_factory)
        self._ids: list[int] = []
        self._row: dict[int, int] = {}
        self._summary_vecs = np.zeros((0, dim), dtype=np.float32)
        self._has_summary = np.zeros(0, dtype=bool)
        self._chunk_vecs = np.zeros((0, dim), dtype=np.float32)
        self._chunk_owner = np.zeros(0, dtype=np.int64)
        self._chunk_starts = np.zeros(0, dtype=np.int64)  # first chunk row of each segment
        self._lines = LineIndex(c, bm25_factory) if c.mode == "lines" else None

    # -- indexing --------------------------------------------------------------------
    @property
    def dim(self) -> int:
        """Width of every vector the router takes."""
        return int(self._summary_vecs.shape[1])

    def __len__(self) -> int:
        return len(self._ids)

    @property
    def segment_ids(self) -> list[int]:
        """Segment ids in the order they were added (the last one is the newest)."""
        return list(self._ids)

    def chunks_of(self, segment: Segment) -> list[str]:
        """P_vec chunks of a segment, as configured (never empty)."""
        if self.config.chunking == "turn":
            chunks = [line for line in segment.lines if line]
        else:
            chunks = chunk_text(segment.text, self.config.chunk_chars)
        return chunks or [segment.text]

    def add(self, segments: Iterable[Segment], chunk_vectors: np.ndarray,
            summary_vectors: np.ndarray | None = None) -> None:
        """Index new segments (oldest first): chunks, summary and raw text. Ids must be new.

        ``chunk_vectors``: one row per chunk of :meth:`chunks_of`, segment after segment; ``summary_vectors``: one
        row per segment that has a summary, in order (None when none has)."""
        segments = list(segments)
        if not segments:
            return
        seen = set(self._row)
        for seg in segments:
            if seg.id in seen:
                raise ValueError(f"segment {seg.id} is already indexed")
            seen.add(seg.id)
        first_row = len(self._ids)
        chunk_lists = [self.chunks_of(s) for s in segments]
        flat = [c for chunks in chunk_lists for c in chunks]
        chunk_vecs = np.asarray(chunk_vectors)
        if chunk_vecs.shape != (len(flat), self.dim):
            raise ValueError(f"{len(flat)} chunks of dim {self.dim} need as many vectors, got {chunk_vecs.shape}")
        sizes = np.array([len(chunks) for chunks in chunk_lists], dtype=np.int64)
        starts = len(self._chunk_owner) + np.concatenate([[0], np.cumsum(sizes)[:-1]])
        owners = np.repeat(np.arange(first_row, first_row + len(segments)), sizes)

        summaries = np.zeros((len(segments), self.dim), dtype=np.float32)
        has = np.array([bool(s.summary) for s in segments])
        if has.any():
            if summary_vectors is None:
                raise ValueError(f"{int(has.sum())} segment(s) have a summary but no summary vector was passed")
            summaries[has] = summary_vectors

        # NOTE: every path grows before the ids do, so a bad vector argument leaves the router as it was.
        self._bm25.add([s.text for s in segments])
        if self._lines is not None:
            self._lines.add(segments, chunk_lists)
        self._chunk_vecs = np.vstack([self._chunk_vecs, chunk_vecs.astype(np.float32, copy=False)])
        self._chunk_owner = np.concatenate([self._chunk_owner, owners])
        self._chunk_starts = np.concatenate([self._chunk_starts, starts])
        self._summary_vecs = np.vstack([self._summary_vecs, summaries])
        self._has_summary = np.concatenate([self._has_summary, has])
        for offset, seg in enumerate(segments):
            self._row[seg.id] = first_row + offset
            self._ids.append(seg.id)

    def set_summary(self, segment_id: int, summary: str, vector: np.ndarray | None) -> None:
        """Attach (or replace) a segment's summary, with its ``vector``, once its assistant has written it; an empty
        summary removes it (``vector`` unread)."""
        row = self._row[segment_id]
        if summary:
            if vector is None:
                raise ValueError("a summary needs its vector")
            self._summary_vecs[row] = vector
        else:
            self._summary_vecs[row] = 0.0
        self._has_summary[row] = bool(summary)

    def shrink(self, segment_id: int, keep: Sequence[bool], text: str) -> None:
        """A segment lost lines (a deleted memory): keep only its chunks marked in ``keep`` (one flag per chunk,
        in order) and re-index its raw text as ``text``; with no chunk left the segment leaves the router.
        Nothing of what was dropped stays in any path's index."""
        row = self._row[segment_id]
        start, stop = self._chunk_span(row)
        keep = np.asarray(keep, dtype=bool)
        if len(keep) != stop - start:
            raise ValueError(f"segment {segment_id} has {stop - start} chunks, got {len(keep)} flags")
        gone = start + np.flatnonzero(~keep)
        drop_segment = not keep.any()
        self._chunk_vecs = np.delete(self._chunk_vecs, gone, axis=0)
        owners = np.delete(self._chunk_owner, gone)
        starts = self._chunk_starts.copy()
        starts[row + 1 :] -= len(gone)
        self._bm25.replace(row, None if drop_segment else text)
        if self._lines is not None:
            self._lines.drop(gone)
        if drop_segment:
            owners[owners > row] -= 1
            starts = np.delete(starts, row)
            self._summary_vecs = np.delete(self._summary_vecs, row, axis=0)
            self._has_summary = np.delete(self._has_summary, row)
            del self._ids[row]
            self._row = {sid: r for r, sid in enumerate(self._ids)}
        self._chunk_owner, self._chunk_starts = owners, starts

    def vectors_of(self, segment_id: int) -> tuple[np.ndarray, np.ndarray | None]:
        """The P_vec chunk vectors of a segment (one per line with ``chunking: turn``) and its summary's."""
        row = self._row[segment_id]
        start, stop = self._chunk_span(row)
        summary = self._summary_vecs[row].copy() if self._has_summary[row] else None
        return self._chunk_vecs[start:stop].copy(), summary

    # -- routing ---------------------------------------------------------------------
    def term_idf(self, question: str) -> dict[str, float]:
        """The question's terms' idf over the indexed segments (the ``kw`` path's), the same on every core that
        reads them: the assistants' term match weighs words by it."""
        return self._bm25.term_idf(question)

    def route(self, question: str, vector: np.ndarray, eligible: Collection[int] | None = None) -> list[Activation]:
        """The segments to activate for one question (``vector``: its query embedding), best first (the newest may
        come last); with ``eligible`` (segment ids) among those only (a scoped read: ``memory.scope``)."""
        return self.route_batch([question], np.asarray(vector)[None], eligible)[0]

    def route_batch(self, questions: Sequence[str], vectors: np.ndarray,
                    eligible: Collection[int] | None = None) -> list[list[Activation]]:
        """:meth:`route` for many questions (``vectors``: one query embedding per question)."""
        if not questions:
            return []
        q = np.asarray(vectors)
        if q.shape != (len(questions), self.dim):
            raise ValueError(f"{len(questions)} questions of dim {self.dim} need as many vectors, got {q.shape}")
        ok = None if eligible is None else np.isin(np.asarray(self._ids, dtype=np.int64),
                                                   np.fromiter(eligible, dtype=np.int64))
        if not self._ids or (ok is not None and not ok.any()):
            return [[] for _ in questions]
        chunk_sims = q @ self._chunk_vecs.T  # (nq, m)
        if self.config.mode == "lines":  # NOTE: lines mode reads neither summaries nor the segments' BM25
            routed = [self._by_lines(text, chunk_sims[i], ok) for i, text in enumerate(questions)]
            return self._with_line_scores(routed, chunk_sims)
        glob = q @ self._summary_vecs.T  # (nq, n); meaningless where there is no summary
        kw = np.vstack([self._bm25.scores(text) for text in questions])
        if self.config.mode == "union":
            vec = np.maximum.reduceat(chunk_sims, self._chunk_starts, axis=1)
            routed = [self._union(glob[i], vec[i], kw[i], ok) for i in range(len(questions))]
        else:
            vec, in_top = top_chunk_means(chunk_sims, self._chunk_owner, len(self._ids), self.config.top_chunks)
            routed = [self._fusion(glob[i], vec[i], in_top[i], kw[i], ok) for i in range(len(questions))]
        return self._with_line_scores(routed, chunk_sims)

    def _with_line_scores(self, routed: list[list[Activation]], chunk_sims: np.ndarray) -> list[list[Activation]]:
        """Each activation with its lines' cosines (``line_scores``) when chunks are lines."""
        if self.config.chunking != "turn":
            return routed
        spans = {a.segment_id: slice(*self._chunk_span(self._row[a.segment_id])) for acts in routed for a in acts}
        return [[replace(a, line_scores=tuple(chunk_sims[i, spans[a.segment_id]].tolist())) for a in acts]
                for i, acts in enumerate(routed)]

    def _chunk_span(self, row: int) -> tuple[int, int]:
        """First and past-the-last chunk rows of the segment at ``row``."""
        start = int(self._chunk_starts[row])
        return start, int(self._chunk_starts[row + 1]) if row + 1 < len(self._ids) else len(self._chunk_owner)

    def _combined(self, glob: np.ndarray, vec: np.ndarray, kw: np.ndarray) -> tuple[np.ndarray, ...]:
        c = self.config
        a = minmax(glob[None], self._has_summary)[0]
        b = minmax(vec[None])[0]
        k = minmax(kw[None])[0]
        return c.global_weight * a + c.vec_weight * b + c.kw_weight * k, a, b, k

    def _union(self, glob: np.ndarray, vec: np.ndarray, kw: np.ndarray, ok: np.ndarray | None) -> list[Activation]:
        c = self.config
        combined, *_ = self._combined(glob, vec, kw)
        hits: dict[int, set[str]] = {}
        for path, scores, k, eligible in (
            ("global", glob, c.k_global, self._has_summary),
            ("vec", vec, c.k_vec, None),
            ("kw", kw, c.k_kw, kw > 0),
        ):
            if ok is not None:
                eligible = ok if eligible is None else eligible & ok
            for row in top_k(scores, k, eligible):
                hits.setdefault(int(row), set()).add(path)
        rows = sorted(hits, key=lambda r: (-combined[r], r))
        return self._activations(rows, hits, combined, glob, vec, kw, ok=ok)

    def _fusion(
        self, glob: np.ndarray, vec: np.ndarray, in_top: np.ndarray, kw: np.ndarray, ok: np.ndarray | None
    ) -> list[Activation]:
        c = self.config
        combined, a, _, k = self._combined(glob, vec, kw)
        if ok is not None:
            combined = np.where(ok, combined, -np.inf)
        order: list[int] = []
        if c.bm25_boost is not None:
            boosted = np.flatnonzero((k >= c.bm25_boost) if ok is None else (k >= c.bm25_boost) & ok)
            order.extend(int(r) for r in boosted[np.argsort(-k[boosted], kind="stable")])
        for r in np.argsort(-combined, kind="stable"):
            if combined[r] <= 0:
                break
            order.append(int(r))
        rows = list(dict.fromkeys(order))[: c.max_segments]
        # A path "activated" a segment when it lifted its combined score: a normalised score above the
        # minimum (global, kw), or a chunk among the top chunks (vec).
        hits = {r: {"vec"} if in_top[r] else set() for r in rows}
        for r in rows:
            hits[r].update(p for p, s in (("global", a[r]), ("kw", k[r])) if s > 0)
        return self._activations(rows, hits, combined, glob, vec, kw, cap=c.max_segments, ok=ok)

    def _by_lines(self, question: str, sims: np.ndarray, ok: np.ndarray | None) -> list[Activation]:
        """``lines`` mode for one question: the routed lines grouped by segment, the segment of the best line
        first. The newest closed segment competes line by line like the others (``include_newest`` still has
        the read path read the open segment)."""
        c, index = self.config, self._lines
        if index is None or len(index.turns) != len(sims):
            raise RuntimeError("router: lines mode needs its line index (built when the router was made in lines mode)")
        kw = index.bm25.scores(question)
        valid = None if ok is None else ok[self._chunk_owner]
        vec_n, kw_n = minmax(sims[None], valid)[0], minmax(kw[None], valid)[0]
        score = c.vec_weight * vec_n + c.kw_weight * kw_n
        if valid is not None:
            score = np.where(valid, score, -np.inf)
        rows = index.pick(score, c.line_window, c.line_budget)
        by_segment: dict[int, list[int]] = {}
        for r in sorted(rows, key=lambda r: (-score[r], r)):
            by_segment.setdefault(int(self._chunk_owner[r]), []).append(r)
        newest = len(self._ids) - 1
        out = []
        for seg_row, picked in by_segment.items():
            start = int(self._chunk_starts[seg_row])
            paths = frozenset(p for p, x in (("vec", vec_n), ("kw", kw_n)) if float(x[picked].max()) > 0)
            out.append(Activation(self._ids[seg_row], float(score[picked[0]]), paths,
                                  {"vec": float(sims[picked].max()), "kw": float(kw[picked].max())},
                                  newest=seg_row == newest, lines=tuple(sorted(r - start for r in picked))))
        return out

    def _activations(
        self,
        rows: list[int],
        hits: dict[int, set[str]],
        combined: np.ndarray,
        glob: np.ndarray,
        vec: np.ndarray,
        kw: np.ndarray,
        cap: int | None = None,
        ok: np.ndarray | None = None,
    ) -> list[Activation]:
        newest = len(self._ids) - 1
        if self.config.include_newest and newest not in hits and (ok is None or ok[newest]):
            if cap is not None and not self.config.newest_extra and len(rows) >= cap:
                rows = rows[: cap - 1]
            rows = [*rows, newest]
        out = []
        for r in rows:
            scores = {"vec": float(vec[r]), "kw": float(kw[r])}
            if self._has_summary[r]:
                scores["global"] = float(glob[r])
            paths = frozenset(hits.get(r, ()))
            out.append(Activation(self._ids[r], float(combined[r]), paths, scores, newest=r == newest))
        return out

