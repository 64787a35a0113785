"""engram as the service runs it (:class:`InProcessService`) and ``direct_read``, which shares its ingest and
routing."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from bench.systems.common import TENANT, Answer, ConfigReads, Engines, answer_of, per_role
from cluster.cli_ingest import DEFAULT_BATCH, locomo_batches
from core.config import ROLES, EngramConfig, Role
from core.encoding import Encoder
from core.evidence import Evidence, dedupe_evidence
from inference.master import Master, MasterAnswer, token_counter
from inference.question_kind import QuestionKind
from memory.segmenter import Segment
from pipeline.assembly import build_memory
from pipeline.shards import LocalShards


class InProcessService:
    """The service's write path, summariser and read path over the configured topology's cores, in process, for
    one tenant. ``engine``: one for all roles or one per role; ``counters``: token counts per role (default: each
    engine's tokenizer, as the service counts with its pool model's)."""

    name = "engram"
    config_reads: ConfigReads = None  # the whole tree: the write path, the summariser and the read path read most of it
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
        # NOTE: store-all admission (no classifier): the benchmark measures episodic memory, not admission
        self.memory = build_memory(config, self.shards, embed=self._embed, answer=self._master)

    async def _embed(self, texts: list[str]) -> np.ndarray:
        return self.encoder.encode(texts)

    async def _master(self, question: str, evidence: Sequence[Evidence], kind: QuestionKind | None) -> MasterAnswer:
        # NOTE: in a worker thread, as the shards' calls: the engine may be a Serve handle (blocking result())
        return await asyncio.to_thread(self.master.answer, question, evidence, kind)

    def ingest(self, turns: Sequence[Any]) -> None:
        asyncio.run(self._ingest(turns))

    async def _ingest(self, turns: Sequence[Any]) -> None:
        for tenant, session, chunk in locomo_batches(turns, self.tenant, self.batch):
            report = await self.memory.writes.add_turns(tenant, self.memory.records(chunk, chunk[0].timestamp),
                                                        session_id=session)
            if self.config.cluster.summaries:
                self.memory.summariser.add(tenant, report.closed)
        await self.memory.summariser.drain()

    def share_ingest(self, other: InProcessService) -> None:
        """Read what ``other`` (same ``ingest_key``, same config) has ingested instead of ingesting again:
        questions write nothing, so its state is what this system's own ingest would build."""
        self.shards, self.memory = other.shards, other.memory

    def ask(self, question: str, *, kind: QuestionKind | None = None) -> Answer:
        q = self.encoder.encode([question], is_query=True)[0]
        result = asyncio.run(self.memory.reads.ask(self.tenant, question, q, kind=kind))
        return answer_of(result.answer, result.routed_turn_ids, result.segments, result.assistant_bill,
                       [(e.turn_id, e.score) for e in result.offered])


class DirectRead(InProcessService):
    """engram's ingest and routing; the master reads the routed segments' lines itself (no assistants)."""

    name = "direct_read"

    def ask(self, question: str, *, kind: QuestionKind | None = None) -> Answer:
        q = self.encoder.encode([question], is_query=True)[0]
        route = asyncio.run(self.memory.reads.route(self.tenant, question, q))
        held = {seg.id: seg for core in self.shards.cores["assistants"] for seg in core.segments(self.tenant)}
        segments: list[Segment] = [held[a.segment_id] for a in route.activations if a.segment_id in held]
        if route.open_segment is not None:
            segments.append(route.open_segment)
        lines = [Evidence(t, line, ts, seg.id) for seg in segments
                 for t, line, ts in zip(seg.turn_ids, seg.lines, seg.timestamps, strict=True)]
        res = self.master.respond(question, self.master.fit(dedupe_evidence(lines), question), kind)
        routed = list(dict.fromkeys(t for seg in segments for t in seg.turn_ids))
        return answer_of(res, routed, len(segments))
