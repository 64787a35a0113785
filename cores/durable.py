"""Durable cores: a core class whose mutations are journaled, restored when its process starts again.

``durable(TenantTiers, mutations=("add", "delete"), compacting=("drop_tenant",))`` returns a subclass
whose constructor takes ``journal_dir=`` (None: memory only, as before). Each listed mutation runs, then
its call ``(name, args, kwargs)`` is appended to the write-ahead log (flushed + fsynced) before it
returns — so a caller that got an answer has the write on disk. ``journal_dir`` may also be an fsspec URL
(``s3://bucket/prefix``, with ``storage_options`` for the store): then each record is an object, acknowledged
when the store has it (``cores/object_journal.py``). Every ``snapshot_every`` records the
core's tenant data (its ``durable_state`` attribute) becomes the next snapshot and the log starts over.
A *compacting* mutation (deleting a user) snapshots at once, so the removed data leaves the log too.
A mutation named in ``unchanged_when_falsy`` that returns a falsy value (0 lines forgotten, a summary for
a segment that is gone) changed nothing and is not logged: a call arriving after a user was deleted
leaves neither its id nor its text in the log.

Ray reruns ``__init__`` when it restarts an actor: the constructor loads the latest snapshot and replays
the log through the undecorated methods. Reads that update usage statistics (a tier search touches
its hits) are not journaled: after a restart those counters are the snapshot's.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from cores.journal import Journal
from cores.object_journal import ObjectJournal, is_url

T = TypeVar("T")


def open_journal(location: str | Path, storage_options: dict[str, Any] | None = None) -> Journal | ObjectJournal:
    """A journal in a local directory, or under an fsspec URL (``s3://bucket/prefix``: ``cores/object_journal.py``)."""
    return ObjectJournal(str(location), storage_options) if is_url(location) else Journal(location)


def durable(cls: type[T], mutations: tuple[str, ...], compacting: tuple[str, ...] = (),
            unchanged_when_falsy: tuple[str, ...] = ()) -> type[T]:
    state_attr: str = cls.durable_state  # type: ignore[attr-defined]

    class Durable(cls):  # type: ignore[misc, valid-type]
        def __init__(self, *args: Any, journal_dir: str | Path | None = None, snapshot_every: int = 10_000,
                     storage_options: dict[str, Any] | None = None, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self._journal: Journal | ObjectJournal | None = None
            self._snapshot_every = snapshot_every
            self.recovered = 0  # log records replayed at start-up
            if journal_dir is not None:
                journal = open_journal(journal_dir, storage_options)
                state = journal.load_snapshot()
                if state is not None:
                    setattr(self, state_attr, state)
                    self.restored()
                for name, a, kw in journal.replay():
                    getattr(cls, name)(self, *a, **kw)  # NOTE: the undecorated method: replay logs nothing
                    self.recovered += 1
                self._journal = journal

        def restored(self) -> None:
            """Called after a snapshot is loaded: the core re-attaches what a snapshot leaves out."""
            hook = getattr(super(), "restored", None)
            if hook is not None:
                hook()

        def snapshot(self) -> None:
            """Write the tenant data as the next snapshot now (and start an empty log)."""
            if self._journal is not None:
                self._journal.snapshot(getattr(self, state_attr))

        def journal_files(self) -> list[str]:
            return [] if self._journal is None else [str(p) for p in self._journal.files()]

        def _logged(self, name: str, args: tuple, kwargs: dict) -> None:
            if self._journal is None:
                return
            if name in compacting:
                self.snapshot()
                return
            self._journal.append((name, args, kwargs))
            if self._journal.records >= self._snapshot_every:
                self.snapshot()

    def wrap(name: str, method: Callable) -> Callable:
        @functools.wraps(method)
        def logged(self: Any, *args: Any, **kwargs: Any) -> Any:
            out = method(self, *args, **kwargs)
            if out or name not in unchanged_when_falsy:
                self._logged(name, args, kwargs)
            return out

        return logged

    for name in (*mutations, *compacting):
        setattr(Durable, name, wrap(name, getattr(cls, name)))
    Durable.__name__ = Durable.__qualname__ = f"Durable{cls.__name__}"
    Durable.__module__ = __name__
    return Durable
