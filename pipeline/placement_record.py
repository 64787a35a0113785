"""The placement a storage directory was written under, kept beside its journals: ``<storage>/placement.json``.

A tenant's state lives in the journals of the actors its placement names (``pipeline.shards.Placement``). A
service started on the same directory with another ``cluster.tenant_hash`` or other shard counts would look
for each tenant on other actors and find it empty: its memories would seem lost although every byte is on
disk. So the first start records ``{"tenant_hash", "counts"}`` and every later start must match it, or is
refused with the settings that do. A directory with actor state but no record was written by a version
before the record, which placed tenants by ``modulo``: it opens under ``modulo`` with the shard counts its
actor folders show (and is recorded then), and is refused under any other setting.

Moving tenants between shards (to change the scheme or the counts) is not implemented: the refusal says so.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from core.files import replaced_atomically
from cores.object_journal import filesystem, is_url
from pipeline.shards import SHARD_FIELDS, Placement

RECORD = "placement.json"
LEGACY_SCHEME = "modulo"  # NOTE: how versions before the record placed tenants (tenant_hash did not exist)
_ACTOR_DIR = re.compile(r"^(tier|router|assistants)-(\d+)$")


class StoredPlacementError(RuntimeError):
    """The configured placement differs from the one the storage directory's state was written under."""


def _settings(scheme: str, counts: dict[str, int]) -> str:
    parts = [f"cluster.tenant_hash={scheme}"] + [f"cluster.{SHARD_FIELDS[k]}={counts[k]}" for k in sorted(counts)]
    return ", ".join(parts)


def legacy_counts(root: Path) -> dict[str, int]:
    """Shard counts shown by the actor folders (``tier-0``, ``router-1``, ...) under ``root``."""
    counts: dict[str, int] = {}
    for entry in root.iterdir() if root.is_dir() else ():
        match = _ACTOR_DIR.match(entry.name)
        if match and entry.is_dir():  # NOTE: an actor's journal makes its folder when the actor starts
            kind, index = match.group(1), int(match.group(2))
            counts[kind] = max(counts.get(kind, 0), index + 1)
    return counts


def _compare(root: str, stored: dict[str, Any], wanted: dict[str, Any]) -> None:
    if stored != wanted:
        raise StoredPlacementError(
            f"{root} holds state placed by {_settings(stored['tenant_hash'], stored['counts'])}; this service "
            f"is configured with {_settings(wanted['tenant_hash'], wanted['counts'])}. Tenants would be looked "
            "up on actors that do not hold their state. Start with the stored settings (moving tenants "
            "between shards is not implemented), or use another storage_dir / namespace."
        )


def check_placement(root: Path | str, placement: Placement,
                    storage_options: dict[str, Any] | None = None) -> dict[str, Any]:
    """Record ``placement`` under ``root`` on first use; raise ``StoredPlacementError`` if it differs from the
    recorded one (or, for a directory from before the record, from what its actor folders show). ``root`` may be
    an object store URL (the record is one object there; no store predates the record)."""
    wanted = {"tenant_hash": placement.scheme, "counts": dict(sorted(placement.counts.items()))}
    if is_url(root):
        fs, prefix = filesystem(str(root), storage_options)
        key = f"{prefix}/{RECORD}"
        if not fs.exists(key):
            fs.makedirs(prefix, exist_ok=True)  # NOTE: a no-op on object stores
            fs.pipe_file(key, (json.dumps(wanted, indent=1) + "\n").encode())
            return wanted
        _compare(str(root), json.loads(fs.cat_file(key)), wanted)
        return wanted
    root = Path(root)
    path = root / RECORD
    if path.exists():
        stored = json.loads(path.read_text())
        _compare(str(root), stored, wanted)
        return stored
    found = legacy_counts(root)
    if found:
        legacy = {"tenant_hash": LEGACY_SCHEME, "counts": {**wanted["counts"], **found}}
        if legacy != wanted:
            raise StoredPlacementError(
                f"{root} holds actor state written before placement was recorded, when tenants were placed by "
                f"{LEGACY_SCHEME}; its actor folders show {_settings(LEGACY_SCHEME, legacy['counts'])}. This "
                f"service is configured with {_settings(wanted['tenant_hash'], wanted['counts'])}: start it "
                "with the former settings to keep these tenants' memories."
            )
    root.mkdir(parents=True, exist_ok=True)
    with replaced_atomically(path) as tmp:
        tmp.write_text(json.dumps(wanted, indent=1) + "\n")
    return wanted
