"""The LoCoMo systems: engram as the service runs it, and the baselines it is measured against.

- ``engram``: the service's own pipelines in one process (:class:`InProcessService`, ``engram.py``): the write path
  (``pipeline/write_path.py``) fed the conversation as ``engram ingest locomo`` posts it (per session, batches of
  ``DEFAULT_BATCH`` turns), the summariser (``pipeline/summariser.py``) drained before the first question, and the
  read path (``pipeline/read_path.py``) that ``POST /v1/ask`` answers through: route -> assistants -> master.
  Admission is store-all, as in every benchmark of episodic memory.
- ``direct_read`` (``engram.py``): the same ingest and routing; the master reads the routed segments' raw lines
  itself (no assistants), cut to the model's window (best-routed segments first, the open segment last);
- ``rag`` (``rag.py``): the top ``rag_top_k`` turns by dense + BM25 (min-max normalised, equal weights);
- ``full_context`` (``full_context.py``): the conversation's most recent turns that fit the model's window.

All four answer with the same master prompts (``inference/master.py``). Each lives in its own module and names the
config it reads (``config_reads``), so that ``bench.locomo``'s answer cache of a baseline is keyed by its own
sources and settings only: an edit to engram's router keeps the cached answers of ``rag`` and ``full_context``.
"""

from __future__ import annotations

from typing import Any

from bench.systems.common import MASTER_READS, TENANT, Answer, ConfigReads, Engines, answer_of, per_role, turn_evidence
from bench.systems.engram import DirectRead, InProcessService
from bench.systems.full_context import FullContextBaseline
from bench.systems.rag import RagBaseline
from core.config import EngramConfig, Role
from core.encoding import Encoder

__all__ = [
    "MASTER_READS", "SYSTEMS", "SYSTEM_CLASSES", "SYSTEM_ROLES", "TENANT", "Answer", "ConfigReads", "DirectRead",
    "Engines", "FullContextBaseline", "InProcessService", "RagBaseline", "answer_of", "build_system", "per_role",
    "turn_evidence",
]

SYSTEM_CLASSES: dict[str, type] = {
    "engram": InProcessService, "rag": RagBaseline, "full_context": FullContextBaseline, "direct_read": DirectRead,
}
SYSTEMS = tuple(SYSTEM_CLASSES)
# The roles whose engines a system calls, where fewer than all (bench.locomo loads only those). NOTE: kept here,
# not on the classes, so that the answer cache of a baseline (keyed by its module's source) does not move.
SYSTEM_ROLES: dict[str, tuple[Role, ...]] = {"rag": ("master",), "full_context": ("master",)}


def build_system(name: str, config: EngramConfig, *, encoder: Encoder, engine: Engines) -> Any:
    """A fresh system for one conversation (``engine``: one for all roles, or one per role)."""
    cls = SYSTEM_CLASSES.get(name)
    if cls is None:
        raise ValueError(f"unknown system {name!r}; known: {', '.join(SYSTEMS)}")
    return cls(config, encoder=encoder, engine=engine)
