"""Entity extraction by configurable regex patterns, and interning of entities to small ints.

>>> EntityExtractor([r"Subsystem-\\d+"])("at Subsystem-7 and Subsystem-7")
('subsystem-7',)
"""

from __future__ import annotations

import re
from collections.abc import Iterable

import numpy as np


class EntityExtractor:
    """Lowercased, de-duplicated, sorted regex matches (sorted so runs reproduce)."""

    def __init__(self, patterns: Iterable[str]) -> None:
        self.patterns = [re.compile(p) for p in patterns]

    def __call__(self, text: str) -> tuple[str, ...]:
        found = {m.group(0).lower() for p in self.patterns for m in p.finditer(text)}
        return tuple(sorted(found))


class EntityVocab:
    """Maps entity strings to dense int ids shared by every tier of one memory."""

    def __init__(self) -> None:
        self._ids: dict[str, int] = {}

    def intern(self, entities: Iterable[str]) -> np.ndarray:
        ids = [self._ids.setdefault(e, len(self._ids)) for e in entities]
        return np.asarray(ids, dtype=np.int64)

    def lookup(self, entities: Iterable[str]) -> np.ndarray:
        """Ids of known entities; an unknown entity gets -2, which matches no stored item."""
        return np.asarray([self._ids.get(e, -2) for e in entities], dtype=np.int64)
