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
from inference.question_kind import QuestionKind
from pipeline.assembly import build_memory
from pipeline.shards import CORES, CoreHandle, LocalShards, methods, tier
from pipeline.write_path import turn_records
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
    """The service's memory (``pipeline.assembly.build_memory``, as the ingress builds it) over in-process cores,
    without HTTP."""

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

        async def answer(question, evidence, kind):
            return master.answer(question, evidence, kind)

        self.memory = build_memory(cfg, self.shards, embed=embed, answer=answer, classify=classify)
        self.writes, self.reads = self.memory.writes, self.memory.reads
        self.summariser, self.ops = self.memory.summariser, self.memory.ops

    async def post(self, tenant: str, turns: list[TurnIn]):
        async with self.summariser.writing():
            report = await self.writes.add_turns(tenant, self.memory.records(turns, datetime(2024, 1, 1)))
        self.summariser.queue(tenant, report.closed)
        return report

    async def settle(self) -> None:
        while self.summariser.pending:
            await asyncio.sleep(0.01)


async def _alice(turns: int = 40) -> Service:
    """A service holding ``turns`` of alice's turns, their segments summarised."""
    svc = Service()
    await svc.post("alice", _turns(turns))
    await svc.settle()
    return svc


def _on_alice(check) -> None:
    """Run ``check(svc)`` (a coroutine function) on a fresh :func:`_alice`."""
    async def run() -> None:
        await check(await _alice())

    asyncio.run(run())


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


def test_a_store_all_write_admits_every_turn_and_closes_segments() -> None:
    report = asyncio.run(Service().post("alice", _turns(40)))
    assert report.admitted == [True] * 40 and report.segments_closed >= 2


def test_a_batch_that_names_one_turn_id_twice_is_refused() -> None:
    with pytest.raises(ConflictError):
        turn_records([TurnIn("x", "Ann", "a"), TurnIn("x", "Ann", "b")], datetime(2024, 1, 1))


def test_the_background_summariser_summarises_every_held_segment() -> None:
    async def check(svc: Service) -> None:
        held = [seg for core in svc.shards.cores["assistants"] for seg in core.segments("alice")]
        assert held and all(seg.summary for seg in held)

    _on_alice(check)


def test_an_answer_cites_only_lines_that_were_routed_and_offered() -> None:
    async def check(svc: Service) -> None:
        q = svc.encoder.encode(["topic3 and number 1013"], is_query=True)[0]
        result = await svc.reads.ask("alice", "What about topic3 and number 1013?", q, kind=QuestionKind.FACT)
        cited = {e.turn_id for e in result.answer.evidence}
        assert result.answer.text == "a short answer" and cited
        # what the assistants offered (replayed by bench.master_context): the master read the best of it
        assert cited <= set(result.routed_turn_ids) and cited <= {e.turn_id for e in result.offered}
        assert result.assistant_bill.calls > 0 and result.segments >= 1

    _on_alice(check)


def test_search_returns_memories_and_the_activated_segments() -> None:
    async def check(svc: Service) -> None:
        q = svc.encoder.encode(["topic3 and number 1013"], is_query=True)[0]
        hits, route = await svc.reads.search("alice", "number 1013", q, 3)
        assert hits and route.activations

    _on_alice(check)


def test_memories_are_listed_by_page_and_fetched_by_id() -> None:
    async def check(svc: Service) -> None:
        memories, total = await svc.ops.list_memories("alice", 0, 5)
        assert total == 40 and len(memories) == 5
        assert (await svc.ops.get_memory("alice", "t13")).text.startswith("turn 13")

    _on_alice(check)


def test_a_deleted_memory_is_gone_with_its_turn() -> None:
    async def check(svc: Service) -> None:
        gone = await svc.ops.delete_memory("alice", "t13")
        assert gone.memories == 1 and gone.turns >= 1
        with pytest.raises(NotFoundError):
            await svc.ops.get_memory("alice", "t13")

    _on_alice(check)


def test_an_import_into_a_user_who_holds_memories_is_refused() -> None:
    async def check(svc: Service) -> None:
        plan = parse_import(list(await svc.ops.export_user("alice", svc.encoder.dim)), svc.encoder.dim)
        with pytest.raises(ConflictError):
            await svc.ops.import_user("alice", plan)

    _on_alice(check)


def test_an_export_imports_into_another_user() -> None:
    async def check(svc: Service) -> None:
        plan = parse_import(list(await svc.ops.export_user("alice", svc.encoder.dim)), svc.encoder.dim)
        stored, segments = await svc.ops.import_user("bob", plan)
        assert stored == 40 and segments >= 2
        assert (await svc.ops.list_memories("bob", 0, 5))[1] == 40

    _on_alice(check)


def test_health_names_every_core() -> None:
    async def check(svc: Service) -> None:
        assert await svc.ops.health() == {"tier-0": True, "tier-1": True, "router-0": True, "assistants-0": True,
                                         "assistants-1": True}

    _on_alice(check)


def test_deleting_a_user_leaves_the_other_users() -> None:
    async def check(svc: Service) -> None:
        await svc.post("bob", _turns(10))
        dropped = await svc.ops.delete_user("alice")
        assert dropped.memories == 40 and (await svc.ops.list_memories("alice", 0, 5))[1] == 0
        assert (await svc.ops.list_memories("bob", 0, 5))[1] == 10

    _on_alice(check)


def test_the_write_path_grounds_relative_dates_as_the_config_says() -> None:
    async def line_of(ground: bool) -> str:
        svc = Service()
        svc.config.episodic.ground_dates = ground
        said = datetime(2023, 5, 8, 13, 0, tzinfo=UTC)
        [rec] = svc.memory.records([TurnIn("t1", "Ann", "We met yesterday.", said)], datetime(2024, 1, 1))
        return rec.line

    assert asyncio.run(line_of(True)).endswith("Ann: We met yesterday [7 May 2023].")
    assert asyncio.run(line_of(False)).endswith("Ann: We met yesterday.")


def _every_other(seen: list[list[np.ndarray]]):
    """A classifier double: ADD for the even turns of each request, NOOP for the odd ones; ``seen`` gets the
    chunks it was given."""
    async def classify(chunks):
        seen.append(chunks)
        return [Decision("ADD" if i % 2 == 0 else "NOOP", "fact", 0.9 if i % 2 == 0 else 0.1)
                for i in range(len(chunks))]

    return classify


def test_the_classifier_reads_the_earlier_turns_of_the_stream_first() -> None:
    seen: list[list[np.ndarray]] = []

    async def run() -> None:
        svc = Service(_every_other(seen))
        await svc.post("u", _turns(3))
        await svc.post("u", _turns(3, start=3))

    asyncio.run(run())
    assert [len(c) for c in seen[1]] == [4, 5, 5]  # earlier turns of the stream come first (≤ 5 per chunk)


def test_the_classifier_decides_which_turns_are_stored() -> None:
    async def run() -> tuple[list[bool], int]:
        svc = Service(_every_other([]))
        first = await svc.post("u", _turns(3))
        await svc.post("u", _turns(3, start=3))
        return first.admitted, (await tier(svc.shards, "u").list("u", 0, 10))[1]

    admitted, stored = asyncio.run(run())
    assert admitted == [True, False, True] and stored == 4


KEYWORD_TURNS = ["ok", "I love hiking with my dog", "haha", "We are going to Paris next month!"]


def _keyword_post(mode: str) -> tuple[Service, object]:
    async def run():
        svc = Service()
        svc.config.admission.mode, svc.config.admission.keyword_min = mode, 1
        return svc, await svc.post("u", [TurnIn(f"k{i}", "Ann", text) for i, text in enumerate(KEYWORD_TURNS)])

    return asyncio.run(run())


def test_keyword_admission_stores_the_turns_with_memory_words() -> None:
    svc, report = _keyword_post("keyword")
    assert report.admitted == [False, True, False, True]
    assert asyncio.run(tier(svc.shards, "u").list("u", 0, 10))[1] == 2


def test_keyword_admission_types_what_it_stores_without_asking_a_model() -> None:
    _, report = _keyword_post("keyword")
    assert [d.content_type for d in report.decisions][1::2] == ["preference", "plan"]
    assert all(d.p_add is None for d in report.decisions)


def test_store_all_admission_stores_every_turn() -> None:
    _, report = _keyword_post("store_all")
    assert report.admitted == [True] * 4


BERLIN_1AM = datetime(2023, 5, 8, 1, 0, tzinfo=timezone(timedelta(hours=2)))  # 23:00 UTC on 7 May


def test_turn_times_are_kept_in_utc() -> None:
    [rec] = turn_records([TurnIn("t1", "Ann", "We met yesterday.", BERLIN_1AM)], datetime(2024, 1, 1))
    assert rec.timestamp == datetime(2023, 5, 7, 23, 0, tzinfo=UTC) and rec.text == "We met yesterday."


def test_relative_dates_are_grounded_on_the_speakers_local_date() -> None:
    [rec] = turn_records([TurnIn("t1", "Ann", "We met yesterday.", BERLIN_1AM)], datetime(2024, 1, 1))
    assert rec.line.endswith("Ann: We met yesterday [7 May 2023].")  # the 8th in Berlin: yesterday is the 7th


def test_without_grounding_the_line_is_as_said() -> None:
    [plain] = turn_records([TurnIn("t1", "Ann", "We met yesterday.", BERLIN_1AM)], datetime(2024, 1, 1),
                           ground_dates=False)
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
