"""Where Engram keeps what it makes at run time: converted models, trained weights, embedding and answer caches,
API keys. One place decides it: ``$XDG_CACHE_HOME/engram``, else ``~/.cache/engram``."""

from __future__ import annotations

import os
from pathlib import Path


def default_cache_dir() -> Path:
    """The engram cache root (``paths.cache_dir``'s default).

    >>> default_cache_dir().name
    'engram'
    """
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "engram"
