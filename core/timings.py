"""Durations of a request's steps, for the ``Server-Timing`` response header.

:func:`collect` starts a record for the current request (the ingress middleware does it per request); every
:func:`core.tracing.span` opened while it is current adds its name and wall time, whether tracing is on or not.
Tasks started inside (``asyncio.gather``) copy the context and so write into the same record. Outside a record
nothing is kept.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

_record: ContextVar[list[tuple[str, float]] | None] = ContextVar("engram_timings", default=None)
_NOT_TOKEN = re.compile(r"[^A-Za-z0-9!#$%&'*+.^_`|~-]")


@contextmanager
def collect() -> Iterator[list[tuple[str, float]]]:
    """A fresh record of (step, seconds) for the code run inside, in the order the steps finished."""
    record: list[tuple[str, float]] = []
    token = _record.set(record)
    try:
        yield record
    finally:
        _record.reset(token)


def add(name: str, seconds: float) -> None:
    """Note a finished step in the current record (none: nothing happens)."""
    record = _record.get()
    if record is not None:
        record.append((name, seconds))


def header(record: list[tuple[str, float]], total: float | None = None) -> str:
    """``Server-Timing`` value (RFC: ``name;dur=milliseconds``, comma separated): the steps, then ``app``, the
    whole request inside the replica, when ``total`` is given. Names are made tokens; a step that ran more than
    once (one call per assistant core) appears once per run."""
    parts = [f"{_NOT_TOKEN.sub('_', name)};dur={seconds * 1000:.2f}" for name, seconds in record]
    if total is not None:
        parts.append(f"app;dur={total * 1000:.2f}")
    return ", ".join(parts)


def parse(value: str) -> dict[str, list[float]]:
    """A ``Server-Timing`` value back to {name: [milliseconds, ...]} (for benchmarks and tests)."""
    found: dict[str, list[float]] = {}
    for part in filter(None, (p.strip() for p in value.split(","))):
        name, *params = (x.strip() for x in part.split(";"))
        dur = next((float(p[4:]) for p in params if p.startswith("dur=")), None)
        if dur is not None:
            found.setdefault(name, []).append(dur)
    return found
