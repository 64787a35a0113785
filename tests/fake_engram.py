"""An in-memory stand-in for the HTTP API, served through ``httpx.MockTransport``. Unit tests only.

It reads every request body with the request models of ``serve/schemas.py`` (``extra="forbid"``: an unknown or
misspelt field is a 422, as on the real service), routes on the *raw* path and unquotes each segment itself, so an id
with ``/`` that the client failed to escape lands on no route, and answers with the response models.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from urllib.parse import unquote

import httpx
from pydantic import BaseModel, ValidationError

from serve.schemas import (
    AddTurnsRequest,
    AddTurnsResponse,
    AskRequest,
    AskResponse,
    Deleted,
    ErrorBody,
    ErrorDetail,
    EvidenceOut,
    Health,
    Imported,
    Memory,
    MemoryHistory,
    MemoryHit,
    MemoryList,
    MemoryVersion,
    SearchRequest,
    SearchResponse,
    TokenBillOut,
    TokenCount,
    TurnIn,
    TurnResult,
    UpdateMemoryRequest,
)


@dataclass
class Batch:
    """One ``POST /v1/turns`` as the fake received it."""

    user_id: str
    agent_id: str | None
    session_id: str | None
    turns: list[TurnIn]
    raw: dict


@dataclass
class FakeEngram:
    """Turns whose text starts with "um" are not admitted; every other turn becomes a memory with the turn's id."""

    api_key: str | None = None
    batches: list[Batch] = field(default_factory=list)
    requests: list[httpx.Request] = field(default_factory=list)
    turns: dict[str, dict[str, TurnIn]] = field(default_factory=dict)
    memories: dict[str, dict[str, Memory]] = field(default_factory=dict)
    versions: dict[tuple[str, str], list[str]] = field(default_factory=dict)  # (user, memory) -> texts, oldest first
    fail_metrics: bool = False

    def transport(self) -> httpx.MockTransport:
        return httpx.MockTransport(self.handle)

    # ------------------------------------------------------------ dispatch

    def handle(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        if self.api_key is not None and request.headers.get("authorization") != f"Bearer {self.api_key}":
            return _error(401, "authentication_error", "missing or wrong API key")
        raw_path = request.url.raw_path.decode().split("?", 1)[0]
        parts = [unquote(p) for p in raw_path.split("/")[1:]]
        query = dict(request.url.params)
        try:
            match request.method, parts:
                case "POST", ["v1", "turns"]:
                    return self._add_turns(request)
                case "POST", ["v1", "search"]:
                    return self._search(SearchRequest.model_validate_json(request.content))
                case "POST", ["v1", "ask"]:
                    return self._ask(AskRequest.model_validate_json(request.content))
                case "GET", ["v1", "memories"]:
                    return self._list(query["user_id"], int(query.get("offset", 0)), int(query.get("limit", 50)),
                                      query)
                case "DELETE", ["v1", "memories"]:
                    return self._delete_scope(query)
                case "GET", ["v1", "memories", memory_id, "history"]:
                    return self._history(query["user_id"], memory_id)
                case "PUT", ["v1", "memories", memory_id]:
                    return self._update(memory_id, UpdateMemoryRequest.model_validate_json(request.content))
                case "GET", ["v1", "memories", memory_id]:
                    return _ok(self._memory(query["user_id"], memory_id))
                case "DELETE", ["v1", "memories", memory_id]:
                    self._memory(query["user_id"], memory_id)
                    del self.memories[query["user_id"]][memory_id]
                    return _ok(Deleted(user_id=query["user_id"], memories=1))
                case "DELETE", ["v1", "users", user_id]:
                    n_mem = len(self.memories.pop(user_id, {}))
                    n_turns = len(self.turns.pop(user_id, {}))
                    return _ok(Deleted(user_id=user_id, memories=n_mem, turns=n_turns))
                case "GET", ["v1", "users", user_id, "export"]:  # a stand-in format: one memory per line
                    lines = [m.model_dump_json() for m in self.memories.get(user_id, {}).values()]
                    return httpx.Response(200, text="".join(line + "\n" for line in lines),
                                          headers={"Content-Type": "application/x-ndjson"})
                case "POST", ["v1", "users", user_id, "import"]:
                    assert request.headers["content-type"] == "application/x-ndjson"
                    if self.memories.get(user_id):
                        return _error(409, "conflict_error", f"user {user_id!r} already has memories")
                    found = [Memory.model_validate_json(line) for line in request.content.splitlines()]
                    self.memories[user_id] = {m.id: m for m in found}
                    return _ok(Imported(user_id=user_id, memories=len(found), segments=0))
                case "GET", ["v1", "health"]:
                    return _ok(Health(status="ok", actors={"tier-0": True, "router-0": True}, version="test"))
                case "GET", ["metrics"]:
                    if self.fail_metrics:
                        return httpx.Response(502, text="Bad Gateway from the proxy")
                    return httpx.Response(200, text="# TYPE engram_turns_total counter\nengram_turns_total 3\n")
        except ValidationError as exc:
            err = exc.errors()[0]
            return _error(422, "invalid_request_error", err["msg"], param=".".join(map(str, err["loc"])))
        except _NotFound as exc:
            return _error(404, "not_found_error", str(exc))
        return _error(404, "not_found_error", f"no route {request.method} {raw_path}")

    # ------------------------------------------------------------ endpoints

    def _add_turns(self, request: httpx.Request) -> httpx.Response:
        body = AddTurnsRequest.model_validate_json(request.content)
        raw = json.loads(request.content)
        self.batches.append(Batch(body.user_id, body.agent_id, body.session_id, body.turns, raw))
        results = []
        for n, turn in enumerate(body.turns):
            turn_id = turn.id or f"t{len(self.turns.get(body.user_id, {})) + n}"
            self.turns.setdefault(body.user_id, {})[turn_id] = turn
            admitted = not turn.text.lower().startswith("um")
            if admitted:
                self.memories.setdefault(body.user_id, {})[turn_id] = Memory(
                    id=turn_id, text=turn.text, tier="l1", importance=0.5, type="fact", created_at=1.0,
                    agent_id=body.agent_id, run_id=body.run_id,
                    metadata={"speaker": turn.speaker, **(body.metadata or {})},
                )
            results.append(TurnResult(id=turn_id, admitted=admitted, type="fact", p_add=0.9 if admitted else 0.1))
        admitted = sum(r.admitted for r in results)
        return _ok(AddTurnsResponse(
            user_id=body.user_id, results=results, admitted=admitted, segments_closed=len(body.turns) // 10, evicted=0,
        ))

    def _matches(self, user_id: str, text: str) -> list[Memory]:
        words = set(re.findall(r"\w+", text.lower()))
        return [m for m in self.memories.get(user_id, {}).values() if words & set(re.findall(r"\w+", m.text.lower()))]

    def _search(self, req: SearchRequest) -> httpx.Response:
        hits = [
            MemoryHit(id=m.id, text=m.text, score=0.9, similarity=0.8, tier="l1", path="l1", importance=m.importance)
            for m in self._matches(req.user_id, req.query)[: req.k]
        ]
        return _ok(SearchResponse(user_id=req.user_id, memories=hits, segments=[]))

    def _ask(self, req: AskRequest) -> httpx.Response:
        found = self._matches(req.user_id, req.question)
        evidence = [
            EvidenceOut(
                turn_id=m.id, content=m.text, segment_id=0,
                timestamp=self.turns[req.user_id][m.id].timestamp or datetime(2020, 1, 1, tzinfo=UTC),
            )
            for m in found
        ]
        answer = found[0].text if found else "Not mentioned in the conversation"
        tokens = TokenBillOut(
            assistants=TokenCount(prompt=100, completion=20, total=120),
            master=TokenCount(prompt=50, completion=5, total=55),
            total=175,
        )
        return _ok(AskResponse(user_id=req.user_id, answer=answer, evidence=evidence, segments=[], tokens=tokens))

    def _memory(self, user_id: str, memory_id: str) -> Memory:
        try:
            return self.memories[user_id][memory_id]
        except KeyError:
            raise _NotFound(f"no memory {memory_id!r} for user {user_id!r}") from None

    def _in_scope(self, m: Memory, query: dict[str, str]) -> bool:
        wanted = json.loads(query.get("metadata", "{}"))
        return (all(query.get(k) in (None, getattr(m, k)) for k in ("agent_id", "run_id"))
                and all(m.metadata.get(k) == v for k, v in wanted.items()))

    def _list(self, user_id: str, offset: int, limit: int, query: dict[str, str]) -> httpx.Response:
        items = [m for m in self.memories.get(user_id, {}).values() if self._in_scope(m, query)]
        page = items[offset : offset + limit]
        return _ok(MemoryList(user_id=user_id, memories=page, total=len(items), offset=offset, limit=limit))


    def _delete_scope(self, query: dict[str, str]) -> httpx.Response:
        if "agent_id" not in query and "run_id" not in query:
            return _error(400, "invalid_request_error", "name agent_id or run_id", param="agent_id")
        mine = self.memories.get(query["user_id"], {})
        gone = [i for i, m in mine.items() if self._in_scope(m, query)]
        for i in gone:
            del mine[i]
        return _ok(Deleted(user_id=query["user_id"], memories=len(gone), turns=len(gone)))

    def _update(self, memory_id: str, req: UpdateMemoryRequest) -> httpx.Response:
        old = self._memory(req.user_id, memory_id)
        self.versions.setdefault((req.user_id, memory_id), [old.text]).append(req.text)
        new = old.model_copy(update={"text": req.text, "updated_at": 2.0,
                                     "metadata": {**old.metadata, **(req.metadata or {})}})
        self.memories[req.user_id][memory_id] = new
        return _ok(new)

    def _history(self, user_id: str, memory_id: str) -> httpx.Response:
        m = self._memory(user_id, memory_id)
        texts = self.versions.get((user_id, memory_id), [m.text])
        return _ok(MemoryHistory(user_id=user_id, memory_id=memory_id, versions=[
            MemoryVersion(version=n, text=t, at=datetime(2024, 1, n, tzinfo=UTC), event="ADD" if n == 1 else "UPDATE")
            for n, t in enumerate(texts, 1)]))


class _NotFound(Exception):
    pass


def _ok(model: BaseModel) -> httpx.Response:
    return httpx.Response(200, content=model.model_dump_json(), headers={"content-type": "application/json"})


def _error(status: int, type_: str, message: str, param: str | None = None) -> httpx.Response:
    body = ErrorBody(error=ErrorDetail(message=message, type=type_, param=param))
    return httpx.Response(status, content=body.model_dump_json(), headers={"content-type": "application/json"})
