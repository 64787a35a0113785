"""Every error leaves the API as ``{"error": {"message", "type", "param", "code"}}`` (ErrorBody).

:func:`install_error_handlers` maps, in one place: request-validation errors -> 422, the service's
:class:`~core.errors.EngramError` tree -> its own status, HTTP errors (unknown route, wrong method)
-> their status, and anything unexpected -> 500 without internals in the message. A 401 carries
``WWW-Authenticate: Bearer`` (RFC 6750), telling the client which credentials the API takes.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from core.errors import EngramError

log = logging.getLogger(__name__)

HTTP_TYPES = {404: "not_found_error", 405: "method_not_allowed", 413: "request_too_large", 415: "unsupported_media"}


def error_response(status: int, message: str, type_: str, param: str | None = None,
                   code: str | None = None, headers: Mapping[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"error": {"message": message, "type": type_, "param": param, "code": code}},
                        status_code=status, headers=headers)


def engram_error_response(exc: EngramError) -> JSONResponse:
    headers = {"WWW-Authenticate": "Bearer"} if exc.status == 401 else None
    return error_response(exc.status, exc.message, exc.type, exc.param, exc.code, headers)


def validation_message(exc: RequestValidationError) -> tuple[str, str | None]:
    """(message, param) of the first validation error, e.g. ('turns.0.text: String should have at most
    8000 characters', 'turns.0.text'); ``body`` / ``query`` prefixes are dropped."""
    errors = exc.errors()
    if not errors:
        return "invalid request", None
    first = errors[0]
    loc = [str(p) for p in first.get("loc", ())]
    if loc and loc[0] in ("body", "query", "path", "header"):  # where it was, not which field
        loc = loc[1:]
    param = ".".join(loc) or None
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return (f"{param}: {first.get('msg')}" if param else str(first.get("msg"))) + more, param


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        message, param = validation_message(exc)
        return error_response(422, message, "invalid_request_error", param, "validation_error")

    @app.exception_handler(EngramError)
    async def _engram(request: Request, exc: EngramError) -> JSONResponse:
        return engram_error_response(exc)

    @app.exception_handler(HTTPException)
    async def _http(request: Request, exc: HTTPException) -> JSONResponse:
        return error_response(exc.status_code, str(exc.detail), HTTP_TYPES.get(exc.status_code, "http_error"))

    @app.exception_handler(Exception)
    async def _internal(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        return error_response(500, f"internal error ({type(exc).__name__})", "internal_error")
