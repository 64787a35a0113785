"""Write-ahead log and snapshots for a stateful core, in one directory.

Layout (``N`` = generation)::

    snapshot-000003.pkl   the core's whole state when generation 3 began (absent for generation 0)
    log-000003.wal        every mutation since, one framed record each

A record is ``<length: u32><crc32: u32><pickle>``; :meth:`Journal.append` writes, flushes and fsyncs
it before returning, so a caller acknowledges a write only once it is on disk. :meth:`Journal.snapshot`
writes the next generation's snapshot to a temporary file, fsyncs and renames it, starts its empty log,
then deletes the older generation — a crash at any point leaves one complete generation to recover from.
:meth:`Journal.replay` stops at a torn or corrupt tail (a write cut by a crash: never acknowledged) and
cuts it off, so later appends follow the last good record.
"""

from __future__ import annotations

import io
import os
import pickle
import re
import struct
import threading
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

HEADER = struct.Struct("<II")
_GEN = re.compile(r"^(snapshot|log)-(\d{6})\.(pkl|wal)$")


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class _Retired:
    """Stands in for a class an older snapshot names and the code no longer has; the core that owns it reads
    its state in ``restored()`` (e.g. ``TenantEpisodes.restored``)."""


# (module, name) an older snapshot or record refers to -> what reads it now
MOVED: dict[tuple[str, str], tuple[str, str] | None] = {
    ("cores.tenant_episodes", "KnownVectors"): None,  # the router's vector lookup: now the stream's own ``known``
    ("cores.tenant_tiers", "VectorsOnly"): None,  # the tiers' refusing encoder: the tiers now take vectors
    ("memory.routing", "_LineIndex"): ("memory.line_index", "LineIndex"),
}


class _Unpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in MOVED:
            moved = MOVED[(module, name)]
            if moved is None:
                return _Retired
            module, name = moved
        return super().find_class(module, name)


def loads(body: bytes) -> Any:
    """``pickle.loads`` that reads what older versions of the cores wrote (:data:`MOVED`)."""
    return _Unpickler(io.BytesIO(body)).load()


class Journal:
    def __init__(self, directory: str | Path, *, fsync: bool = True) -> None:
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.fsync = fsync
        gens = self._generations()
        self.generation = max(gens) if gens else 0
        self.records = 0  # records in the current log
        self._log: BinaryIO | None = None
        self._lock = threading.Lock()  # NOTE: threaded actors (max_concurrency > 1) append concurrently

    # -- files -----------------------------------------------------------------------------
    def _generations(self) -> list[int]:
        """Generations whose log exists (a snapshot without its log is an unfinished rotation)."""
        return sorted(int(m.group(2)) for p in self.dir.iterdir() if (m := _GEN.match(p.name)) and m.group(1) == "log")

    def _snapshot_path(self, gen: int) -> Path:
        return self.dir / f"snapshot-{gen:06d}.pkl"

    def _log_path(self, gen: int) -> Path:
        return self.dir / f"log-{gen:06d}.wal"

    # -- recovery --------------------------------------------------------------------------
    def load_snapshot(self) -> Any | None:
        """The state the current generation started from (None: start empty)."""
        path = self._snapshot_path(self.generation)
        if not path.is_file():
            return None
        return loads(path.read_bytes())

    def replay(self) -> Iterator[Any]:
        """Every complete record of the current log, in order; a torn tail is cut off."""
        path = self._log_path(self.generation)
        if not path.is_file():
            return
        good = 0
        with path.open("rb") as f:
            while True:
                header = f.read(HEADER.size)
                if len(header) < HEADER.size:
                    break
                length, crc = HEADER.unpack(header)
                body = f.read(length)
                if len(body) < length or zlib.crc32(body) != crc:
                    break
                good = f.tell()
                self.records += 1
                yield loads(body)
        if good < path.stat().st_size:
            with path.open("r+b") as f:
                f.truncate(good)

    # -- writes ----------------------------------------------------------------------------
    def append(self, record: Any) -> None:
        """Write one record durably (flushed and fsynced before this returns)."""
        body = pickle.dumps(record, protocol=pickle.HIGHEST_PROTOCOL)
        with self._lock:
            if self._log is None:
                self._log = self._log_path(self.generation).open("ab")
            self._log.write(HEADER.pack(len(body), zlib.crc32(body)) + body)
            self._log.flush()
            if self.fsync:
                os.fsync(self._log.fileno())
            self.records += 1

    def snapshot(self, state: Any) -> None:
        """Start the next generation from ``state`` (which must include every record logged so far)."""
        with self._lock:
            self._rotate(state)

    def _rotate(self, state: Any) -> None:
        nxt = self.generation + 1
        tmp = self.dir / f".snapshot-{nxt:06d}.tmp"
        with tmp.open("wb") as f:
            pickle.dump(state, f, protocol=pickle.HIGHEST_PROTOCOL)
            f.flush()
            if self.fsync:
                os.fsync(f.fileno())
        tmp.replace(self._snapshot_path(nxt))
        self._log_path(nxt).touch()
        if self.fsync:
            _fsync_dir(self.dir)
        # NOTE: the new generation is complete (snapshot + log) before the old one goes.
        old = self.generation
        self.close()
        self.generation, self.records = nxt, 0
        for path in (self._snapshot_path(old), self._log_path(old)):
            path.unlink(missing_ok=True)

    def close(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None

    def __del__(self) -> None:
        self.close()

    def files(self) -> list[Path]:
        return sorted(p for p in self.dir.iterdir() if p.is_file())
