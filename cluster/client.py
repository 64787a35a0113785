"""Python client of the HTTP API (``/v1``), sync and async, on httpx.

Each endpoint is described once, by a function of :class:`_Calls` that returns a :class:`Call`
(method, path, query, body built from the request models of ``serve/schemas.py``, and how to read the
reply). The two clients are transports only: ``EngramClient._send`` runs a call with ``httpx.Client``,
``AsyncEngramClient._send`` with ``httpx.AsyncClient``; the endpoint methods themselves live once, in
:class:`_Endpoints`, and return whatever ``_send`` returns (the model, or an awaitable of it)::

    with EngramClient("http://127.0.0.1:8000") as c:
        c.add_turns("alice", [{"speaker": "alice", "text": "I moved to Lisbon."}])
        c.ask("alice", "Where does Alice live?").answer

    async with AsyncEngramClient() as c:
        hits = await c.search("alice", "Lisbon", k=3)

An error reply raises :class:`EngramHTTPError`; a server that cannot be reached raises httpx's
``TransportError`` (``ConnectError``, ``TimeoutException``) unchanged.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar
from urllib.parse import quote

import httpx
from pydantic import BaseModel

from serve.schemas import (
    AddTurnsRequest,
    AddTurnsResponse,
    AskRequest,
    AskResponse,
    Deleted,
    ErrorBody,
    Filters,
    Health,
    Imported,
    Memory,
    MemoryHistory,
    MemoryList,
    SearchRequest,
    SearchResponse,
    TurnIn,
    UpdateMemoryRequest,
)

__all__ = ["AsyncEngramClient", "Call", "DEFAULT_URL", "EngramClient", "EngramHTTPError"]

DEFAULT_URL = "http://127.0.0.1:8000"
NDJSON = "application/x-ndjson"
DEFAULT_TIMEOUT_S = 120.0  # /v1/ask runs several small-model calls; on CPU that takes a while

T = TypeVar("T")
M = TypeVar("M", bound=BaseModel)


class EngramHTTPError(Exception):
    """The service answered with a 4xx/5xx. Fields are those of the error body (``ErrorBody``)."""

    def __init__(
        self, status: int, type: str, message: str, param: str | None = None, code: str | None = None
    ) -> None:
        super().__init__(f"{status} {type}: {message}")
        self.status, self.type, self.message, self.param, self.code = status, type, message, param, code

    @classmethod
    def from_response(cls, response: httpx.Response) -> EngramHTTPError:
        """Read ``{"error": {...}}``; any other body (a proxy's HTML, FastAPI's ``{"detail": ...}``) becomes the
        message as is, with type ``http_error``."""
        try:
            err = ErrorBody.model_validate_json(response.content).error
        except ValueError:  # pydantic's ValidationError (bad JSON included) is a ValueError
            text = response.text.strip() or response.reason_phrase
            return cls(response.status_code, "http_error", text)
        return cls(response.status_code, err.type, err.message, err.param, err.code)


@dataclass(frozen=True)
class Call(Generic[T]):
    """One request and how to read its successful reply."""

    method: str
    path: str
    parse: Callable[[httpx.Response], T]
    params: Mapping[str, Any] = field(default_factory=dict)
    body: BaseModel | None = None
    content: bytes | None = None  # a raw body (an import's JSON Lines), sent as NDJSON

    def json_body(self) -> Any:
        # NOTE: exclude_none so that absent optional fields take the server's defaults (e.g. a turn's timestamp).
        return None if self.body is None else self.body.model_dump(mode="json", exclude_none=True)

    def result(self, response: httpx.Response) -> T:
        if response.is_error:
            raise EngramHTTPError.from_response(response)
        return self.parse(response)


def _model(cls: type[M]) -> Callable[[httpx.Response], M]:
    return lambda response: cls.model_validate_json(response.content)


def _seg(part: str) -> str:
    """One path segment, every reserved character escaped: ``_seg("D1:3/x") == "D1%3A3%2Fx"``."""
    return quote(part, safe="")


def _scope(agent_id: str | None, run_id: str | None) -> dict[str, str]:
    return {k: v for k, v in (("agent_id", agent_id), ("run_id", run_id)) if v is not None}


def _turn(turn: TurnIn | Mapping[str, Any]) -> TurnIn:
    return turn if isinstance(turn, TurnIn) else TurnIn.model_validate(dict(turn))


class _Calls:
    """The API, one function per endpoint. Request bodies are validated here, before anything is sent."""

    @staticmethod
    def add_turns(
        user_id: str,
        turns: Iterable[TurnIn | Mapping[str, Any]],
        agent_id: str | None = None,
        session_id: str | None = None,
        run_id: str | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> Call[AddTurnsResponse]:
        body = AddTurnsRequest(
            user_id=user_id, agent_id=agent_id, run_id=run_id, session_id=session_id,
            metadata=None if metadata is None else dict(metadata), turns=[_turn(t) for t in turns]
        )
        return Call("POST", "/v1/turns", _model(AddTurnsResponse), body=body)

    @staticmethod
    def search(user_id: str, query: str, k: int = 5, agent_id: str | None = None, run_id: str | None = None,
               filters: Filters | Mapping[str, Any] | None = None,
               threshold: float | None = None) -> Call[SearchResponse]:
        body = SearchRequest(user_id=user_id, query=query, k=k, agent_id=agent_id, run_id=run_id,
                             filters=None if filters is None else Filters.model_validate(filters),
                             threshold=threshold)
        return Call("POST", "/v1/search", _model(SearchResponse), body=body)

    @staticmethod
    def ask(user_id: str, question: str, kind: str | None = None, agent_id: str | None = None,
            run_id: str | None = None) -> Call[AskResponse]:
        body = AskRequest(user_id=user_id, question=question, kind=kind, agent_id=agent_id, run_id=run_id)
        return Call("POST", "/v1/ask", _model(AskResponse), body=body)

    @staticmethod
    def get_memory(user_id: str, memory_id: str) -> Call[Memory]:
        return Call("GET", f"/v1/memories/{_seg(memory_id)}", _model(Memory), params={"user_id": user_id})

    @staticmethod
    def list_memories(user_id: str, offset: int = 0, limit: int = 50, agent_id: str | None = None,
                      run_id: str | None = None, filters: Filters | Mapping[str, Any] | None = None
                      ) -> Call[MemoryList]:
        params: dict[str, Any] = {"user_id": user_id, "offset": offset, "limit": limit}
        params.update(_scope(agent_id, run_id))
        if filters is not None:
            f = Filters.model_validate(filters)
            if f.metadata:
                params["metadata"] = json.dumps(f.metadata)
            params.update({k: v.isoformat() for k, v in (("since", f.since), ("until", f.until)) if v is not None})
        return Call("GET", "/v1/memories", _model(MemoryList), params=params)

    @staticmethod
    def update_memory(user_id: str, memory_id: str, text: str,
                      metadata: Mapping[str, Any] | None = None) -> Call[Memory]:
        body = UpdateMemoryRequest(user_id=user_id, text=text, metadata=None if metadata is None else dict(metadata))
        return Call("PUT", f"/v1/memories/{_seg(memory_id)}", _model(Memory), body=body)

    @staticmethod
    def memory_history(user_id: str, memory_id: str) -> Call[MemoryHistory]:
        return Call("GET", f"/v1/memories/{_seg(memory_id)}/history", _model(MemoryHistory),
                    params={"user_id": user_id})

    @staticmethod
    def delete_memory(user_id: str, memory_id: str) -> Call[Deleted]:
        return Call("DELETE", f"/v1/memories/{_seg(memory_id)}", _model(Deleted), params={"user_id": user_id})

    @staticmethod
    def delete_scope(user_id: str, agent_id: str | None = None, run_id: str | None = None) -> Call[Deleted]:
        if agent_id is None and run_id is None:
            raise ValueError("delete_scope needs agent_id or run_id (delete_user deletes a whole user)")
        return Call("DELETE", "/v1/memories", _model(Deleted), params={"user_id": user_id, **_scope(agent_id, run_id)})

    @staticmethod
    def delete_user(user_id: str) -> Call[Deleted]:
        return Call("DELETE", f"/v1/users/{_seg(user_id)}", _model(Deleted))

    @staticmethod
    def export_user(user_id: str) -> Call[str]:
        return Call("GET", f"/v1/users/{_seg(user_id)}/export", lambda response: response.text)

    @staticmethod
    def import_user(user_id: str, data: str | bytes) -> Call[Imported]:
        content = data.encode("utf-8") if isinstance(data, str) else bytes(data)
        return Call("POST", f"/v1/users/{_seg(user_id)}/import", _model(Imported), content=content)

    @staticmethod
    def health() -> Call[Health]:
        return Call("GET", "/v1/health", _model(Health))

    @staticmethod
    def metrics() -> Call[str]:
        return Call("GET", "/metrics", lambda response: response.text)


def _client_options(base_url: str, timeout: float, api_key: str | None) -> dict[str, Any]:
    headers = {"Accept": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    return {"base_url": base_url.rstrip("/"), "timeout": timeout, "headers": headers}


def _request_options(call: Call[Any]) -> dict[str, Any]:
    options: dict[str, Any] = {"params": dict(call.params)}
    body = call.json_body()
    if body is not None:
        options["json"] = body
    if call.content is not None:
        options["content"] = call.content
        options["headers"] = {"Content-Type": NDJSON}
    return options


class _Endpoints:
    """The endpoint methods, written once. ``_send`` decides whether they return the reply or an awaitable of it."""

    def _send(self, call: Call[Any]) -> Any:
        raise NotImplementedError

    def add_turns(
        self,
        user_id: str,
        turns: Iterable[TurnIn | Mapping[str, Any]],
        agent_id: str | None = None,
        session_id: str | None = None,
        run_id: str | None = None,
        metadata: Mapping[str, Any] | None = None,
    ):
        """Store turns (``TurnIn`` or dicts of its fields), in the order they were said, in the scopes
        ``agent_id`` / ``run_id``, with your ``metadata`` on each memory → ``AddTurnsResponse``."""
        return self._send(_Calls.add_turns(user_id, turns, agent_id, session_id, run_id, metadata))

    def search(self, user_id: str, query: str, k: int = 5, agent_id: str | None = None, run_id: str | None = None,
               filters: Filters | Mapping[str, Any] | None = None, threshold: float | None = None):
        """Top-k memories (in the scope, matching ``filters``: metadata / since / until, scoring at least
        ``threshold``) and the segments the router activates → ``SearchResponse``."""
        return self._send(_Calls.search(user_id, query, k, agent_id, run_id, filters, threshold))

    def ask(self, user_id: str, question: str, kind: str | None = None, agent_id: str | None = None,
            run_id: str | None = None):
        """Answer a question from the user's memory (of one agent / run) → ``AskResponse`` (answer, evidence,
        token bill)."""
        return self._send(_Calls.ask(user_id, question, kind, agent_id, run_id))

    def get_memory(self, user_id: str, memory_id: str):
        """One memory → ``Memory``."""
        return self._send(_Calls.get_memory(user_id, memory_id))

    def list_memories(self, user_id: str, offset: int = 0, limit: int = 50, agent_id: str | None = None,
                      run_id: str | None = None, filters: Filters | Mapping[str, Any] | None = None):
        """A page of the user's memories (in the scope, matching ``filters``) → ``MemoryList``."""
        return self._send(_Calls.list_memories(user_id, offset, limit, agent_id, run_id, filters))

    def update_memory(self, user_id: str, memory_id: str, text: str, metadata: Mapping[str, Any] | None = None):
        """A new version of a memory's text (the old one stays in its history) → ``Memory``."""
        return self._send(_Calls.update_memory(user_id, memory_id, text, metadata))

    def memory_history(self, user_id: str, memory_id: str):
        """A memory's versions, oldest first → ``MemoryHistory``."""
        return self._send(_Calls.memory_history(user_id, memory_id))

    def delete_memory(self, user_id: str, memory_id: str):
        """Forget one memory → ``Deleted``."""
        return self._send(_Calls.delete_memory(user_id, memory_id))

    def delete_scope(self, user_id: str, agent_id: str | None = None, run_id: str | None = None):
        """Forget every memory and raw turn of an agent and/or a run → ``Deleted``."""
        return self._send(_Calls.delete_scope(user_id, agent_id, run_id))

    def delete_user(self, user_id: str):
        """Forget everything about a user → ``Deleted``."""
        return self._send(_Calls.delete_user(user_id))

    def export_user(self, user_id: str):
        """A user's whole memory as JSON Lines (``cores/tenant_export.py``) → ``str``."""
        return self._send(_Calls.export_user(user_id))

    def import_user(self, user_id: str, data: str | bytes):
        """Rebuild a user that holds nothing yet from an export → ``Imported``."""
        return self._send(_Calls.import_user(user_id, data))

    def health(self):
        """Liveness of the deployments and actors → ``Health``."""
        return self._send(_Calls.health())

    def metrics(self):
        """Prometheus exposition text → ``str``."""
        return self._send(_Calls.metrics())


class EngramClient(_Endpoints):
    """Blocking client; each method returns the response model. ``transport`` is httpx's (tests: MockTransport)."""

    def __init__(
        self,
        base_url: str = DEFAULT_URL,
        timeout: float = DEFAULT_TIMEOUT_S,
        api_key: str | None = None,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self._http = httpx.Client(transport=transport, **_client_options(base_url, timeout, api_key))

    def _send(self, call: Call[T]) -> T:
        return call.result(self._http.request(call.method, call.path, **_request_options(call)))

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> EngramClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncEngramClient(_Endpoints):
    """asyncio client; each method returns an awaitable of the response model."""

    def __init__(
        self,
        base_url: str = DEFAULT_URL,
        timeout: float = DEFAULT_TIMEOUT_S,
        api_key: str | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self._http = httpx.AsyncClient(transport=transport, **_client_options(base_url, timeout, api_key))

    async def _send(self, call: Call[T]) -> T:
        return call.result(await self._http.request(call.method, call.path, **_request_options(call)))

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AsyncEngramClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
