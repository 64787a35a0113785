"""The read path — route -> extract -> master — as one plain async class over the shards.

``POST /v1/ask`` (``serve/ingress.py``) and the LoCoMo benchmark (``bench/systems/engram.py``) both answer through
:meth:`ReadPath.ask`, so every benchmark number measures what the service runs:

1. **route**: the tenant's router core activates segments for the question (summary / dense / BM25 paths; or,
   in the router's ``lines`` mode, the best lines and their neighbours, each segment with those lines only) and
   hands back a copy of the open (still filling) segment;
2. **extract**: the assistant cores that hold the activated segments re-read them for the question, all in
   parallel (one call per core, its segments in one engine batch); the open segment is read too. Their
   candidate lines are fused here, all together (``inference.assistant.fuse``), with the router's idf: which core
   holds which segment (the user id, the number of cores) never changes an answer;
3. **master**: the assistants' evidence, in routing order, goes to the master (``inference.master.Master``), which
   merges it (best first, each turn once, at most ``episodic.master_evidence`` lines), cuts it to its window,
   orders it by time and answers.

The master step is a callable, so the service can run it on its own deployment and the benchmark in process.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from core.evidence import Evidence
from core.generation import TokenBill
from core.tracing import annotate, span, text
from cores.tenant_episodes import RouteResult
from inference.assistant import SegmentQuery, fuse
from inference.master import MasterAnswer
from inference.question_kind import QuestionKind
from memory.scope import MemoryFilter, Scope
from memory.tiered_memory import Hit
from pipeline.shards import Shards, assistants, router, tier

# (question, evidence in routing order, the question's kind or None to predict it) -> the master's answer
AnswerStep = Callable[[str, Sequence[Evidence], QuestionKind | None], Awaitable[MasterAnswer]]


@dataclass
class AskResult:
    route: RouteResult
    answer: MasterAnswer
    assistant_bill: TokenBill
    offered: list[Evidence] = field(default_factory=list)  # the assistants' evidence, in routing order

    @property
    def routed_turn_ids(self) -> list[str]:
        """Every turn of the activated segments and of the open one, in routing order, each once."""
        ids = [t for a in self.route.activations for t in self.route.segments[a.segment_id][2]]
        if self.route.open_segment is not None:
            ids += list(self.route.open_segment.turn_ids)
        return list(dict.fromkeys(ids))

    @property
    def segments(self) -> int:
        return len(self.route.activations) + int(self.route.open_segment is not None)


class ReadPath:
    """Answers a tenant's questions from its episodic memory; ``lines_per_segment``: most evidence lines of one
    segment (``EpisodicConfig.lines_per_segment``); ``ask_timeout_s`` bounds the assistants' wait."""

    def __init__(self, shards: Shards, master: AnswerStep, *, lines_per_segment: int,
                 ask_timeout_s: float | None = None) -> None:
        self.shards, self.master, self.ask_timeout_s = shards, master, ask_timeout_s
        self.lines_per_segment = lines_per_segment

    async def route(self, tenant: str, question: str, vector: np.ndarray, scope: Scope | None = None) -> RouteResult:
        with span("router.route", core=self.shards.router_index(tenant)) as sp:
            text(sp, question=question)
            route = await router(self.shards, tenant).route(tenant, question, vector, scope)
            annotate(sp, segment_ids=[a.segment_id for a in route.activations],
                     open_segment=None if route.open_segment is None else route.open_segment.id,
                     scoped_turns=None if route.allowed is None else len(route.allowed))
            return route

    async def extract(self, tenant: str, question: str, route: RouteResult) -> tuple[list[Evidence], TokenBill]:
        """The assistants' evidence for the routed segments (in routing order), then the open segment's (a scoped
        or line-routed route's ``allowed`` lines only: the router already cut the open segment to them); every
        core's :meth:`candidates` fused together."""
        groups, bill = await self.candidates(tenant, question, route)
        return [e for group in fuse(groups, self.lines_per_segment) for e in group], bill

    async def candidates(self, tenant: str, question: str,
                         route: RouteResult) -> tuple[list[list[Evidence]], TokenBill]:
        """Before fusion: one group of candidate lines per activated segment, in routing order, then the open
        segment's; each line with its raw ``signals``."""
        groups: dict[int, list[int]] = defaultdict(list)  # assistant core -> ranks of its activations
        for rank, a in enumerate(route.activations):
            groups[self.shards.assistant_index(tenant, a.segment_id)].append(rank)
        wait = self.ask_timeout_s

        async def read(i: int, segment_ids: list[int], call: Awaitable[tuple[Any, TokenBill]]) -> tuple[Any, TokenBill]:
            with span("assistants.extract", core=i, segment_ids=segment_ids) as sp:
                found, bill = await call
                lines = [e for group in found for e in group]
                annotate(sp, evidence_turn_ids=[e.turn_id for e in lines], prompt_tokens=bill.prompt_tokens,
                         completion_tokens=bill.completion_tokens, model_calls=bill.calls)
                return found, bill

        calls = [read(i, [route.activations[r].segment_id for r in ranks], assistants(self.shards, i).candidates(
                     tenant, [SegmentQuery(a.segment_id, question, a.line_scores, route.idf)
                              for a in (route.activations[r] for r in ranks)], route.allowed, timeout=wait))
                 for i, ranks in groups.items()]
        if route.open_segment is not None:
            i = self.shards.assistant_index(tenant, route.open_segment.id)
            calls.append(read(i, [route.open_segment.id], assistants(self.shards, i).candidates_from(
                [route.open_segment], question, route.idf, timeout=wait)))
        results = list(await asyncio.gather(*calls))
        open_found, bill = results.pop() if route.open_segment is not None else ([], TokenBill())
        by_rank: dict[int, list[Evidence]] = {}
        for (_, ranks), (found, b) in zip(groups.items(), results, strict=True):
            by_rank.update(zip(ranks, found, strict=True))
            bill += b
        return [by_rank[r] for r in sorted(by_rank)] + list(open_found), bill

    async def ask(self, tenant: str, question: str, vector: np.ndarray, *, kind: QuestionKind | None = None,
                  scope: Scope | None = None) -> AskResult:
        """Route, extract, answer. ``kind``: how to answer, when the caller knows (``/v1/ask`` takes an optional
        hint; without one the master predicts it). ``scope``: answer from the turns of that agent / run only."""
        route = await self.route(tenant, question, vector, scope)
        evidence, bill = await self.extract(tenant, question, route)
        with span("master.answer", evidence_offered=len(evidence), kind=kind) as sp:
            answer = await self.master(question, evidence, kind)
            annotate(sp, evidence_turn_ids=[e.turn_id for e in answer.evidence], model_calls=answer.bill.calls,
                     prompt_tokens=answer.bill.prompt_tokens, completion_tokens=answer.bill.completion_tokens)
            text(sp, answer=answer.text)
        return AskResult(route, answer, bill, evidence)

    async def search(self, tenant: str, query: str, vector: np.ndarray, k: int, where: MemoryFilter | None = None,
                     threshold: float | None = None) -> tuple[list[Hit], RouteResult]:
        """Tier memories and routed segments for a query; no model call. ``where`` filters the memories (and its
        scope the segments); ``threshold``: the memories' minimum score."""
        async def memories() -> list[Hit]:
            with span("tier.search", core=self.shards.tier_index(tenant), k=k, filtered=where is not None and
                      not where.empty, threshold=threshold) as sp:
                hits = await tier(self.shards, tenant).search(tenant, query, vector, k, where, threshold)
                annotate(sp, memory_ids=[str(h.id) for h in hits])
                return hits

        return await asyncio.gather(memories(), self.route(tenant, query, vector,
                                                           None if where is None else where.scope))
