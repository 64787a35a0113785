"""cluster.client against an in-memory API (tests/fake_engram.py) through httpx.MockTransport: no server."""

from __future__ import annotations

import asyncio
import json
from datetime import datetime

import httpx
import pytest
from pydantic import ValidationError

from cluster.client import AsyncEngramClient, EngramClient, EngramHTTPError
from serve.schemas import AddTurnsResponse, AskResponse, Health, Memory, MemoryList, SearchResponse, TurnIn
from tests.fake_engram import FakeEngram

ODD_USER = "team/alice:1"
ODD_IDS = ["D1:3", "notes/2024/a+b", "x@y.z"]


@pytest.fixture
def fake() -> FakeEngram:
    return FakeEngram()


@pytest.fixture
def client(fake: FakeEngram):
    with EngramClient("http://engram.test", transport=fake.transport()) as c:
        yield c


def test_add_turns_sends_schema_bodies_from_models_and_dicts(fake: FakeEngram, client: EngramClient) -> None:
    when = datetime(2023, 5, 8, 13, 56)
    turns = [
        TurnIn(id="D1:1", speaker="Caroline", text="I went to a support group.", timestamp=when, date_time="x"),
        {"id": "D1:2", "speaker": "Melanie", "text": "um, nice"},
    ]
    reply = client.add_turns("caroline", turns, agent_id="agent-7", session_id="session_1")

    assert isinstance(reply, AddTurnsResponse)
    assert [r.id for r in reply.results] == ["D1:1", "D1:2"]
    assert [r.admitted for r in reply.results] == [True, False] and reply.admitted == 1
    (batch,) = fake.batches  # the fake parsed it with AddTurnsRequest (extra="forbid")
    assert (batch.user_id, batch.agent_id, batch.session_id) == ("caroline", "agent-7", "session_1")
    assert batch.turns[0].timestamp == when and batch.turns[0].date_time == "x"
    assert batch.turns[1].speaker == "Melanie"
    # Unset optional fields are left out, so the server's defaults (e.g. "now") apply.
    assert "timestamp" not in batch.raw["turns"][1] and "id" in batch.raw["turns"][1]


def test_invalid_request_is_refused_before_sending(fake: FakeEngram, client: EngramClient) -> None:
    with pytest.raises(ValidationError):
        client.add_turns("u", [{"speaker": "a", "text": "hi", "mood": "happy"}])  # unknown field
    with pytest.raises(ValidationError):
        client.search("u", "q", k=0)
    with pytest.raises(ValidationError):
        client.add_turns("u", [])
    assert fake.requests == []


def test_ids_with_colons_and_slashes_are_quoted_and_round_trip(fake: FakeEngram, client: EngramClient) -> None:
    client.add_turns(ODD_USER, [{"id": i, "speaker": "a", "text": f"text of {i}"} for i in ODD_IDS])

    for memory_id in ODD_IDS:
        memory = client.get_memory(ODD_USER, memory_id)
        assert isinstance(memory, Memory) and memory.id == memory_id and memory.text == f"text of {memory_id}"
    raw = fake.requests[-1].url.raw_path.decode()
    assert raw.startswith("/v1/memories/x%40y.z?") and "user_id=team%2Falice%3A1" in raw
    assert "/v1/memories/notes%2F2024%2Fa%2Bb?" in fake.requests[-2].url.raw_path.decode()

    deleted = client.delete_memory(ODD_USER, "notes/2024/a+b")
    assert deleted.memories == 1
    assert sorted(m.id for m in client.list_memories(ODD_USER).memories) == sorted(["D1:3", "x@y.z"])

    gone = client.delete_user(ODD_USER)
    assert (gone.user_id, gone.memories, gone.turns) == (ODD_USER, 2, 3)
    assert fake.requests[-1].url.raw_path.decode() == "/v1/users/team%2Falice%3A1"


def test_error_body_becomes_engram_http_error(client: EngramClient) -> None:
    with pytest.raises(EngramHTTPError) as info:
        client.get_memory("nobody", "D9:9")
    err = info.value
    assert (err.status, err.type) == (404, "not_found_error")
    assert "D9:9" in err.message and err.param is None


def test_non_json_error_body_falls_back_to_raw_text(fake: FakeEngram, client: EngramClient) -> None:
    fake.fail_metrics = True
    with pytest.raises(EngramHTTPError) as info:
        client.metrics()
    assert (info.value.status, info.value.type, info.value.message) == (502, "http_error", "Bad Gateway from the proxy")


def test_server_side_validation_error_carries_param() -> None:
    # A server that refuses what the client let through (e.g. a newer, stricter schema).
    def handler(request: httpx.Request) -> httpx.Response:
        body = {"error": {"message": "too long", "type": "invalid_request_error", "param": "query", "code": "len"}}
        return httpx.Response(422, json=body)

    with EngramClient(transport=httpx.MockTransport(handler)) as c, pytest.raises(EngramHTTPError) as info:
        c.search("u", "q")
    assert (info.value.status, info.value.param, info.value.code) == (422, "query", "len")


def test_queries_parse_into_models(client: EngramClient) -> None:
    client.add_turns("u", [
        {"id": "1", "speaker": "a", "text": "I adopted a dog named Rex"},
        {"speaker": "b", "text": "ok"},
    ])

    found = client.search("u", "dog", k=3)
    assert isinstance(found, SearchResponse) and [m.id for m in found.memories] == ["1"]
    answer = client.ask("u", "what dog", kind="fact")
    assert isinstance(answer, AskResponse) and answer.evidence[0].turn_id == "1" and answer.tokens.total == 175
    page = client.list_memories("u", offset=1, limit=1)
    assert isinstance(page, MemoryList) and (page.total, page.offset, len(page.memories)) == (2, 1, 1)
    assert isinstance(client.health(), Health)
    assert "engram_turns_total 3" in client.metrics()


def test_api_key_is_sent_as_bearer_token() -> None:
    fake = FakeEngram(api_key="s3cret")
    with EngramClient(api_key="s3cret", transport=fake.transport()) as c:
        assert c.health().status == "ok"
    with EngramClient(transport=fake.transport()) as c, pytest.raises(EngramHTTPError) as info:
        c.health()
    assert (info.value.status, info.value.type) == (401, "authentication_error")


def test_context_manager_closes_the_http_client(fake: FakeEngram) -> None:
    with EngramClient(transport=fake.transport()) as c:
        c.health()
    with pytest.raises(RuntimeError):  # httpx refuses requests on a closed client
        c.health()


def test_async_client_sends_the_same_requests(fake: FakeEngram) -> None:
    async def scenario() -> AsyncEngramClient:
        async with AsyncEngramClient("http://engram.test", api_key="k", transport=fake.transport()) as c:
            reply = await c.add_turns(ODD_USER, [TurnIn(id="D1:3", speaker="a", text="I like tea")])
            assert reply.admitted == 1
            assert (await c.get_memory(ODD_USER, "D1:3")).text == "I like tea"
            assert [m.id for m in (await c.search(ODD_USER, "tea")).memories] == ["D1:3"]
            assert (await c.ask(ODD_USER, "tea?")).answer == "I like tea"
            assert (await c.delete_memory(ODD_USER, "D1:3")).memories == 1
            with pytest.raises(EngramHTTPError) as info:
                await c.get_memory(ODD_USER, "D1:3")
            assert (info.value.status, info.value.type) == (404, "not_found_error")
            assert (await c.list_memories(ODD_USER)).total == 0
            assert (await c.delete_user(ODD_USER)).turns == 1
            assert (await c.health()).status == "ok"
            assert "engram_turns_total" in await c.metrics()
        return c

    closed = asyncio.run(scenario())
    assert fake.batches[0].user_id == ODD_USER and fake.batches[0].turns[0].id == "D1:3"
    assert fake.requests[1].url.raw_path.decode() == "/v1/memories/D1%3A3?user_id=team%2Falice%3A1"
    assert all(r.headers["authorization"] == "Bearer k" for r in fake.requests)
    assert json.loads(fake.requests[3].content) == {"user_id": ODD_USER, "question": "tea?"}
    with pytest.raises(RuntimeError):
        asyncio.run(closed.health())


def test_scopes_filters_updates_and_history_reach_the_api(fake: FakeEngram, client: EngramClient) -> None:
    client.add_turns("ann", [{"id": "m1", "speaker": "ann", "text": "I live in New York"}], agent_id="coach",
                     run_id="r1", metadata={"project": "move"})
    client.add_turns("ann", [{"id": "m2", "speaker": "ann", "text": "I like tea"}], agent_id="chef")
    body = json.loads(fake.requests[0].content)
    assert (body["agent_id"], body["run_id"], body["metadata"]) == ("coach", "r1", {"project": "move"})

    client.search("ann", "tea", k=3, agent_id="chef", filters={"metadata": {"type": "fact"},
                                                                "since": datetime(2023, 5, 1)}, threshold=0.2)
    body = json.loads(fake.requests[-1].content)
    assert body["agent_id"] == "chef" and body["threshold"] == 0.2
    assert body["filters"] == {"metadata": {"type": "fact"}, "since": "2023-05-01T00:00:00"}
    client.ask("ann", "where?", run_id="r1")
    assert json.loads(fake.requests[-1].content) == {"user_id": "ann", "question": "where?", "run_id": "r1"}

    page = client.list_memories("ann", agent_id="coach", filters={"metadata": {"project": "move"}})
    assert [m.id for m in page.memories] == ["m1"]
    assert dict(fake.requests[-1].url.params) == {"user_id": "ann", "offset": "0", "limit": "50", "agent_id": "coach",
                                                   "metadata": '{"project": "move"}'}

    assert client.update_memory("ann", "m1", "I live in Boston").text == "I live in Boston"
    assert fake.requests[-1].method == "PUT" and json.loads(fake.requests[-1].content) == {
        "user_id": "ann", "text": "I live in Boston"}
    history = client.memory_history("ann", "m1")
    assert [v.text for v in history.versions] == ["I live in New York", "I live in Boston"]
    assert fake.requests[-1].url.raw_path.decode() == "/v1/memories/m1/history?user_id=ann"

    assert client.delete_scope("ann", agent_id="coach").memories == 1
    assert fake.requests[-1].method == "DELETE" and fake.requests[-1].url.raw_path.decode() == (
        "/v1/memories?user_id=ann&agent_id=coach")
    assert [m.id for m in client.list_memories("ann").memories] == ["m2"]
    sent = len(fake.requests)
    with pytest.raises(ValueError, match="agent_id or run_id"):
        client.delete_scope("ann")
    with pytest.raises(ValidationError):  # the service's own keys are refused before sending
        client.add_turns("ann", [{"speaker": "ann", "text": "x"}], metadata={"speaker": "bob"})
    with pytest.raises(ValidationError):
        client.search("ann", "x", filters={"since": "2024-01-02", "until": "2024-01-01"})
    assert len(fake.requests) == sent
