"""Embed, then call: the benchmarks' (and tests') way to drive the memory classes, which take vectors only.

:class:`~memory.routing.EpisodicRouter` and :class:`~memory.tiered_memory.TieredMemory` never embed; the service
passes the vectors its embedder computed. A caller holding an :class:`~core.encoding.Encoder` embeds here, in
the same calls the classes made when they held the encoder themselves (the chunks of a batch of segments in
one call, then their summaries in one; the questions of a batch in one, ``is_query=True``).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from typing import Any

from core.encoding import Encoder
from memory.routing import Activation, EpisodicRouter
from memory.segmenter import Segment
from memory.tier import ItemId
from memory.tiered_memory import Hit, TieredMemory

__all__ = ["add_segments", "add_texts", "retrieve", "route", "route_batch", "set_summary"]


def add_segments(router: EpisodicRouter, encoder: Encoder, segments: Iterable[Segment]) -> None:
    """Index ``segments`` with their chunks' (:meth:`EpisodicRouter.chunks_of`) and summaries' vectors."""
    segments = list(segments)
    if not segments:
        return
    chunk_vectors = encoder.encode([c for s in segments for c in router.chunks_of(s)])
    summaries = [s.summary for s in segments if s.summary]
    router.add(segments, chunk_vectors, encoder.encode(summaries) if summaries else None)


def route_batch(router: EpisodicRouter, encoder: Encoder, questions: Sequence[str],
                eligible: Collection[int] | None = None) -> list[list[Activation]]:
    """:meth:`EpisodicRouter.route_batch`, the questions embedded in one call."""
    if not questions:
        return []
    return router.route_batch(questions, encoder.encode(list(questions), is_query=True), eligible)


def route(router: EpisodicRouter, encoder: Encoder, question: str,
          eligible: Collection[int] | None = None) -> list[Activation]:
    """:meth:`EpisodicRouter.route` for one question, embedded here."""
    return route_batch(router, encoder, [question], eligible)[0]


def set_summary(router: EpisodicRouter, encoder: Encoder, segment_id: int, summary: str) -> None:
    """:meth:`EpisodicRouter.set_summary` with the summary embedded (an empty one is not)."""
    router.set_summary(segment_id, summary, encoder.encode([summary])[0] if summary else None)


def add_texts(memory: TieredMemory, encoder: Encoder, texts: Sequence[str], **kwargs: Any) -> list[ItemId]:
    """:meth:`TieredMemory.add` with the texts embedded (``kwargs``: its other arguments)."""
    return memory.add(texts, vectors=encoder.encode(texts), **kwargs)


def retrieve(memory: TieredMemory, encoder: Encoder, query: str, k: int | None = None, **kwargs: Any) -> list[Hit]:
    """:meth:`TieredMemory.retrieve` with the query embedded (``kwargs``: ``where``)."""
    return memory.retrieve(query, k, vector=encoder.encode([query], is_query=True)[0], **kwargs)
