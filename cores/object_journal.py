"""Write-ahead log and snapshots in an object store (``s3://``, ``gs://``, ``file://`` ...: any fsspec URL).

The same contract as :class:`cores.journal.Journal` (a directory on a disk), laid out for a store that has
no append and no rename, only whole-object writes::

    <prefix>/gen-000003               marker: generation 3 is complete (its snapshot, if any, is written)
    <prefix>/snapshot-000003.pkl      the core's whole state when generation 3 began (absent for generation 0)
    <prefix>/log-000003/000000000007  record 7 of generation 3: ``<length: u32><crc32: u32><pickle>``

:meth:`ObjectJournal.append` writes one object per record and returns when the store has acknowledged it: on S3
that is when the PUT returns — S3 stores an object durably before it answers and a PUT is all or nothing, so a
write that got its answer is kept and one cut by a crash leaves nothing. (That is the promise S3 gives; it
replaces the local journal's fsync. A store that acknowledges before its data is durable gives less.)
:meth:`ObjectJournal.snapshot` writes the next generation's snapshot, then its marker, then deletes the older
generation: a crash at any point leaves one complete generation to recover from. :meth:`ObjectJournal.replay`
reads a generation's records in order and stops at a corrupt one, which is deleted with everything after it.

One PUT per write: on S3 that is a network round trip per acknowledged write, far slower than the local journal's
fsync; snapshots bound how many records a restart reads.
"""

from __future__ import annotations

import pickle
import re
import threading
import zlib
from collections.abc import Iterator
from typing import Any

import fsspec

from cores.journal import HEADER, loads

_MARK = re.compile(r"^gen-(\d{6})$")


def is_url(location: object) -> bool:
    """A storage location that names a protocol (``s3://bucket/x``), not a local path."""
    return "://" in str(location)


def filesystem(url: str, storage_options: dict[str, Any] | None = None) -> tuple[fsspec.AbstractFileSystem, str]:
    """The fsspec file system of ``url`` and the path inside it (no trailing slash)."""
    fs, path = fsspec.core.url_to_fs(url, **(storage_options or {}))
    return fs, path.rstrip("/")


class ObjectJournal:
    def __init__(self, url: str, storage_options: dict[str, Any] | None = None) -> None:
        self.url = url
        self.fs, self.prefix = filesystem(url, storage_options)
        # NOTE: folders are no-ops on object stores; under file:// an object needs its folder
        self.fs.makedirs(self.prefix, exist_ok=True)
        gens = self._generations()
        self.generation = max(gens) if gens else 0
        if not gens:
            self.fs.pipe_file(self._mark(0), b"")
        self.fs.makedirs(self._log(self.generation), exist_ok=True)
        self.records = 0  # records in the current log
        self._next = 0  # number of the next record object
        self._lock = threading.Lock()  # NOTE: threaded actors (max_concurrency > 1) append concurrently

    # -- objects ---------------------------------------------------------------------------
    def _names(self, path: str) -> list[str]:
        self.fs.invalidate_cache(path)  # NOTE: s3fs caches listings; a journal lists what it just wrote
        try:
            return sorted(p.rstrip("/").rsplit("/", 1)[-1] for p in self.fs.ls(path, detail=False))
        except FileNotFoundError:
            return []

    def _generations(self) -> list[int]:
        """Generations whose marker exists (a snapshot without its marker is an unfinished rotation)."""
        return sorted(int(m.group(1)) for n in self._names(self.prefix) if (m := _MARK.match(n)))

    def _mark(self, gen: int) -> str:
        return f"{self.prefix}/gen-{gen:06d}"

    def _snapshot(self, gen: int) -> str:
        return f"{self.prefix}/snapshot-{gen:06d}.pkl"

    def _log(self, gen: int) -> str:
        return f"{self.prefix}/log-{gen:06d}"

    # -- recovery --------------------------------------------------------------------------
    def load_snapshot(self) -> Any | None:
        path = self._snapshot(self.generation)
        if not self.fs.exists(path):
            return None
        return loads(self.fs.cat_file(path))

    def replay(self) -> Iterator[Any]:
        """Every good record of the current generation, in order; a corrupt one and those after it are deleted."""
        names = [n for n in self._names(self._log(self.generation)) if n.isdigit()]
        for i, name in enumerate(names):
            blob = self.fs.cat_file(f"{self._log(self.generation)}/{name}")
            length, crc = HEADER.unpack(blob[: HEADER.size]) if len(blob) >= HEADER.size else (-1, 0)
            body = blob[HEADER.size :]
            if len(body) != length or zlib.crc32(body) != crc:
                self.fs.rm([f"{self._log(self.generation)}/{n}" for n in names[i:]])
                break
            self.records += 1
            self._next = int(name) + 1
            yield loads(body)

    # -- writes ----------------------------------------------------------------------------
    def append(self, record: Any) -> None:
        """Write one record; returns when the store has acknowledged the object."""
        body = pickle.dumps(record, protocol=pickle.HIGHEST_PROTOCOL)
        with self._lock:
            self.fs.pipe_file(f"{self._log(self.generation)}/{self._next:012d}",
                              HEADER.pack(len(body), zlib.crc32(body)) + body)
            self._next += 1
            self.records += 1

    def snapshot(self, state: Any) -> None:
        """Start the next generation from ``state`` (which must include every record logged so far)."""
        with self._lock:
            nxt, old = self.generation + 1, self.generation
            self.fs.pipe_file(self._snapshot(nxt), pickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL))
            self.fs.makedirs(self._log(nxt), exist_ok=True)
            self.fs.pipe_file(self._mark(nxt), b"")
            # NOTE: the new generation is complete (snapshot + marker) before the old one goes.
            self.generation, self.records, self._next = nxt, 0, 0
            stale = [p for p in (self._mark(old), self._snapshot(old)) if self.fs.exists(p)]
            if self.fs.exists(self._log(old)):
                stale += [f"{self._log(old)}/{n}" for n in self._names(self._log(old))]
            if stale:
                self.fs.rm(stale)
            if self.fs.exists(self._log(old)):  # NOTE: a folder under file://; nothing on an object store
                self.fs.rm(self._log(old), recursive=True)

    def close(self) -> None:
        pass

    def files(self) -> list[str]:
        """Every object of this journal (markers, snapshots, records)."""
        return sorted(str(p) for p in self.fs.find(self.prefix))
