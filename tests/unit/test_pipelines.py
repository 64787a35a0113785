"""The service's pipelines (write path, summariser, read path, tenant operations) over in-process cores.

They run here exactly as in the ingress, over ``LocalShards`` instead of Ray actors: every core method they name
is called at least once, so a misspelt name fails here (``CoreHandle`` checks names against the core classes,
for the actors too)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone

import numpy as np
import pytest

from core.config import ROLES, EngramConfig
from core.errors import ConflictError, NotFoundError
from cores.tenant_export import parse_import
from cores.tenant_tiers import TenantTiers
from inference.admission import Decision
from inference.master import Master
from pipeline.read_path import ReadPath
from pipeline.shards import CORES, CoreHandle, LocalShards, methods, tier
from pipeline.summariser import Summariser
from pipeline.tenant_ops import TenantOps
from pipeline.write_path import WritePath, turn_records
from tests.doubles import HashingEncoder, ScriptedEngine


@dataclass
class TurnIn:  # what a client posts (serve.schemas.TurnIn's fields)
    id: str | None
    speaker: str
    text: str
    timestamp: datetime | None = None
    date_time: str | None = None


def _turns(n: int, start: int = 0) -> list[TurnIn]:
    t0 = datetime(2023, 5, 7, 13, 0)
    return [TurnIn(f"t{i}", "Ann" if i % 2 else "Bob", f"turn {i} about topic{i % 5} and number {1000 + i}",
                   t0 + timedelta(minutes=i)) for i in range(start, start + n)]


class Service:
    """The ingress's wiring of the pipelines, without HTTP."""

    def __init__(self, classify=None, assistant_actors: int = 2) -> None:
        cfg = EngramConfig()
        cfg.cluster.assistant_actors = assistant_actors
        cfg.router.chunking = "turn"
        cfg.episodic.segment_tokens = 120
        cfg.cluster.write_idle_s = 0.0
        cfg.cluster.summary_delay_s = 0.0
        self.config, self.encoder, self.engine = cfg, HashingEncoder(), ScriptedEngine()
        self.shards = LocalShards(cfg, dim=self.encoder.dim, engines=dict.fromkeys(ROLES, self.engine))
        master = Master(self.engine, cfg.episodic)

        async def embed(texts):
            return self.encoder.encode(texts)

        async def answer(question, evidence, category, adversarial):
            return master.answer(question, evidence, category, adversarial)

        self.writes = WritePath(cfg, self.shards, embed, classify)
        self.summariser = Summariser(cfg.cluster, self.shards, embed)
        self.reads = ReadPath(self.shards, answer, lines_per_segment=cfg.episodic.lines_per_segment)
        self.ops = TenantOps(self.shards, self.summariser.queue)

    async def post(self, tenant: str, turns: list[TurnIn]):
        async with self.summariser.writing():
            report = await self.writes.add_turns(tenant, turn_records(turns, datetime(2024, 1, 1)))
        self.summariser.queue(tenant, report.closed)
        return report

    async def settle(self) -> None:
        while self.summariser.pending:
            await asyncio.sleep(0.01)


def test_a_handle_refuses_a_name_its_core_does_not_have() -> None:
    async def call(name, args, timeout):
        return name

    handle = CoreHandle(TenantTiers, call)
    assert asyncio.run(handle.search("u", "q", None, 1)) == "search"
    with pytest.raises(AttributeError, match="TenantTiers has no method 'serch'"):
        handle.serch  # noqa: B018
    with pytest.raises(AttributeError):
        handle._memory  # noqa: B018  private helpers are not callable through a handle
    assert {"add", "append", "extract"} <= methods(CORES["tier"]) | methods(CORES["router"]) | methods(
        CORES["assistants"])


def test_write_ask_search_and_tenant_operations_end_to_end() -> None:
    async def run() -> None:
        svc = Service()
        report = await svc.post("alice", _turns(40))
        assert report.admitted == [True] * 40 and report.segments_closed >= 2
        with pytest.raises(ConflictError):
            turn_records([TurnIn("x", "Ann", "a"), TurnIn("x", "Ann", "b")], datetime(2024, 1, 1))
        await svc.settle()
        held = [seg for core in svc.shards.cores["assistants"] for seg in core.segments("alice")]
        assert held and all(seg.summary for seg in held)  # the background summariser wrote them

        q = svc.encoder.encode(["topic3 and number 1013"], is_query=True)[0]
        result = await svc.reads.ask("alice", "What about topic3 and number 1013?", q, category=4)
        assert result.answer.text == "a short answer" and result.answer.evidence
        assert {e.turn_id for e in result.answer.evidence} <= set(result.routed_turn_ids)
        # what the assistants offered (replayed by bench.master_context): the master read the best of it
        assert {e.turn_id for e in result.answer.evidence} <= {e.turn_id for e in result.offered}
        assert result.assistant_bill.calls > 0 and result.segments >= 1
        hits, route = await svc.reads.search("alice", "number 1013", q, 3)
        assert hits and route.activations

        memories, total = await svc.ops.list_memories("alice", 0, 5)
        assert total == 40 and len(memories) == 5
        assert (await svc.ops.get_memory("alice", "t13")).text.startswith("turn 13")
        gone = await svc.ops.delete_memory("alice", "t13")
        assert gone.memories == 1 and gone.turns >= 1
        with pytest.raises(NotFoundError):
            await svc.ops.get_memory("alice", "t13")

        lines = list(await svc.ops.export_user("alice", svc.encoder.dim))
        plan = parse_import(lines, svc.encoder.dim)
        with pytest.raises(ConflictError):
            await svc.ops.import_user("alice", plan)  # alice holds memories
        stored, segments = await svc.ops.import_user("bob", plan)
        assert stored == 39 and segments >= 2
        assert await svc.ops.health() == {"tier-0": True, "tier-1": True, "router-0": True, "assistants-0": True,
                                         "assistants-1": True}
        dropped = await svc.ops.delete_user("alice")
        assert dropped.memories == 39 and (await svc.ops.list_memories("alice", 0, 5))[1] == 0
        assert (await svc.ops.list_memories("bob", 0, 5))[1] == 39

    asyncio.run(run())


def test_the_classifier_reads_the_stream_context_and_decides_what_is_stored() -> None:
    seen: list[list[np.ndarray]] = []

    async def classify(chunks):
        seen.append(chunks)
        return [Decision("ADD" if i % 2 == 0 else "NOOP", "fact", 0.9 if i % 2 == 0 else 0.1)
                for i in range(len(chunks))]

    async def run() -> None:
        svc = Service(classify)
        first = await svc.post("u", _turns(3))
        second = await svc.post("u", _turns(3, start=3))
        assert first.admitted == [True, False, True] and sum(second.admitted) == 2
        assert [len(c) for c in seen[1]] == [4, 5, 5]  # earlier turns of the stream come first (≤ 5 per chunk)
        _, total = await tier(svc.shards, "u").list("u", 0, 10)
        assert total == 4

    asyncio.run(run())


def test_keyword_admission_stores_turns_with_memory_words_and_no_model_is_asked() -> None:
    async def run() -> None:
        svc = Service()
        svc.config.admission.mode, svc.config.admission.keyword_min = "keyword", 1
        said = ["ok", "I love hiking with my dog", "haha", "We are going to Paris next month!"]
        report = await svc.post("u", [TurnIn(f"k{i}", "Ann", text) for i, text in enumerate(said)])
        assert report.admitted == [False, True, False, True]
        assert [d.content_type for d in report.decisions][1::2] == ["preference", "plan"]
        assert all(d.p_add is None for d in report.decisions)
        _, total = await tier(svc.shards, "u").list("u", 0, 10)
        assert total == 2
        svc.config.admission.mode = "store_all"  # the same turns again, under other ids: every one stored
        again = await svc.post("v", [TurnIn(f"s{i}", "Ann", text) for i, text in enumerate(said)])
        assert again.admitted == [True] * 4

    asyncio.run(run())


def test_turn_lines_carry_grounded_dates_on_the_speakers_local_date() -> None:
    berlin = timezone(timedelta(hours=2))
    said = datetime(2023, 5, 8, 1, 0, tzinfo=berlin)  # 23:00 UTC on 7 May
    [rec] = turn_records([TurnIn("t1", "Ann", "We met yesterday.", said)], datetime(2024, 1, 1))
    assert rec.timestamp == datetime(2023, 5, 7, 23, 0, tzinfo=UTC) and rec.text == "We met yesterday."
    assert rec.line.endswith("Ann: We met yesterday [7 May 2023].")  # the 8th in Berlin: yesterday is the 7th
    [plain] = turn_records([TurnIn("t1", "Ann", "We met yesterday.", said)], datetime(2024, 1, 1), ground_dates=False)
    assert plain.line.endswith("Ann: We met yesterday.")


def test_an_answer_does_not_depend_on_which_assistant_core_holds_which_segment() -> None:
    """The same turns under other user ids and over 1 or 3 assistant cores: the same lines, scores and bill (the
    read path fuses every core's candidates with the router's idf; each core's own would differ)."""
    question = "What did Ann say about topic3 and number 1013?"

    async def read(actors: int, user: str):
        svc = Service(assistant_actors=actors)
        await svc.post(user, _turns(60))
        await svc.settle()
        q = svc.encoder.encode([question], is_query=True)[0]
        result = await svc.reads.ask(user, question, q)
        held = {i for i, core in enumerate(svc.shards.cores["assistants"]) for _ in core.segments(user)}
        return [(e.turn_id, round(e.score, 9)) for e in result.offered], result.assistant_bill, held

    async def run() -> None:
        base, bill, held = await read(1, "alice")
        assert len(base) > 5 and held == {0}
        for actors, user in ((3, "alice"), (3, "carol"), (3, "dave")):
            offered, other_bill, spread = await read(actors, user)
            assert len(spread) > 1, "the segments are spread over several cores"
            assert offered == base and other_bill == bill

    asyncio.run(run())
