"""Snapshots written before the router and the tiers took vectors still load (``cores.journal.MOVED``)."""

from __future__ import annotations

import pickle

import cores.tenant_episodes
import memory.routing
from cores.journal import loads
from memory.line_index import LineIndex


def _old_pickle(monkeypatch, module, name: str, state: dict) -> bytes:
    """Bytes as an older version wrote them: an object of ``module.name``, a class that is gone now."""
    old = type(name, (), {"__module__": module.__name__, "__qualname__": name})
    monkeypatch.setattr(module, name, old, raising=False)
    obj = old()
    vars(obj).update(state)
    body = pickle.dumps(obj)
    monkeypatch.delattr(module, name)
    return body


def test_a_retired_shim_loads_with_its_state(monkeypatch) -> None:
    body = _old_pickle(monkeypatch, cores.tenant_episodes, "KnownVectors", {"known": {"a line": 1}})
    assert loads(body).known == {"a line": 1}  # TenantEpisodes.restored() takes it from here


def test_a_moved_class_loads_as_its_new_self(monkeypatch) -> None:
    body = _old_pickle(monkeypatch, memory.routing, "_LineIndex", {})
    assert isinstance(loads(body), LineIndex)


def test_anything_else_loads_as_pickle_does() -> None:
    assert loads(pickle.dumps({"k": [1, 2]})) == {"k": [1, 2]}
