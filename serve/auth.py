"""API keys of the HTTP API: made by ``engram keys create``, checked by the ingress on every ``/v1`` request.

A key is ``ek_<key_id>_<secret>``: ``key_id`` is 8 hex characters that name the key in listings and in
``engram keys revoke``; ``secret`` is ``secrets.token_urlsafe(32)`` (256 random bits). The plaintext is shown
once, when the key is made. The keys file keeps the SHA-256 of the whole key, the tenants (``user_id``
values, ``"*"`` for every one) the key may act for, and whether it is an admin key (every tenant, plus
admin operations such as deleting a user)::

    {"version": 1, "keys": [{"key_id": "1f0c9a2b", "name": "ci", "sha256": "<64 hex>", "tenants": ["alice"],
                             "admin": false, "created_at": "2026-12-01T10:00:00+00:00"}]}

:class:`KeyStore` writes that file atomically (temporary file, fsync, rename; mode 0600) and re-reads it when
its mtime, size or inode change, so a key made or revoked by the CLI counts in a running service from its
next request. No Ray, no FastAPI here: the ingress wraps it (``serve/ingress.py: MemoryAPI._authorize``).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import re
import secrets
import threading
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, StringConstraints, TypeAdapter, ValidationError, field_validator

from core.errors import ForbiddenError, UnauthorizedError
from serve.schemas import Identifier

__all__ = ["ApiKey", "CREATE_HINT", "EVERY_TENANT", "KeyFileError", "KeyStore", "sha256_hex"]

EVERY_TENANT = "*"
TOKEN_PATTERN = re.compile(r"^ek_[0-9a-f]{8}_[A-Za-z0-9_-]{43}$")  # token_urlsafe(32): 43 characters
CREATE_HINT = "`engram keys create --tenant USER` (or `engram keys create --admin`)"
_USER_ID = TypeAdapter(Identifier)


def sha256_hex(token: str) -> str:
    """What the keys file stores of a key: ``sha256_hex("abc")[:8] == "ba7816bf"``.

    NOTE: a plain SHA-256, not a slow password hash (bcrypt, scrypt): the secret is 256 random bits, so a
    leaked hash leaves nothing to guess, and a fast hash keeps the check per request to one dict lookup.
    """
    return hashlib.sha256(token.encode()).hexdigest()


def _tenant(value: str) -> str:
    """A user id as the API accepts it (``serve.schemas.Identifier``), or ``"*"``."""
    if value == EVERY_TENANT:
        return value
    try:
        return _USER_ID.validate_python(value)
    except ValidationError:
        raise ValueError(f"tenant {value!r} is not a valid user id (1-128 characters of A-Z a-z 0-9 . _ : @ / + -) "
                         f"nor {EVERY_TENANT!r}") from None


class ApiKey(BaseModel):
    """One key as the keys file stores it: never its plaintext."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    key_id: Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{8}$")]
    name: Annotated[str, StringConstraints(max_length=200)] = ""
    sha256: Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{64}$")]
    tenants: list[str] = []
    admin: bool = False
    created_at: str

    @field_validator("tenants")
    @classmethod
    def _valid_tenants(cls, tenants: list[str]) -> list[str]:
        return [_tenant(t) for t in tenants]

    def allows(self, tenant: str) -> bool:
        """Whether the key may act for ``tenant``: an admin key or a ``"*"`` key for every one."""
        return self.admin or EVERY_TENANT in self.tenants or tenant in self.tenants


class _KeyFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    version: Literal[1]
    keys: list[ApiKey]


class KeyFileError(ValueError):
    """The keys file exists but is not one (bad JSON, unknown fields, unreadable); the message names it."""


class KeyStore:
    """The keys in one JSON file. Reads re-load the file when it changed; writes replace it atomically under an
    exclusive lock (``<file>.lock``), so two ``engram keys create`` at once keep both keys."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path).expanduser()
        self._keys: list[ApiKey] = []
        self._by_hash: dict[str, ApiKey] = {}
        self._stamp: tuple[int, int, int] | None | Literal["unread"] = "unread"
        self._lock = threading.Lock()

    # -- reading ---------------------------------------------------------------------------
    def _read(self) -> list[ApiKey]:
        """The file's keys; a missing file holds none."""
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise KeyFileError(f"API keys file {self.path} cannot be read: {exc.strerror}") from None
        try:
            return _KeyFile.model_validate_json(data).keys
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(map(str, first.get("loc", ()))) or "file"
            raise KeyFileError(
                f"API keys file {self.path} is corrupt ({where}: {first['msg']}); restore it, or move it away and "
                f"make new keys with {CREATE_HINT}"
            ) from None

    def _refresh(self) -> None:
        """Re-read the file when its (mtime, size, inode) changed: one stat per call otherwise.

        NOTE: the inode counts because every write renames a new file into place; a corrupt file raises on
        every call until it is fixed (the service fails closed rather than keep keys that may be revoked)."""
        try:
            st = self.path.stat()
            stamp: tuple[int, int, int] | None = (st.st_mtime_ns, st.st_size, st.st_ino)
        except FileNotFoundError:
            stamp = None
        with self._lock:
            if stamp == self._stamp:
                return
            keys = self._read() if stamp is not None else []
            self._keys, self._by_hash, self._stamp = keys, {k.sha256: k for k in keys}, stamp

    def list(self) -> list[ApiKey]:
        """Every key, oldest first (no secrets: the file holds none)."""
        self._refresh()
        return [*self._keys]

    # -- checking --------------------------------------------------------------------------
    def authenticate(self, token: str | None) -> ApiKey:
        """The key whose plaintext is ``token``; :class:`UnauthorizedError` if there is none, it is malformed,
        unknown or revoked."""
        if not token:
            raise UnauthorizedError(f"no API key: send `Authorization: Bearer <key>`; make a key with {CREATE_HINT}",
                                    code="missing_api_key")
        if not TOKEN_PATTERN.match(token):
            raise UnauthorizedError("malformed API key: expected ek_<key id>_<secret> as printed by `engram keys "
                                    "create`", code="invalid_api_key")
        self._refresh()
        if not self._by_hash:
            raise UnauthorizedError(f"this service has no API keys yet; make one with {CREATE_HINT}",
                                    code="no_api_keys")
        # NOTE: looked up by the SHA-256 of what was sent; no plaintext is kept, and the lookup's timing tells
        # nothing about a stored key (the caller picks the input, not its hash).
        key = self._by_hash.get(sha256_hex(token))
        if key is None:
            raise UnauthorizedError("unknown or revoked API key", code="invalid_api_key")
        return key

    def authorize(self, token: str | None, tenant: str | None, admin: bool = False) -> ApiKey:
        """The key, if it may act for ``tenant`` (None: no particular one) and, with ``admin``, is an admin key;
        :class:`UnauthorizedError` (401) or :class:`ForbiddenError` (403) otherwise."""
        return permit(self.authenticate(token), tenant, admin)

    # -- writing ---------------------------------------------------------------------------
    def create(self, tenants: Iterable[str], admin: bool = False, name: str = "") -> tuple[str, ApiKey]:
        """A new key for ``tenants`` (user ids, ``"*"`` for every one), or an admin key: ``(plaintext, record)``.
        The plaintext lives only in the return value; the file gets its SHA-256."""
        bound = list(dict.fromkeys(_tenant(t) for t in tenants))
        if not bound and not admin:
            raise ValueError(f"a key needs a tenant (a user id, or {EVERY_TENANT!r} for every user) or admin")
        with self._exclusive():
            keys = self._read()  # NOTE: a corrupt file raises here: never overwrite what could not be read
            taken = {k.key_id for k in keys}
            key_id = secrets.token_hex(4)
            while key_id in taken:
                key_id = secrets.token_hex(4)
            plaintext = f"ek_{key_id}_{secrets.token_urlsafe(32)}"
            record = ApiKey(key_id=key_id, name=name, sha256=sha256_hex(plaintext), tenants=bound, admin=admin,
                            created_at=datetime.now(UTC).isoformat(timespec="seconds"))
            self._write([*keys, record])
        return plaintext, record

    def revoke(self, key_id: str) -> bool:
        """Remove the key ``key_id``; False if there is none."""
        with self._exclusive():
            keys = self._read()
            kept = [k for k in keys if k.key_id != key_id]
            if len(kept) == len(keys):
                return False
            self._write(kept)
        return True

    @contextlib.contextmanager
    def _exclusive(self) -> Iterator[None]:
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(self.path.with_name(self.path.name + ".lock"), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # releases the lock

    def _write(self, keys: list[ApiKey]) -> None:
        """Replace the file: a reader sees the old one or the new one, never half of one; it survives a crash."""
        body = _KeyFile(version=1, keys=keys).model_dump_json(indent=2) + "\n"
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        try:
            with os.fdopen(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w", encoding="utf-8") as f:
                os.fchmod(f.fileno(), 0o600)  # NOTE: a left-over temporary file would keep its old mode
                f.write(body)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        folder = os.open(self.path.parent, os.O_RDONLY)
        try:
            os.fsync(folder)  # the rename itself
        finally:
            os.close(folder)


def permit(key: ApiKey, tenant: str | None, admin: bool = False) -> ApiKey:
    """``key`` if it may act for ``tenant`` (None: no particular one) and, with ``admin``, is an admin key;
    :class:`ForbiddenError` (403) otherwise."""
    if admin and not key.admin:
        raise ForbiddenError(f"API key {key.key_id} is not an admin key, which this operation needs "
                             "(`engram keys create --admin`)", code="admin_required")
    if tenant is not None and not key.allows(tenant):
        raise ForbiddenError(f"API key {key.key_id} is not bound to user {tenant!r}", param="user_id",
                             code="tenant_not_allowed")
    return key
