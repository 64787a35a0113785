"""The HTTP API (FastAPI behind Ray Serve): ``MemoryAPI`` wires requests to deployments and actors.

Write path (``POST /v1/turns``): embed each turn's rendered line once -> admission (classifier on the
turn and up to 4 turns before it, or store-all) -> admitted turns into the tenant's tier shard (L1/L2)
and its episodic stream (router actor) -> segments that close go to their assistant actors -> the
write is acknowledged; segment summaries are written afterwards in the background.
Read paths: ``/v1/search`` (tier memories + routed segments, no model call besides the query's
embedding) and ``/v1/ask`` (route -> assistants extract verbatim evidence from their segments in
parallel -> the master answers).
Every ``/v1`` route but ``/v1/health`` first checks the request's API key (a middleware, before the body is
parsed), then that the key may act for the tenant it names (``MemoryAPI._authorize``, ``cluster/auth.py``);
``/metrics`` and the OpenAPI pages stay open.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections import defaultdict
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

import numpy as np
from fastapi import FastAPI, Query, Request, Response, Security
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from fastapi.security.utils import get_authorization_scheme_param
from ray import serve
from ray.exceptions import ActorDiedError, ActorUnschedulableError, GetTimeoutError, RayActorError

from actors.admission import Decision, content_type_rule
from actors.assistant import Evidence, SegmentQuery, by_score
from actors.episodic import dedupe_evidence
from actors.remote import ASSISTANT_WRITES, WRITES
from actors.tenant_episodes import RouteResult, TurnRecord
from actors.tenant_export import InvalidExport, export_lines, parse_import
from cluster.auth import ApiKey, KeyFileError, KeyStore, permit
from cluster.config import EngramConfig
from cluster.errors import (
    ConflictError,
    EngramError,
    InvalidRequestError,
    NotFoundError,
    PayloadTooLargeError,
    UnavailableError,
)
from cluster.topology import Topology
from serve import schemas as s
from serve.engine import TokenBill
from serve.errors import engram_error_response, install_error_handlers
from serve.metrics import Metrics

log = logging.getLogger(__name__)
VERSION = "0.1.0"
SUMMARY_BATCH = 4  # segments per summary call (each a ~1,000-token prompt: ~4 s on 2 CPU cores)
SUMMARY_TIMEOUT_S = 900.0  # background work: a slow pool is not an error
NDJSON = "application/x-ndjson"
WRITE_IDLE_S = 1.0  # writes count as paused once none has run for this long (summaries wait for a pause)

app = FastAPI(
    title="Engram Cluster",
    version=VERSION,
    description="Long-term memory for LLM agents: admission, tiered HNSW memory, episodic recall.",
    responses={422: {"model": s.ErrorBody}, 503: {"model": s.ErrorBody}},
)
install_error_handlers(app)
METRICS = Metrics()
# NOTE: auto_error=False: a missing key reaches ApiKeyCheck, which answers 401 in the API's error body (and not
# at all when auth.required is false); through Security(BEARER) the OpenAPI spec declares the scheme.
BEARER = HTTPBearer(auto_error=False, scheme_name="ApiKey",
                    description="An API key from `engram keys create` (docs/cluster.md, API keys).")


class ApiKeyCheck:
    """The dependency every /v1 endpoint but health takes: the request's API key (None when ``auth.required``
    is false). ``ApiKeyCheck.store`` is the replica's KeyStore (``MemoryAPI.__init__``; one replica per
    process). Whether the key may act for the user is ``MemoryAPI._authorize``'s check.

    The dependency declares the scheme in the OpenAPI spec; the gate is :func:`_authenticate`, a middleware
    that checks the key before FastAPI parses anything, so a caller without a valid key learns nothing about
    the API (401 first, even for a body that is not JSON)."""

    store: KeyStore | None = None

    def __call__(self, request: Request,
                 credentials: HTTPAuthorizationCredentials | None = Security(BEARER)) -> ApiKey | None:
        checked = getattr(request.state, "api_key", None)  # NOTE: the middleware's result: not hashed twice
        return checked if checked is not None else self.check(credentials.credentials if credentials else None)

    @classmethod
    def check(cls, token: str | None) -> ApiKey | None:
        if cls.store is None:
            return None
        try:
            return cls.store.authenticate(token)
        except KeyFileError:
            log.exception("API keys cannot be checked")
            raise UnavailableError("the service cannot read its API keys (see its log)",
                                   code="key_store_error") from None


API_KEY = ApiKeyCheck()
OPEN_PATHS = frozenset({"/v1/health"})  # /metrics and the OpenAPI pages are outside /v1


@app.middleware("http")
async def _authenticate(request: Request, call_next: Any) -> Response:
    path, root = request.url.path, request.scope.get("root_path", "")
    if root and path.startswith(root):  # NOTE: an application served under a route prefix sees the full path
        path = path[len(root):]
    if ApiKeyCheck.store is not None and path.startswith("/v1/") and path not in OPEN_PATHS:
        scheme, token = get_authorization_scheme_param(request.headers.get("authorization"))
        try:
            request.state.api_key = ApiKeyCheck.check(token if scheme.lower() == "bearer" else None)
        except EngramError as e:
            return engram_error_response(e)
    return await call_next(request)


@app.middleware("http")
async def _observe(request: Request, call_next: Any) -> Response:
    start = time.perf_counter()
    response = await call_next(request)
    route = getattr(request.scope.get("route"), "path", "unmatched")
    METRICS.requests.labels(route, str(response.status_code)).inc()
    METRICS.latency.labels(route).observe(time.perf_counter() - start)
    return response


def format_date_time(ts: datetime) -> str:
    """LoCoMo's style: ``format_date_time(datetime(2023, 5, 8, 13, 56)) == '1:56 pm on 8 May, 2023'``."""
    hour = ts.hour % 12 or 12
    return f"{hour}:{ts.minute:02d} {'am' if ts.hour < 12 else 'pm'} on {ts.day} {ts.strftime('%B')}, {ts.year}"


def admission_chunks(context: list[np.ndarray], vectors: np.ndarray, width: int) -> list[np.ndarray]:
    """One chunk per new turn: its vector and up to ``width - 1`` before it (earlier requests' turns from
    ``context`` first), oldest first — MemRouter's ≤ 5-turn window.

    >>> [c[:, 0].tolist() for c in admission_chunks([np.array([1.0])], np.array([[2.0], [3.0]]), 2)]
    [[1.0, 2.0], [2.0, 3.0]]
    """
    stream = [*context, *vectors]
    n = len(context)
    return [np.stack(stream[max(0, n + i + 1 - width) : n + i + 1]) for i in range(len(vectors))]


def _bill(b: TokenBill) -> s.TokenCount:
    return s.TokenCount(prompt=b.prompt_tokens, completion=b.completion_tokens, total=b.total_tokens)


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
        self.embedder, self.master, self.admission, self.llm = embedder, master, admission, llm
        self.app_name = serve.get_replica_context().app_name
        self.timeout = self.config.cluster.actor_call_timeout_s
        self._topology: Topology | None = None
        self._lock = asyncio.Lock()
        self._writes, self._last_write = 0, 0.0  # POST /v1/turns in flight; when the last one ended
        self._summaries: list[tuple[float, str, dict[int, list]]] = []  # (queued at, tenant, segments by actor)
        self._summariser: asyncio.Task | None = None
        self._query_embedder = None
        # NOTE: on the class: Serve hands the replica a pickled copy of the app, whose API_KEY instance is not this
        # module's; the class itself travels by reference.
        ApiKeyCheck.store = KeyStore(self.config.auth.keys_file) if self.config.auth.required else None
        if self.config.cluster.local_query_embedding:
            from serve.embedder import Embedder
            from serve.pool import use_cores

            use_cores(self.config.embedder.num_threads)
            self._query_embedder = Embedder(self.config.embedder)
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

    async def _actor(self, kind: str, i: int, method: str, *args: Any, timeout: float | None = None) -> Any:
        """``actors[kind][i].method(*args)``; an actor whose node is gone is revived once (then retried)."""
        topo = await self.topology()
        for attempt in range(2):
            call = getattr(topo.actors[kind][i], method)
            if kind == "assistants" and method in ASSISTANT_WRITES:
                call = call.options(concurrency_group=WRITES)
            try:
                return await asyncio.wait_for(call.remote(*args), timeout or self.timeout)
            except (ActorUnschedulableError, ActorDiedError) as e:
                error = e
                if attempt == 0:
                    log.warning("%s-%d is gone (%s); reviving it", kind, i, type(e).__name__)
                    topo.revive(kind, i)
            except (RayActorError, GetTimeoutError, TimeoutError) as e:  # restarting, or too slow
                error = e
                break
        raise UnavailableError(f"{kind}-{i} did not answer ({type(error).__name__}); retry the request",
                               code="actor_unavailable") from error

    @staticmethod
    def _authorize(key: ApiKey | None, tenant: str | None, admin: bool = False) -> None:
        """403 unless the request's key (authenticated by ``API_KEY``) may act for ``tenant`` (and is an admin
        key, with ``admin``); nothing when ``auth.required`` is false (no key). First thing in every endpoint."""
        if key is not None:
            permit(key, tenant, admin)

    async def _embed(self, texts: list[str], is_query: bool = False) -> np.ndarray:
        if is_query and self._query_embedder is not None:
            return await asyncio.to_thread(self._query_embedder.encode, texts, is_query=True)
        return await self.embedder.encode.remote(texts, is_query)

    # -- writes ------------------------------------------------------------------------------
    @app.post("/v1/turns", response_model=s.AddTurnsResponse, summary="Add turns (admission decides what is kept)")
    async def add_turns(self, req: s.AddTurnsRequest,
                        key: ApiKey | None = Security(API_KEY)) -> s.AddTurnsResponse:
        self._authorize(key, req.user_id)
        self._writes += 1
        try:
            return await self._add_turns(req)
        finally:
            self._writes -= 1
            self._last_write = time.monotonic()

    async def _add_turns(self, req: s.AddTurnsRequest) -> s.AddTurnsResponse:
        tenant, now = req.user_id, datetime.now(UTC)
        turns = []
        for t in req.turns:
            # NOTE: one clock for every turn: a time without a zone is taken as UTC (sorting evidence compares them)
            ts = t.timestamp or now
            ts = ts.replace(tzinfo=UTC) if ts.tzinfo is None else ts.astimezone(UTC)
            turns.append(TurnRecord(t.id or uuid.uuid4().hex, t.speaker, t.text, t.date_time or format_date_time(ts),
                                    ts))
        ids = [t.turn_id for t in turns]
        if len(set(ids)) != len(ids):
            dup = next(i for i in ids if ids.count(i) > 1)
            raise ConflictError(f"turn id {dup!r} appears twice in one batch", param="turns", code="duplicate_id")
        topo = await self.topology()
        tier, router = topo.index("tier", tenant), topo.index("router", tenant)
        vectors = await self._embed([t.line for t in turns])
        decisions = await self._admit(tenant, router, turns, vectors)
        admitted = [d.op == "ADD" for d in decisions]
        keep = [i for i, a in enumerate(admitted) if a]
        meta = [{"speaker": turns[i].speaker, "timestamp": turns[i].timestamp.isoformat(),
                 "date_time": turns[i].date_time, "type": decisions[i].content_type,
                 "agent_id": req.agent_id, "session_id": req.session_id} for i in keep]
        report = await self._actor(
            "tier", tier, "add", tenant, [ids[i] for i in keep], [turns[i].text for i in keep], vectors[keep],
            [d.p_add if d.p_add is not None else 0.5 for d in (decisions[i] for i in keep)], meta)
        closed = await self._actor("router", router, "append", tenant, turns, vectors, admitted)
        if closed:
            groups: dict[int, list] = defaultdict(list)
            for seg in closed:
                groups[topo.assistant_index(tenant, seg.id)].append(seg)
            await asyncio.gather(*(self._actor("assistants", i, "add", tenant, segs) for i, segs in groups.items()))
            await self._actor("router", router, "delivered", tenant, [seg.id for seg in closed])
            if self.config.cluster.summaries:
                self._queue_summaries(tenant, groups)
        for d, a in zip(decisions, admitted, strict=True):
            METRICS.admissions.labels("ADD" if a else "NOOP", d.content_type).inc()
        METRICS.evictions.inc(report.evicted)
        METRICS.segments.inc(len(closed))
        return s.AddTurnsResponse(
            user_id=tenant,
            results=[s.TurnResult(id=ids[i], admitted=admitted[i], type=d.content_type, p_add=d.p_add)
                     for i, d in enumerate(decisions)],
            admitted=len(keep), segments_closed=len(closed), evicted=report.evicted,
        )

    async def _admit(self, tenant: str, router: int, turns: list[TurnRecord], vectors: np.ndarray) -> list[Decision]:
        if self.admission is None:  # admission.mode == store_all
            return [Decision("ADD", content_type_rule(t.text), None) for t in turns]
        context = await self._actor("router", router, "context", tenant)
        return await self.admission.classify.remote(admission_chunks(context, vectors,
                                                                     self.config.admission.max_turns))

    def _queue_summaries(self, tenant: str, groups: dict[int, list]) -> None:
        self._summaries.append((time.monotonic(), tenant, groups))
        if self._summariser is None or self._summariser.done():
            self._summariser = asyncio.ensure_future(self._summarise_queued())

    async def _summarise_queued(self) -> None:
        """One background worker: summaries run when writes pause (NOTE: on a small CPU they would otherwise
        slow every write down), or once the oldest has waited ``cluster.summary_delay_s``. Everything queued
        goes at once: the assistant actors' calls meet in the pool and are batched together."""
        delay = self.config.cluster.summary_delay_s
        while self._summaries:
            busy = self._writes or time.monotonic() - self._last_write < WRITE_IDLE_S
            if busy and time.monotonic() - self._summaries[0][0] < delay:
                await asyncio.sleep(0.05)
                continue
            todo, self._summaries = self._summaries, []
            per_actor: dict[int, list[tuple[str, int]]] = defaultdict(list)
            for _, tenant, groups in todo:
                for i, segs in groups.items():
                    per_actor[i].extend((tenant, seg.id) for seg in segs)
            # NOTE: a segment queued twice (closed, then shrunk by a delete) is summarised once, as it is now
            await asyncio.gather(*(self._summarise(i, list(dict.fromkeys(pairs))) for i, pairs in per_actor.items()))

    async def _summarise(self, actor: int, pairs: list[tuple[str, int]]) -> None:
        """Summaries of closed segments for the router's global path (after the writes are acknowledged).

        NOTE: one call at a time per assistant actor, at most SUMMARY_BATCH segments each, so that summaries
        neither occupy every thread of the actor nor hold the pool for long against ask requests."""
        topo = await self.topology()
        for start in range(0, len(pairs), SUMMARY_BATCH):
            wanted: dict[str, list[int]] = defaultdict(list)
            for tenant, sid in pairs[start : start + SUMMARY_BATCH]:
                wanted[tenant].append(sid)
            try:
                summaries, bill = await self._actor("assistants", actor, "summarise", dict(wanted),
                                                    timeout=SUMMARY_TIMEOUT_S)
                METRICS.tokens.labels("summary", "prompt").inc(bill.prompt_tokens)
                METRICS.tokens.labels("summary", "completion").inc(bill.completion_tokens)
                for tenant, found in summaries.items():
                    vecs = await self._embed(list(found.values()))
                    router = topo.index("router", tenant)
                    await asyncio.gather(*(self._actor("router", router, "set_summary", tenant, sid, text, v)
                                           for (sid, text), v in zip(found.items(), vecs, strict=True)))
            except Exception:  # NOTE: a lost summary only weakens the global path; the segment stays routable
                log.exception("summaries on assistants-%d failed", actor)

    # -- reads -------------------------------------------------------------------------------
    @app.post("/v1/search", response_model=s.SearchResponse, summary="Memories and segments for a query")
    async def search(self, req: s.SearchRequest,
                     key: ApiKey | None = Security(API_KEY)) -> s.SearchResponse:
        self._authorize(key, req.user_id)
        topo = await self.topology()
        q = (await self._embed([req.query], is_query=True))[0]
        hits, route = await asyncio.gather(
            self._actor("tier", topo.index("tier", req.user_id), "search", req.user_id, req.query, q, req.k),
            self._actor("router", topo.index("router", req.user_id), "route", req.user_id, req.query, q),
        )
        memories = [s.MemoryHit(id=str(h.id), text=h.text, score=h.score, similarity=h.similarity, tier=h.tier,
                                path="l1" if h.tier == "l1" else "gate", importance=h.importance,
                                metadata=h.metadata or {}) for h in hits]
        return s.SearchResponse(user_id=req.user_id, memories=memories, segments=_segment_hits(route))

    @app.post("/v1/ask", response_model=s.AskResponse, summary="Answer a question from episodic evidence")
    async def ask(self, req: s.AskRequest,
                  key: ApiKey | None = Security(API_KEY)) -> s.AskResponse:
        self._authorize(key, req.user_id)
        topo = await self.topology()
        tenant = req.user_id
        q = (await self._embed([req.question], is_query=True))[0]
        route: RouteResult = await self._actor("router", topo.index("router", tenant), "route", tenant, req.question, q)
        groups: dict[int, list[int]] = defaultdict(list)
        for rank, a in enumerate(route.activations):
            groups[topo.assistant_index(tenant, a.segment_id)].append(rank)
        wait = self.config.cluster.ask_timeout_s
        calls = [self._actor("assistants", i, "extract", tenant,
                             [SegmentQuery(a.segment_id, req.question, a.line_scores)
                              for a in (route.activations[r] for r in ranks)], timeout=wait)
                 for i, ranks in groups.items()]
        if route.open_segment is not None:
            i = topo.assistant_index(tenant, route.open_segment.id)
            calls.append(self._actor("assistants", i, "extract_from", [route.open_segment], req.question,
                                     timeout=wait))
        results = await asyncio.gather(*calls)
        open_found, open_bill = results.pop() if route.open_segment is not None else ([], TokenBill())
        by_rank: dict[int, list[Evidence]] = {}
        bill = open_bill
        for (_, ranks), (found, b) in zip(groups.items(), results, strict=True):
            by_rank.update(zip(ranks, found, strict=True))
            bill += b
        evidence = [e for r in sorted(by_rank) for e in by_rank[r]] + [e for group in open_found for e in group]
        answer = await self.master.answer.remote(req.question, dedupe_evidence(by_score(evidence)), req.category)
        for role, b in (("assistants", bill), ("master", answer.bill)):
            METRICS.tokens.labels(role, "prompt").inc(b.prompt_tokens)
            METRICS.tokens.labels(role, "completion").inc(b.completion_tokens)
        return s.AskResponse(
            user_id=tenant, answer=answer.text,
            evidence=[s.EvidenceOut(turn_id=e.turn_id, content=e.content, timestamp=e.timestamp,
                                    segment_id=e.segment_id) for e in answer.evidence],
            segments=_segment_hits(route),
            tokens=s.TokenBillOut(assistants=_bill(bill), master=_bill(answer.bill),
                                  total=bill.total_tokens + answer.bill.total_tokens),
        )

    # -- memories ----------------------------------------------------------------------------
    @app.get("/v1/memories", response_model=s.MemoryList, summary="List a user's memories")
    async def list_memories(self, user_id: s.Identifier, offset: int = Query(0, ge=0, le=10_000_000),
                            limit: int = Query(50, ge=1, le=1000),
                            key: ApiKey | None = Security(API_KEY)) -> s.MemoryList:
        self._authorize(key, user_id)
        topo = await self.topology()
        items, total = await self._actor("tier", topo.index("tier", user_id), "list", user_id, offset, limit)
        return s.MemoryList(user_id=user_id, memories=[_memory(m) for m in items], total=total, offset=offset,
                            limit=limit)

    @app.get("/v1/memories/{memory_id:path}", response_model=s.Memory, summary="One memory",
             responses={404: {"model": s.ErrorBody}})
    async def get_memory(self, memory_id: str, user_id: s.Identifier,
                         key: ApiKey | None = Security(API_KEY)) -> s.Memory:
        self._authorize(key, user_id)
        topo = await self.topology()
        m = await self._actor("tier", topo.index("tier", user_id), "get", user_id, memory_id)
        if m is None:
            raise NotFoundError(f"memory {memory_id!r} not found for user {user_id!r}", param="memory_id")
        return _memory(m)

    @app.delete("/v1/memories/{memory_id:path}", response_model=s.Deleted, summary="Delete one memory",
                responses={404: {"model": s.ErrorBody}})
    async def delete_memory(self, memory_id: str, user_id: s.Identifier,
                            key: ApiKey | None = Security(API_KEY)) -> s.Deleted:
        self._authorize(key, user_id)
        topo = await self.topology()
        n = await self._actor("tier", topo.index("tier", user_id), "delete", user_id, [memory_id])
        forgotten = await asyncio.gather(*(self._actor("assistants", i, "forget", user_id, [memory_id])
                                           for i in range(len(topo.assistants))))
        changed = [seg for f in forgotten for seg in f.segments]
        # NOTE: the router re-indexes the segments that lost the line (BM25, dense chunks; summaries dropped)
        lines = await self._actor("router", topo.index("router", user_id), "forget", user_id, [memory_id], changed)
        if n == 0 and not lines and not any(forgotten):
            raise NotFoundError(f"memory {memory_id!r} not found for user {user_id!r}", param="memory_id")
        groups: dict[int, list] = defaultdict(list)
        for seg in changed if self.config.cluster.summaries else ():
            if seg.lines:  # fresh summaries of what the segments hold now
                groups[topo.assistant_index(user_id, seg.id)].append(seg)
        if groups:
            self._queue_summaries(user_id, groups)
        return s.Deleted(user_id=user_id, memories=n, turns=max(lines, sum(f.lines for f in forgotten)))

    @app.delete("/v1/users/{user_id:path}", response_model=s.Deleted, summary="Delete everything of a user")
    async def delete_user(self, user_id: s.Identifier,
                          key: ApiKey | None = Security(API_KEY)) -> s.Deleted:
        self._authorize(key, user_id, admin=True)
        topo = await self.topology()
        dropped = {kind: await asyncio.gather(*(self._actor(kind, i, "drop_tenant", user_id)
                                                for i in range(len(handles))))
                   for kind, handles in topo.actors.items()}
        tiers, lines = dropped["tier"], dropped["assistants"]
        return s.Deleted(user_id=user_id, memories=int(sum(tiers)), turns=int(sum(lines)))

    @app.get("/v1/users/{user_id:path}/export", summary="Export a user's memory as JSON Lines",
             response_class=Response, responses={200: {"content": {NDJSON: {"schema": {"type": "string"}}}}})
    async def export_user(self, user_id: s.Identifier,
                          key: ApiKey | None = Security(API_KEY)) -> Response:
        """Memories (tiers), episodic segments and the stream's state with their vectors, one JSON object per
        line (``actors/tenant_export.py``); ``POST .../import`` rebuilds the user from it exactly."""
        self._authorize(key, user_id)
        topo = await self.topology()
        # NOTE: the router before the assistants: a segment it lists is either still pending there or already
        # held by an assistant
        memories, stream = await asyncio.gather(
            self._actor("tier", topo.index("tier", user_id), "export_tenant", user_id),
            self._actor("router", topo.index("router", user_id), "export_tenant", user_id))
        held = await asyncio.gather(*(self._actor("assistants", i, "segments", user_id)
                                      for i in range(len(topo.assistants))))
        lines = export_lines(user_id, topo.dim, memories, stream, {seg.id: seg for g in held for seg in g})
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
        self._authorize(key, user_id)
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
        tier, router = topo.index("tier", user_id), topo.index("router", user_id)
        _, total = await self._actor("tier", tier, "list", user_id, 0, 1)
        if total or await self._actor("router", router, "context", user_id):
            raise ConflictError(f"user {user_id!r} already has memories; DELETE /v1/users/{user_id} first or "
                                "import under another user id", param="user_id", code="user_exists")
        stored = await self._actor("tier", tier, "import_tenant", user_id, plan.memories)
        groups: dict[int, list] = defaultdict(list)
        for seg in plan.segments:
            groups[topo.assistant_index(user_id, seg.id)].append(seg)
        await asyncio.gather(*(self._actor("assistants", i, "add", user_id, segs) for i, segs in groups.items()))
        segments = 0
        if plan.stream is not None:
            segments = await self._actor("router", router, "import_tenant", user_id, plan.stream)
        return s.Imported(user_id=user_id, memories=stored, segments=segments)

    # -- operations --------------------------------------------------------------------------
    @app.get("/v1/health", response_model=s.Health, summary="Liveness of every actor")
    async def health(self) -> s.Health:
        topo = await self.topology()
        keys = [(kind, i) for kind, handles in topo.actors.items() for i in range(len(handles))]
        pings = await asyncio.gather(*(self._actor(kind, i, "ping") for kind, i in keys), return_exceptions=True)
        alive = {f"{kind}-{i}": p is True for (kind, i), p in zip(keys, pings, strict=True)}
        return s.Health(status="ok" if all(alive.values()) else "degraded", actors=alive, version=VERSION,
                        background=len(self._summaries) + int(bool(self._summariser and not self._summariser.done())))

    @app.get("/metrics", include_in_schema=False)
    async def metrics(self) -> Response:
        return Response(METRICS.render(), media_type="text/plain; version=0.0.4")


def _memory(m: Any) -> s.Memory:
    return s.Memory(id=m.id, text=m.text, tier=m.tier, importance=m.importance, type=m.metadata.get("type"),
                    created_at=m.created_at, metadata=m.metadata)
