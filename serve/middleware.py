"""What every HTTP request passes before an endpoint: the API-key gate and the request metrics.

Every ``/v1`` route but ``/v1/health`` first checks the request's API key (:class:`Authenticate`, a middleware,
before the body is parsed); whether the key may act for the tenant it names is checked by the endpoint
(``serve.auth.permit``). ``/metrics`` and the OpenAPI pages stay open.
"""

from __future__ import annotations

import logging
import time

from fastapi import FastAPI, Request, Security
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from fastapi.security.utils import get_authorization_scheme_param
from starlette.datastructures import Headers, MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from core import timings
from core.errors import EngramError, UnavailableError
from serve.auth import ApiKey, KeyFileError, KeyStore
from serve.errors import engram_error_response
from serve.metrics import METRICS

log = logging.getLogger(__name__)

# NOTE: auto_error=False: a missing key reaches ApiKeyCheck, which answers 401 in the API's error body (and not
# at all when auth.required is false); through Security(BEARER) the OpenAPI spec declares the scheme.
BEARER = HTTPBearer(auto_error=False, scheme_name="ApiKey",
                    description="An API key from `engram keys create` (docs/cluster.md, API keys).")


class ApiKeyCheck:
    """The dependency every /v1 endpoint but health takes: the request's API key (None when ``auth.required``
    is false). ``ApiKeyCheck.store`` is the replica's KeyStore (``MemoryAPI.__init__``; one replica per
    process). Whether the key may act for the user is the endpoint's check (``serve.ingress.authorize``).

    The dependency declares the scheme in the OpenAPI spec; the gate is :class:`Authenticate`, a middleware
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


def _bare_path(scope: Scope) -> str:
    path, root = scope["path"], scope.get("root_path", "")
    return path[len(root):] if root and path.startswith(root) else path  # NOTE: under a route prefix


class Authenticate:
    """The key gate (plain ASGI): a ``/v1`` request but health without a valid key is answered here, 401 in the
    API's error body; a valid key is left in the request's state for :class:`ApiKeyCheck`."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and ApiKeyCheck.store is not None:
            path = _bare_path(scope)
            if path.startswith("/v1/") and path not in OPEN_PATHS:
                scheme, token = get_authorization_scheme_param(Headers(scope=scope).get("authorization"))
                try:
                    key = ApiKeyCheck.check(token if scheme.lower() == "bearer" else None)
                except EngramError as e:
                    await engram_error_response(e)(scope, receive, send)
                    return
                scope.setdefault("state", {})["api_key"] = key
        await self.app(scope, receive, send)


class Observe:
    """Count and time every request by route and status (``/metrics``), and say where its time went in a
    ``Server-Timing`` header (its steps, e.g. ``embed``, ``tier.search``, ``router.route``, and ``app``: the
    request inside this replica until its response starts; the hop from Serve's proxy is what the client sees
    beyond ``app``). Plain ASGI: Starlette's ``BaseHTTPMiddleware`` added a cost per request and layer that the
    search path felt (docs/results/2026-12-03-cluster.md)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = 500  # NOTE: what the client gets when the app raises before it answers

        with timings.collect() as record:
            async def timed_send(message: Message) -> None:
                nonlocal status
                if message["type"] == "http.response.start":
                    status = message["status"]
                    MutableHeaders(scope=message).append(
                        "Server-Timing", timings.header(record, time.perf_counter() - start))
                await send(message)

            try:
                await self.app(scope, receive, timed_send)
            finally:
                route = getattr(scope.get("route"), "path", "unmatched")
                METRICS.requests.labels(route, str(status)).inc()
                METRICS.latency.labels(route).observe(time.perf_counter() - start)


def install(app: FastAPI) -> None:
    """The key gate inside, the metrics outside it (a refused request is counted too).

    NOTE: module-level classes, not closures: Serve pickles the app, and a closure would carry its own copy of
    what it captured (the metrics the replica serves would never see a request)."""
    app.add_middleware(Authenticate)
    app.add_middleware(Observe)  # NOTE: added last = outermost
