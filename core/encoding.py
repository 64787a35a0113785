"""What the read path needs of a text encoder (``serve.embedder.Embedder`` fits; tests pass hashing doubles)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np


class Encoder(Protocol):
    """Texts -> float32 rows of unit length."""

    dim: int

    def encode(self, texts: Sequence[str], *, is_query: bool = False) -> np.ndarray: ...
