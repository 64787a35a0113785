"""Plumbing shared by the ``engram`` command modules (``cluster/cli.py`` and its ``cluster/cli_*.py`` siblings).

NOTE: the command modules import this one, never ``cluster/cli.py``, which imports them.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass

from pydantic import ValidationError

from cluster.client import EngramClient


@dataclass
class _Context:
    connect: Callable[[], EngramClient]


def _fail(message: str, code: int = 1) -> int:
    print(f"error: {message}", file=sys.stderr)
    return code


def _brief(exc: ValidationError) -> str:
    return "; ".join(f"{'.'.join(map(str, e['loc'])) or 'value'}: {e['msg']}" for e in exc.errors())
