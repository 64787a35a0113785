"""The one text-encoder protocol, for the callers that embed (``serve.embedder.Embedder`` fits; tests pass hashing
doubles). ``memory/`` and ``cores/`` never embed: their classes take the vectors such a caller computed."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np


class Encoder(Protocol):
    """Texts -> float32 rows of unit length."""

    dim: int

    def encode(self, texts: Sequence[str], *, is_query: bool = False) -> np.ndarray: ...
