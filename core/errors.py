"""The service's exception tree; ``serve/errors.py`` maps it onto HTTP in one function.

::

    EngramError                      (500, internal)
    ├── InvalidRequestError          (400, invalid_request_error)   bad input the schema could not catch
    ├── UnauthorizedError            (401, authentication_error)    no, unknown or malformed API key
    ├── ForbiddenError               (403, permission_error)        the key is not bound to that user, or not admin
    ├── NotFoundError                (404, not_found_error)         unknown memory, user or segment
    ├── ConflictError                (409, conflict_error)          e.g. the same turn id twice in one batch
    ├── PayloadTooLargeError         (413, request_too_large)       an upload over the API's size limit
    └── UnavailableError             (503, service_unavailable)     an actor or deployment did not answer
"""

from __future__ import annotations


class EngramError(Exception):
    """Base of every error the service raises on purpose."""

    status = 500
    type = "internal_error"

    def __init__(self, message: str, *, param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.message, self.param, self.code = message, param, code


class InvalidRequestError(EngramError):
    status, type = 400, "invalid_request_error"


class UnauthorizedError(EngramError):
    status, type = 401, "authentication_error"


class ForbiddenError(EngramError):
    status, type = 403, "permission_error"


class NotFoundError(EngramError):
    status, type = 404, "not_found_error"


class ConflictError(EngramError):
    status, type = 409, "conflict_error"


class PayloadTooLargeError(EngramError):
    status, type = 413, "request_too_large"


class UnavailableError(EngramError):
    status, type = 503, "service_unavailable"
