"""The LoCoMo systems: engram as the service runs it, and the baselines it is measured against.

- ``engram``: the service's own pipelines in one process (:class:`InProcessService`): the write path
  (``actors/write_path.py``) fed the conversation as ``engram ingest locomo`` posts it (per session, batches of
  ``DEFAULT_BATCH`` turns), the summariser (``actors/summariser.py``) drained before the first question, and the
  read path (``actors/read_path.py``) that ``POST /v1/ask`` answers through: route -> assistants -> master.
  Admission is store-all, as in every benchmark of episodic memory.
- ``direct_read``: the same ingest and routing; the master reads the routed segments' raw lines itself (no
  assistants), cut to the model's window (best-routed segments first, the open segment last);
- ``rag``: the top ``rag_top_k`` turns by dense + BM25 (min-max normalised, equal weights);
- ``full_context``: the conversation's most recent turns that fit the model's window.

All four answer with the same master prompts (``actors/master.py``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from actors.episodic_router import Encoder, bm25_index
from actors.master import Master, MasterAnswer, token_counter
from actors.read_path import ReadPath
from actors.segmenter import Segment, render_turn
from actors.shards import LocalShards
from actors.summariser import Summariser
from actors.time_expressions import anchor_of
from actors.write_path import WritePath, turn_records
from cluster.cli_ingest import DEFAULT_BATCH, locomo_batches
from core.config import ROLES, EngramConfig, Role
from core.evidence import Evidence, dedupe_evidence
from core.generation import GenerationEngine, TokenBill

SYSTEMS = ("engram", "rag", "full_context", "direct_read")
TENANT = "locomo"
Engines = GenerationEngine | Mapping[Role, GenerationEngine]


@dataclass
class Answer:
    text: str
    evidence_turn_ids: list[str]
    routed_turn_ids: list[str]
    segments: int
    assistant_bill: TokenBill = field(default_factory=TokenBill)
    master_bill: TokenBill = field(default_factory=TokenBill)
    offered: list[tuple[str, float]] = field(default_factory=list)  # (turn id, score) the assistants offered


def turn_evidence(turn: Any, segment_id: int = -1, ground_dates: bool = False) -> Evidence:
    """A LoCoMo turn as an evidence line; with ``ground_dates`` its relative dates grounded, as engram's write path
    stores it (``episodic.ground_dates``)."""
    line = render_turn(turn, anchor_of(turn.timestamp) if ground_dates else None)
    return Evidence(turn.turn_id, line, turn.timestamp, segment_id)


def _answer(res: MasterAnswer, routed: list[str], segments: int, assistant_bill: TokenBill | None = None,
            offered: list[tuple[str, float]] | None = None) -> Answer:
    return Answer(res.text, [e.turn_id for e in res.evidence], routed, segments, assistant_bill or TokenBill(),
                  res.bill, offered or [])


def per_role(engine: Engines) -> dict[Role, GenerationEngine]:
    """One engine for every role, or the engine of each role as given."""
    return dict(engine) if isinstance(engine, Mapping) else dict.fromkeys(ROLES, engine)


class InProcessService:
    """The service's write path, summariser and read path over the configured topology's cores, in process, for
    one tenant. ``engine``: one for all roles or one per role; ``counters``: token counts per role (default: each
    engine's tokenizer, as the service counts with its pool model's)."""

    name = "engram"
    ingest_key = "service-write-path"  # NOTE: systems with the same key ingest alike and may share one ingest

    def __init__(self, config: EngramConfig, *, encoder: Encoder, engine: Engines,
                 counters: Mapping[Role, Callable[[str], int]] | None = None, batch: int = DEFAULT_BATCH,
                 tenant: str = TENANT) -> None:
        self.config, self.encoder, self.batch, self.tenant = config, encoder, batch, tenant
        engines = per_role(engine)
        count = {r: (counters or {}).get(r) or token_counter(engines[r]) for r in ROLES}
        # NOTE: segments are sized in the assistants' tokens, the master's prompt in the master's (as in the service)
        self.shards = LocalShards(config, dim=encoder.dim, engines=engines, count_tokens=count["assistant"])
        self.master = Master(engines["master"], config.episodic, count["master"])
        # NOTE: store-all admission (classify=None): the benchmark measures episodic memory, not admission
        self.writes = WritePath(config, self.shards, self._embed, None)
        self.summariser = Summariser(config.cluster, self.shards, self._embed)
        self.reads = ReadPath(self.shards, self._master, lines_per_segment=config.episodic.lines_per_segment)

    async def _embed(self, texts: list[str]) -> np.ndarray:
        return self.encoder.encode(texts)

    async def _master(self, question: str, evidence: Sequence[Evidence], category: int | None,
                      adversarial: str | None) -> MasterAnswer:
        # NOTE: in a worker thread, as the shards' calls: the engine may be a Serve handle (blocking result())
        return await asyncio.to_thread(self.master.answer, question, evidence, category, adversarial)

    def ingest(self, turns: Sequence[Any]) -> None:
        asyncio.run(self._ingest(turns))

    async def _ingest(self, turns: Sequence[Any]) -> None:
        for tenant, session, chunk in locomo_batches(turns, self.tenant, self.batch):
            report = await self.writes.add_turns(tenant, turn_records(chunk, chunk[0].timestamp,
                                                                      self.config.episodic.ground_dates),
                                                 session_id=session)
            if self.config.cluster.summaries:
                self.summariser.add(tenant, report.closed)
        await self.summariser.drain()

    def share_ingest(self, other: InProcessService) -> None:
        """Read what ``other`` (same ``ingest_key``, same config) has ingested instead of ingesting again:
        questions write nothing, so its state is what this system's own ingest would build."""
        self.shards, self.writes = other.shards, other.writes
        self.summariser, self.reads = other.summariser, other.reads

    def ask(self, question: str, *, category: int | None, adversarial: str | None = None) -> Answer:
        q = self.encoder.encode([question], is_query=True)[0]
        result = asyncio.run(self.reads.ask(self.tenant, question, q, category=category, adversarial=adversarial))
        return _answer(result.answer, result.routed_turn_ids, result.segments, result.assistant_bill,
                       [(e.turn_id, e.score) for e in result.offered])


class DirectRead(InProcessService):
    """engram's ingest and routing; the master reads the routed segments' lines itself (no assistants)."""

    name = "direct_read"

    def ask(self, question: str, *, category: int | None, adversarial: str | None = None) -> Answer:
        q = self.encoder.encode([question], is_query=True)[0]
        route = asyncio.run(self.reads.route(self.tenant, question, q))
        held = {seg.id: seg for core in self.shards.cores["assistants"] for seg in core.segments(self.tenant)}
        segments: list[Segment] = [held[a.segment_id] for a in route.activations if a.segment_id in held]
        if route.open_segment is not None:
            segments.append(route.open_segment)
        lines = [Evidence(t, line, ts, seg.id) for seg in segments
                 for t, line, ts in zip(seg.turn_ids, seg.lines, seg.timestamps, strict=True)]
        res = self.master.respond(question, self.master.fit(dedupe_evidence(lines), question), category, adversarial)
        routed = list(dict.fromkeys(t for seg in segments for t in seg.turn_ids))
        return _answer(res, routed, len(segments))


class RagBaseline:
    """Plain RAG over single turns: dense cosine + BM25, min-max normalised, equal weights."""

    name = "rag"

    def __init__(self, config: EngramConfig, *, encoder: Encoder, engine: Engines) -> None:
        self.config, self.encoder = config, encoder
        self.master = Master(per_role(engine)["master"], config.episodic)

    def ingest(self, turns: Sequence[Any]) -> None:
        self.turns = list(turns)
        lines = [render_turn(t) for t in self.turns]
        self.vectors = self.encoder.encode(lines)
        self.bm25 = bm25_index(self.config.router)  # same BM25 settings as the router's keyword path
        self.bm25.add(lines)

    def rank(self, question: str) -> np.ndarray:
        """Indices of the ingested turns, best first (dense + BM25, min-max normalised, equal weights)."""
        q = self.encoder.encode([question], is_query=True)[0]
        score = _minmax(self.vectors @ q) + _minmax(self.bm25.scores(question))
        return np.argsort(-score, kind="stable")

    def ask(self, question: str, *, category: int | None, adversarial: str | None = None) -> Answer:
        top = self.rank(question)[: self.config.episodic.rag_top_k]
        evidence = self.master.fit([turn_evidence(self.turns[i]) for i in top], question)
        return _answer(self.master.respond(question, evidence, category, adversarial),
                       [e.turn_id for e in evidence], 0)


class FullContextBaseline:
    """The whole conversation, cut to the model's window: the most recent turns that fit."""

    name = "full_context"

    def __init__(self, config: EngramConfig, *, encoder: Encoder, engine: Engines) -> None:
        self.master = Master(per_role(engine)["master"], config.episodic)

    def ingest(self, turns: Sequence[Any]) -> None:
        self.turns = list(turns)

    def ask(self, question: str, *, category: int | None, adversarial: str | None = None) -> Answer:
        evidence = self.master.fit([turn_evidence(t) for t in reversed(self.turns)], question)
        return _answer(self.master.respond(question, evidence, category, adversarial),
                       [e.turn_id for e in evidence], 0)


def _minmax(x: np.ndarray) -> np.ndarray:
    span = float(x.max() - x.min()) if len(x) else 0.0
    return (x - x.min()) / span if span > 0 else np.zeros_like(x, dtype=np.float64)


def build_system(name: str, config: EngramConfig, *, encoder: Encoder, engine: Engines) -> Any:
    """A fresh system for one conversation (``engine``: one for all roles, or one per role)."""
    if name == "engram":
        return InProcessService(config, encoder=encoder, engine=engine)
    if name == "direct_read":
        return DirectRead(config, encoder=encoder, engine=engine)
    if name == "rag":
        return RagBaseline(config, encoder=encoder, engine=engine)
    if name == "full_context":
        return FullContextBaseline(config, encoder=encoder, engine=engine)
    raise ValueError(f"unknown system {name!r}; known: {', '.join(SYSTEMS)}")
