"""The HTTP API (FastAPI behind Ray Serve): ``MemoryAPI`` maps requests onto the pipelines and back.

The work is done by the service's memory (``pipeline.assembly.build_memory``, the same assembly the benchmarks
and tests build) over the cluster's shards (``serve.actor_shards.ActorShards``): the write path, the read path
(route -> assistants -> master), the background summariser and the tenant operations. This module validates
requests, checks API keys (``serve/middleware.py``, then :func:`authorize` in every endpoint), records metrics and
shapes responses.
"""

from __future__ import annotations

import asyncio
import json
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

import numpy as np
from fastapi import FastAPI, Query, Request, Response, Security
from fastapi.responses import HTMLResponse
from pydantic import ValidationError
from ray import serve

from core import tracing
from core.config import EngramConfig
from core.errors import InvalidRequestError, PayloadTooLargeError
from core.generation import TokenBill
from cores.tenant_episodes import RouteResult
from cores.tenant_export import InvalidExport, parse_import
from inference.question_kind import QuestionKind
from memory.scope import MemoryFilter, Scope, event_time
from pipeline.assembly import build_memory
from serve import middleware
from serve import schemas as s
from serve.actor_shards import ActorShards
from serve.auth import ApiKey, KeyStore, permit
from serve.errors import install_error_handlers
from serve.metrics import METRICS
from serve.middleware import API_KEY, ApiKeyCheck
from serve.topology import Topology

VERSION = "0.1.0"
CONSOLE_HTML = (Path(__file__).parent / "console.html").read_text(encoding="utf-8")
NDJSON = "application/x-ndjson"

app = FastAPI(
    title="Engram Cluster",
    version=VERSION,
    description="Long-term memory for LLM agents: admission, tiered HNSW memory, episodic recall.",
    responses={422: {"model": s.ErrorBody}, 503: {"model": s.ErrorBody}},
)
install_error_handlers(app)
middleware.install(app)


def authorize(key: ApiKey | None, tenant: str | None, admin: bool = False) -> None:
    """403 unless the request's key (authenticated by ``API_KEY``) may act for ``tenant`` (and is an admin key,
    with ``admin``); nothing when ``auth.required`` is false (no key). First thing in every endpoint."""
    if key is not None:
        permit(key, tenant, admin)


def _bill(b: TokenBill) -> s.TokenCount:
    return s.TokenCount(prompt=b.prompt_tokens, completion=b.completion_tokens, total=b.total_tokens)


def _count_tokens(role: str, bill: TokenBill) -> None:
    METRICS.tokens.labels(role, "prompt").inc(bill.prompt_tokens)
    METRICS.tokens.labels(role, "completion").inc(bill.completion_tokens)


def _link_fields(link: dict[str, Any] | None) -> dict[str, str]:
    """A tier shard's write link as TurnResult fields: ``{"duplicate_of": id}`` or ``{"supersedes": id}``."""
    if link is None:
        return {}
    return {"duplicate_of" if link["kind"] == "duplicate" else "supersedes": link["target"]}


def _segment_hits(route: RouteResult) -> list[s.SegmentHit]:
    out = []
    for a in route.activations:
        start, end, turn_ids = route.segments[a.segment_id]
        out.append(s.SegmentHit(segment_id=a.segment_id, paths=sorted(a.paths) or ["newest"], score=a.score,
                                start=start, end=end, turn_ids=turn_ids))
    if route.open_segment is not None:
        seg = route.open_segment
        out.append(s.SegmentHit(segment_id=seg.id, paths=["open"], score=0.0, start=seg.start, end=seg.end,
                                turn_ids=list(seg.turn_ids)))
    return out


class MemoryAPI:
    """The ingress deployment's class (``serve.app.build_app`` wraps it with ``serve.ingress(app)``)."""

    def __init__(self, config: dict[str, Any], embedder: Any, master: Any, admission: Any | None,
                 llm: Any = None) -> None:
        self.config = EngramConfig.model_validate(config)
        tracing.configure(self.config.tracing)
        self.embedder, self.master, self.admission, self.llm = embedder, master, admission, llm
        self.app_name = serve.get_replica_context().app_name
        self._topology: Topology | None = None
        self._lock = asyncio.Lock()
        self._query_embedder = None
        self._health: asyncio.Future | None = None  # the health check in flight (shared by concurrent probes)
        # NOTE: on the class: Serve hands the replica a pickled copy of the app, whose API_KEY instance is not this
        # module's; the class itself travels by reference.
        ApiKeyCheck.store = KeyStore(self.config.auth.keys_file) if self.config.auth.required else None
        Topology.check_storage(self.config)  # NOTE: fail the deployment now, not every request later
        if self.config.cluster.local_query_embedding:
            from serve.pool import use_cores
            from serve.query_batcher import QueryBatcher
            from serve.query_encoder import build_query_encoder

            use_cores(self.config.embedder.num_threads)
            encoder = build_query_encoder(self.config.embedder, self.config.paths.cache_dir)
            self._query_embedder = QueryBatcher(encoder.encode)
        self.memory = build_memory(self.config, ActorShards(self.config, self.topology), embed=self._embed,
                                   answer=self._answer, classify=None if admission is None else self._classify,
                                   on_summary_bill=lambda bill: _count_tokens("summary", bill))
        try:  # NOTE: create (or attach to) the actors now rather than on the first request
            self._warming = asyncio.get_running_loop().create_task(self.topology())
        except RuntimeError:
            self._warming = None

    # -- plumbing ----------------------------------------------------------------------------
    async def topology(self) -> Topology:
        async with self._lock:
            if self._topology is None:
                dim = await self.embedder.dim.remote()
                self._topology = Topology.start(self.config, dim=dim, app_name=self.app_name)
        return self._topology

    async def _embed(self, texts: list[str], is_query: bool = False) -> np.ndarray:
        local = is_query and self._query_embedder is not None
        with tracing.span("embed", texts=len(texts), query=is_query, where="ingress" if local else "embedder"):
            if local:
                return await self._query_embedder.embed(texts)
            return await self.embedder.encode.remote(texts, is_query)

    async def _classify(self, chunks: list[np.ndarray]) -> list:
        with tracing.span("admission.classify", chunks=len(chunks)):
            return await self.admission.classify.remote(chunks)

    async def _answer(self, question: str, evidence: list, kind: QuestionKind | None) -> Any:
        return await self.master.answer.remote(question, list(evidence), kind, tracing.carrier())

    # -- writes ------------------------------------------------------------------------------
    @app.post("/v1/turns", response_model=s.AddTurnsResponse, summary="Add turns (admission decides what is kept)")
    async def add_turns(self, req: s.AddTurnsRequest,
                        key: ApiKey | None = Security(API_KEY)) -> s.AddTurnsResponse:
        authorize(key, req.user_id)
        async with self.memory.summariser.writing():
            turns = self.memory.records(req.turns, datetime.now(UTC))
            with tracing.span("POST /v1/turns", user_id=req.user_id, turns=len(turns), agent_id=req.agent_id,
                              run_id=req.run_id) as sp:
                report = await self.memory.writes.add_turns(req.user_id, turns, agent_id=req.agent_id,
                                                            run_id=req.run_id, session_id=req.session_id,
                                                            metadata=req.metadata)
                tracing.annotate(sp, admitted=sum(report.admitted), segments_closed=report.segments_closed)
        if self.config.cluster.summaries:
            self.memory.summariser.queue(req.user_id, report.closed)
        for d in report.decisions:
            METRICS.admissions.labels(d.op, d.content_type).inc()
        METRICS.evictions.inc(report.evicted)
        METRICS.segments.inc(report.segments_closed)
        return s.AddTurnsResponse(
            user_id=req.user_id,
            results=[s.TurnResult(id=i, admitted=d.op == "ADD", type=d.content_type, p_add=d.p_add,
                                  **_link_fields(link))
                     for i, d, link in zip(report.turn_ids, report.decisions,
                                           report.links or [None] * len(report.turn_ids), strict=True)],
            admitted=sum(report.admitted), segments_closed=report.segments_closed, evicted=report.evicted,
        )

    # -- reads -------------------------------------------------------------------------------
    @app.post("/v1/search", response_model=s.SearchResponse, summary="Memories and segments for a query")
    async def search(self, req: s.SearchRequest,
                     key: ApiKey | None = Security(API_KEY)) -> s.SearchResponse:
        authorize(key, req.user_id)
        f = req.filters or s.Filters()
        where = MemoryFilter(Scope(req.agent_id, req.run_id), f.metadata, f.since, f.until)
        with tracing.span("POST /v1/search", user_id=req.user_id, k=req.k, agent_id=req.agent_id,
                          run_id=req.run_id) as sp:
            tracing.text(sp, query=req.query)
            q = (await self._embed([req.query], is_query=True))[0]
            hits, route = await self.memory.reads.search(req.user_id, req.query, q, req.k, where, req.threshold)
        memories = [s.MemoryHit(id=str(h.id), text=h.text, score=h.score, similarity=h.similarity, tier=h.tier,
                                path="l1" if h.tier == "l1" else "gate", importance=h.importance,
                                **_scope_fields(h.metadata), metadata=h.metadata or {}) for h in hits]
        return s.SearchResponse(user_id=req.user_id, memories=memories, segments=_segment_hits(route))

    @app.post("/v1/ask", response_model=s.AskResponse, summary="Answer a question from episodic evidence")
    async def ask(self, req: s.AskRequest,
                  key: ApiKey | None = Security(API_KEY)) -> s.AskResponse:
        authorize(key, req.user_id)
        with tracing.span("POST /v1/ask", user_id=req.user_id, kind=req.kind, agent_id=req.agent_id,
                          run_id=req.run_id) as sp:
            tracing.text(sp, question=req.question)
            q = (await self._embed([req.question], is_query=True))[0]
            result = await self.memory.reads.ask(req.user_id, req.question, q, kind=req.kind,
                                          scope=Scope(req.agent_id, req.run_id))
            b = result.assistant_bill + result.answer.bill
            tracing.annotate(sp, segments=result.segments, evidence=len(result.answer.evidence),
                             prompt_tokens=b.prompt_tokens, completion_tokens=b.completion_tokens)
        answer, bill = result.answer, result.assistant_bill
        _count_tokens("assistants", bill)
        _count_tokens("master", answer.bill)
        return s.AskResponse(
            user_id=req.user_id, answer=answer.text,
            evidence=[s.EvidenceOut(turn_id=e.turn_id, content=e.content, timestamp=e.timestamp,
                                    segment_id=e.segment_id) for e in answer.evidence],
            segments=_segment_hits(result.route),
            tokens=s.TokenBillOut(assistants=_bill(bill), master=_bill(answer.bill),
                                  total=bill.total_tokens + answer.bill.total_tokens),
        )

    # -- memories ----------------------------------------------------------------------------
    @app.get("/v1/memories", response_model=s.MemoryList, summary="List a user's memories")
    async def list_memories(self, user_id: s.Identifier, offset: int = Query(0, ge=0, le=10_000_000),
                            limit: int = Query(50, ge=1, le=1000), agent_id: s.Identifier | None = None,
                            run_id: s.Identifier | None = None, since: datetime | None = None,
                            until: datetime | None = None,
                            metadata: str | None = Query(None, max_length=8192, description=(
                                'Equality on metadata keys, a JSON object, e.g. {"type": "fact"}.')),
                            key: ApiKey | None = Security(API_KEY)) -> s.MemoryList:
        authorize(key, user_id)
        where = _query_filter(agent_id, run_id, since, until, metadata)
        items, total = await self.memory.ops.list_memories(user_id, offset, limit, where)
        return s.MemoryList(user_id=user_id, memories=[_memory(m) for m in items], total=total, offset=offset,
                            limit=limit)

    @app.delete("/v1/memories", response_model=s.Deleted, summary="Delete an agent's or a run's memories",
                responses={400: {"model": s.ErrorBody}})
    async def delete_scope(self, user_id: s.Identifier, agent_id: s.Identifier | None = None,
                           run_id: s.Identifier | None = None,
                           key: ApiKey | None = Security(API_KEY)) -> s.Deleted:
        """Every memory and raw turn of the user written with this ``agent_id`` and/or ``run_id``
        (``DELETE /v1/users/{user_id}`` deletes a whole user)."""
        authorize(key, user_id)
        scope = Scope(agent_id, run_id)
        if scope.empty:
            raise InvalidRequestError("name agent_id or run_id (DELETE /v1/users/{user_id} deletes a whole user)",
                                      param="agent_id", code="scope_required")
        gone = await self.memory.ops.delete_scope(user_id, scope)
        return s.Deleted(user_id=user_id, memories=gone.memories, turns=gone.turns)

    @app.get("/v1/memories/{memory_id:path}/history", response_model=s.MemoryHistory,
             summary="A memory's versions, oldest first", responses={404: {"model": s.ErrorBody}})
    async def memory_history(self, memory_id: str, user_id: s.Identifier,
                             key: ApiKey | None = Security(API_KEY)) -> s.MemoryHistory:
        authorize(key, user_id)
        m, versions = await self.memory.ops.history(user_id, memory_id)
        return s.MemoryHistory(
            user_id=user_id, memory_id=m.id, supersedes=m.metadata.get("supersedes"),
            superseded_by=m.metadata.get("superseded_by"),
            versions=[s.MemoryVersion(version=v["version"], text=v["text"], at=datetime.fromtimestamp(v["at"], UTC),
                                      event=v["event"]) for v in versions])

    @app.put("/v1/memories/{memory_id:path}", response_model=s.Memory, summary="Change a memory's text",
             responses={404: {"model": s.ErrorBody}})
    async def update_memory(self, memory_id: str, req: s.UpdateMemoryRequest,
                            key: ApiKey | None = Security(API_KEY)) -> s.Memory:
        """A new version of the memory (embedded again; its history keeps the old text). The episodic segments
        keep the turn as it was said."""
        authorize(key, req.user_id)
        vector = (await self._embed([req.text]))[0]
        m = await self.memory.ops.update_memory(req.user_id, memory_id, req.text, vector, time.time(), req.metadata)
        return _memory(m)

    @app.get("/v1/memories/{memory_id:path}", response_model=s.Memory, summary="One memory",
             responses={404: {"model": s.ErrorBody}})
    async def get_memory(self, memory_id: str, user_id: s.Identifier,
                         key: ApiKey | None = Security(API_KEY)) -> s.Memory:
        authorize(key, user_id)
        return _memory(await self.memory.ops.get_memory(user_id, memory_id))

    @app.delete("/v1/memories/{memory_id:path}", response_model=s.Deleted, summary="Delete one memory",
                responses={404: {"model": s.ErrorBody}})
    async def delete_memory(self, memory_id: str, user_id: s.Identifier,
                            key: ApiKey | None = Security(API_KEY)) -> s.Deleted:
        authorize(key, user_id)
        gone = await self.memory.ops.delete_memory(user_id, memory_id)
        return s.Deleted(user_id=user_id, memories=gone.memories, turns=gone.turns)

    @app.delete("/v1/users/{user_id:path}", response_model=s.Deleted, summary="Delete everything of a user")
    async def delete_user(self, user_id: s.Identifier,
                          key: ApiKey | None = Security(API_KEY)) -> s.Deleted:
        authorize(key, user_id, admin=True)
        gone = await self.memory.ops.delete_user(user_id)
        return s.Deleted(user_id=user_id, memories=gone.memories, turns=gone.turns)

    @app.get("/v1/users/{user_id:path}/export", summary="Export a user's memory as JSON Lines",
             response_class=Response, responses={200: {"content": {NDJSON: {"schema": {"type": "string"}}}}})
    async def export_user(self, user_id: s.Identifier,
                          key: ApiKey | None = Security(API_KEY)) -> Response:
        """Memories (tiers), episodic segments and the stream's state with their vectors, one JSON object per
        line (``cores/tenant_export.py``); ``POST .../import`` rebuilds the user from it exactly."""
        authorize(key, user_id)
        topo = await self.topology()
        lines = await self.memory.ops.export_user(user_id, topo.dim)
        return Response("".join(line + "\n" for line in lines), media_type=NDJSON,
                        headers={"Content-Disposition": f'attachment; filename="{quote(user_id, safe="")}.jsonl"'})

    @app.post("/v1/users/{user_id:path}/import", response_model=s.Imported, summary="Import a user's memory",
              openapi_extra={"requestBody": {"required": True,
                                             "content": {NDJSON: {"schema": {"type": "string"}}}}},
              responses={400: {"model": s.ErrorBody}, 409: {"model": s.ErrorBody}, 413: {"model": s.ErrorBody}})
    async def import_user(self, user_id: s.Identifier, request: Request,
                          key: ApiKey | None = Security(API_KEY)) -> s.Imported:
        """Rebuild a user from an export (the same or another user id). The user must hold nothing yet
        (409 otherwise: delete it first); the whole upload is checked before anything is written."""
        authorize(key, user_id)
        body = bytearray()
        async for chunk in request.stream():
            body += chunk
            if len(body) > s.MAX_IMPORT_BYTES:
                raise PayloadTooLargeError(f"an import is at most {s.MAX_IMPORT_BYTES} bytes", code="too_large")
        topo = await self.topology()
        try:
            plan = parse_import(bytes(body).splitlines(), topo.dim)
        except (InvalidExport, UnicodeDecodeError) as e:
            raise InvalidRequestError(f"not an Engram export: {e}", param="body", code="invalid_export") from None
        stored, segments = await self.memory.ops.import_user(user_id, plan)
        return s.Imported(user_id=user_id, memories=stored, segments=segments)

    # -- operations --------------------------------------------------------------------------
    @app.get("/v1/health", response_model=s.Health, summary="Liveness of every actor")
    async def health(self) -> s.Health:
        """Pings every actor. Probes share one check in flight, and a probe that gives up (a client timeout, a
        readiness probe) never cancels the pings: requests cancelled mid-ping while the actors were still
        starting left every later health check waiting forever, where one patient probe was answered once the
        actors were up (docs/results/2026-12-03-cluster.md)."""
        if self._health is None or self._health.done():
            self._health = asyncio.ensure_future(self.memory.ops.health())
        alive = await asyncio.shield(self._health)
        return s.Health(status="ok" if all(alive.values()) else "degraded", actors=alive, version=VERSION,
                        background=self.memory.summariser.pending)

    @app.get("/console", include_in_schema=False)
    async def console(self) -> HTMLResponse:
        """The web console (``serve/console.html``): static; its calls carry the API key typed into it."""
        return HTMLResponse(CONSOLE_HTML)

    @app.get("/metrics", include_in_schema=False)
    async def metrics(self) -> Response:
        return Response(METRICS.render(), media_type="text/plain; version=0.0.4")


def _scope_fields(metadata: dict[str, Any] | None) -> dict[str, Any]:
    meta = metadata or {}
    return {"agent_id": meta.get("agent_id"), "run_id": meta.get("run_id"), "event_time": event_time(meta)}


def _query_filter(agent_id: str | None, run_id: str | None, since: datetime | None, until: datetime | None,
                  metadata: str | None) -> MemoryFilter:
    """``GET /v1/memories``' query parameters as a filter; 400 for metadata that is not a JSON object of
    scalars, or a time range that ends before it starts."""
    try:
        raw = json.loads(metadata) if metadata else {}
        f = s.Filters(metadata=raw, since=since, until=until)
    except ValidationError as e:
        why = "; ".join(f"{'.'.join(map(str, err['loc'])) or 'filter'}: {err['msg']}" for err in e.errors())
        param = "metadata" if any(err["loc"][:1] == ("metadata",) for err in e.errors()) else "since"
        raise InvalidRequestError(f"bad filter: {why}", param=param, code="invalid_filter") from None
    except ValueError:  # not JSON at all
        raise InvalidRequestError('metadata must be a JSON object, e.g. {"type": "fact"}', param="metadata",
                                  code="invalid_filter") from None
    return MemoryFilter(Scope(agent_id, run_id), f.metadata, f.since, f.until)


def _memory(m: Any) -> s.Memory:
    return s.Memory(id=m.id, text=m.text, tier=m.tier, importance=m.importance, type=m.metadata.get("type"),
                    created_at=m.created_at, updated_at=m.metadata.get("updated_at"), **_scope_fields(m.metadata),
                    metadata=m.metadata)
