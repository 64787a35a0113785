"""Scopes (agent_id, run_id), filters, thresholds, updates with history and scope deletes — in every layer.

The pipelines run as in the ingress over in-process cores (``tests/unit/test_pipelines.py: Service``); a scoped
ask is checked where it matters: no line of another scope reaches a model prompt.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

from core.config import RouterConfig, TierMemoryConfig
from core.errors import NotFoundError
from cores.durable_cores import DurableTiers
from cores.tenant_export import parse_import
from memory import tier as tier_module
from memory.routing import EpisodicRouter
from memory.scope import MemoryFilter, Scope, event_time
from memory.segmenter import Segment
from memory.tiered_memory import TieredMemory
from pipeline.write_path import turn_records
from tests.doubles import HashingEncoder, unit_vectors
from tests.unit.test_pipelines import Service, TurnIn

T0 = datetime(2023, 5, 7, 13, 0, tzinfo=UTC)


def test_a_filter_matches_scope_metadata_and_event_time() -> None:
    meta = {"agent_id": "a", "run_id": "r1", "type": "fact", "n": 3, "timestamp": "2023-05-08T13:56:00+00:00"}
    assert MemoryFilter().empty and MemoryFilter().matches(None)
    assert MemoryFilter(Scope("a")).matches(meta) and MemoryFilter(Scope(run_id="r1")).matches(meta)
    assert not MemoryFilter(Scope("a", "r2")).matches(meta)
    assert not MemoryFilter(Scope("a")).matches({"type": "fact"})  # written without a scope: outside every one
    assert MemoryFilter(metadata={"type": "fact", "n": 3}).matches(meta)
    assert not MemoryFilter(metadata={"n": "3"}).matches(meta)  # equality keeps the type
    assert not MemoryFilter(metadata={"missing": True}).matches(meta)
    assert MemoryFilter(since=datetime(2023, 5, 8, 13, 56, tzinfo=UTC)).matches(meta)  # since is inclusive
    assert not MemoryFilter(until=datetime(2023, 5, 8, 13, 56, tzinfo=UTC)).matches(meta)  # until is not
    assert MemoryFilter(since=datetime(2023, 5, 8, 12, 0)).matches(meta)  # a time without a zone is UTC
    assert not MemoryFilter(since=datetime(2023, 1, 1)).matches({"agent_id": "a"})  # no event time: no match
    assert event_time({"timestamp": "2023-05-08T15:56:00+02:00"}) == datetime(2023, 5, 8, 13, 56, tzinfo=UTC)
    with pytest.raises(ValueError, match="before"):
        MemoryFilter(since=datetime(2024, 1, 1), until=datetime(2023, 1, 1))


def _memory(n: int, dim: int = 16) -> tuple[TieredMemory, np.ndarray]:
    cfg = TierMemoryConfig()
    cfg.l1.capacity, cfg.l2.capacity = n, n
    mem = TieredMemory(cfg, dim)
    vecs = unit_vectors(n, dim, seed=1)
    mem.add([f"item {i}" for i in range(n)], ids=[f"m{i}" for i in range(n)], vectors=vecs,
            metadata=[{"agent_id": "even" if i % 2 == 0 else "odd"} for i in range(n)])
    return mem, vecs


@pytest.mark.parametrize("n, graph", [(300, False), (1500, False), (1500, True)])
def test_a_filtered_search_returns_the_best_allowed_items_exactly(monkeypatch, n: int, graph: bool) -> None:
    """Below 1,000 items the tier is exact; above, HNSW: a filtered search reads the allowed rows directly up to
    EXACT_FILTERED_UP_TO, else steers the graph search with hnswlib's filter (forced here with a bound of 0)."""
    if graph:
        monkeypatch.setattr(tier_module, "EXACT_FILTERED_UP_TO", 0)
    mem, vecs = _memory(n)
    where = MemoryFilter(Scope("odd")).matches
    for q in unit_vectors(5, vecs.shape[1], seed=9):
        hits = mem.retrieve("q", 10, vector=q, where=where)
        assert len(hits) == 10 and all(int(str(h.id)[1:]) % 2 == 1 for h in hits)
        odd = np.arange(1, n, 2)
        best = {f"m{i}" for i in odd[np.argsort(-(vecs[odd] @ q))[:10]]}
        found = {str(h.id) for h in hits}
        assert len(found & best) >= (8 if graph else 10)  # the graph's search is approximate
    assert mem.retrieve("q", 5, vector=vecs[0], where=MemoryFilter(Scope("nobody")).matches) == []


def test_the_router_activates_only_eligible_segments() -> None:
    enc = HashingEncoder(32)
    router = EpisodicRouter(enc.dim, RouterConfig(chunking="turn"))
    segs = []
    for sid in range(4):
        lines = [f"[t] A: segment {sid} talks about apples {sid}", f"[t] B: more on apples {sid}"]
        segs.append(Segment(sid, [f"s{sid}a", f"s{sid}b"], lines, [T0, T0], [8, 8]))
    router.add(segs, enc.encode([line for s in segs for line in s.lines]))
    q = enc.encode(["apples"], is_query=True)[0]
    assert {a.segment_id for a in router.route("apples", q)} >= {0, 1, 2}
    assert {a.segment_id for a in router.route("apples", q, eligible={1, 2})} <= {1, 2}
    assert router.route("apples", q, eligible=set()) == []


async def _write(svc: Service, tenant: str, turns: list[TurnIn], **scope) -> None:
    async with svc.summariser.writing():
        report = await svc.writes.add_turns(tenant, turn_records(turns, datetime(2024, 1, 1)), **scope)
    svc.summariser.queue(tenant, report.closed)


def _scoped_turns(prefix: str, word: str, n: int, start: datetime) -> list[TurnIn]:
    return [TurnIn(f"{prefix}{i}", "Ann", f"{prefix} says {word}{i % 3} and {word} again {i}",
                   start + timedelta(minutes=i)) for i in range(n)]


def test_scopes_limit_search_ask_list_and_delete_in_every_layer() -> None:
    async def run() -> None:
        svc = Service()
        await _write(svc, "u", _scoped_turns("a", "apples", 24, T0), agent_id="shop", run_id="r1",
                     metadata={"project": "fruit"})
        await _write(svc, "u", _scoped_turns("b", "bananas", 24, T0 + timedelta(days=1)), agent_id="tutor",
                     run_id="r2")
        await _write(svc, "u", _scoped_turns("c", "cherries", 8, T0 + timedelta(days=2)))  # no scope
        await svc.settle()

        q = svc.encoder.encode(["apples and bananas"], is_query=True)[0]
        hits, route = await svc.reads.search("u", "apples and bananas", q, 10, MemoryFilter(Scope("tutor")))
        assert hits and all(str(h.id).startswith("b") for h in hits)
        assert route.allowed is not None and route.allowed <= {f"b{i}" for i in range(24)}
        hits, _ = await svc.reads.search("u", "apples", q, 10, MemoryFilter(metadata={"project": "fruit"}))
        assert hits and all(str(h.id).startswith("a") for h in hits)
        hits, _ = await svc.reads.search("u", "apples", q, 50, MemoryFilter(since=T0 + timedelta(days=2)))
        assert hits and all(str(h.id).startswith("c") for h in hits)
        every, _ = await svc.reads.search("u", "apples", q, 50)
        cut = sorted(h.score for h in every)[len(every) // 2]
        high, _ = await svc.reads.search("u", "apples", q, 50, None, cut)
        assert high and len(high) < len(every) and all(h.score >= cut for h in high)

        svc.engine.batches.clear()
        result = await svc.reads.ask("u", "What about apples and bananas?", q, scope=Scope(run_id="r1"))
        assert result.answer.evidence and all(e.turn_id.startswith("a") for e in result.answer.evidence)
        prompts = [" ".join(m.content for m in r.messages) if r.messages else r.prompt
                   for batch in svc.engine.batches for r in batch]
        assert prompts and not any("b says" in p or "c says" in p for p in prompts)  # the lines of other scopes

        page, total = await svc.ops.list_memories("u", 0, 5, MemoryFilter(Scope("shop", "r1")))
        assert total == 24 and len(page) == 5 and all(m.metadata["project"] == "fruit" for m in page)
        assert (await svc.ops.list_memories("u", 0, 100))[1] == 56

        gone = await svc.ops.delete_scope("u", Scope(agent_id="tutor"))
        assert gone.memories == 24 and gone.turns >= 24
        assert (await svc.ops.list_memories("u", 0, 100, MemoryFilter(Scope("tutor"))))[1] == 0
        assert (await svc.ops.list_memories("u", 0, 100))[1] == 32
        held = [t for core in svc.shards.cores["assistants"] for seg in core.segments("u") for t in seg.turn_ids]
        held += svc.shards.cores["router"][0].in_scope("u", Scope())  # scoped turns still in the stream
        assert held and not any(t.startswith("b") for t in held)
        assert (await svc.reads.ask("u", "bananas?", q, scope=Scope("tutor"))).answer.evidence == []
        with pytest.raises(ValueError):
            await svc.ops.delete_scope("u", Scope())

        # an export keeps the scopes: the copy answers a scoped question the same way
        plan = parse_import(list(await svc.ops.export_user("u", svc.encoder.dim)), svc.encoder.dim)
        await svc.ops.import_user("copy", plan)
        again = await svc.reads.ask("copy", "What about apples and bananas?", q, scope=Scope(run_id="r1"))
        assert again.answer.evidence and all(e.turn_id.startswith("a") for e in again.answer.evidence)

    asyncio.run(run())


def test_an_update_keeps_the_old_text_as_history_and_survives_a_restart(tmp_path) -> None:
    enc = HashingEncoder(32)
    cfg = TierMemoryConfig()
    tiers = DurableTiers(cfg, enc.dim, journal_dir=tmp_path)
    tiers.add("u", ["m1"], ["I live in New York"], enc.encode(["I live in New York"]), [0.5],
              [{"speaker": "Ann", "timestamp": T0.isoformat()}], 1_900_000_000.0)
    assert tiers.update("u", "nope", "x", enc.encode(["x"])[0], 1.0) is None
    m = tiers.update("u", "m1", "I live in Boston", enc.encode(["I live in Boston"])[0], 2_000_000_000.0,
                     {"source": "user fix"})
    assert m.text == "I live in Boston" and m.metadata["source"] == "user fix"
    assert m.metadata["facts"]["home"] == "boston"
    tiers.update("u", "m1", "I live in Boston, MA", enc.encode(["I live in Boston, MA"])[0], 2_000_000_100.0)
    history = tiers.history("u", "m1")
    assert [(v["version"], v["text"], v["event"]) for v in history] == [
        (1, "I live in New York", "ADD"), (2, "I live in Boston", "UPDATE"), (3, "I live in Boston, MA", "UPDATE")]
    assert [v["at"] for v in history] == [1_900_000_000.0, 2_000_000_000.0, 2_000_000_100.0]
    hits = tiers.search("u", "Boston", enc.encode(["I live in Boston, MA"], is_query=True)[0], 1)
    assert hits[0].text == "I live in Boston, MA" and hits[0].similarity > 0.99  # the vector changed too

    restarted = DurableTiers(cfg, enc.dim, journal_dir=tmp_path)
    assert restarted.history("u", "m1") == history and restarted.get("u", "m1").text == "I live in Boston, MA"
    assert restarted.history("u", "nope") is None


def test_an_update_or_history_of_a_missing_memory_is_not_found() -> None:
    async def run() -> None:
        svc = Service()
        await _write(svc, "u", _scoped_turns("a", "apples", 3, T0), agent_id="shop")
        vec = svc.encoder.encode(["new"])[0]
        m = await svc.ops.update_memory("u", "a1", "a1 now says pears", vec, 2_000_000_000.0)
        assert m.text == "a1 now says pears" and m.metadata["agent_id"] == "shop"  # the scope stays
        _, versions = await svc.ops.history("u", "a1")
        assert [v["event"] for v in versions] == ["ADD", "UPDATE"]
        for call in (svc.ops.update_memory("u", "zz", "x", vec, 1.0), svc.ops.history("u", "zz"),
                     svc.ops.history("nobody", "a1")):
            with pytest.raises(NotFoundError):
                await call

    asyncio.run(run())
