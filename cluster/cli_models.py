"""``engram models fetch NAME | list``: the registry's models in the local store (``cluster/model_fetch.py``)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from cluster.cli_common import _Context, _fail
from core.model_store import ModelFileError


def _cache_dir(args: argparse.Namespace) -> Path:
    if args.cache_dir is not None:
        return args.cache_dir
    from core.config import load_config

    return load_config().paths.cache_dir


def _cmd_models_fetch(args: argparse.Namespace, _: _Context) -> int:
    from cluster.model_fetch import fetch

    try:
        path = fetch(args.name, _cache_dir(args), convert=not args.no_convert)
    except (ValueError, ModelFileError, OSError) as e:
        return _fail(str(e))
    print(f"{args.name}: ready at {path}")
    return 0


def _cmd_models_list(args: argparse.Namespace, _: _Context) -> int:
    from cluster.model_fetch import describe

    rows = describe(_cache_dir(args))
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    cols = ("name", "title", "size", "architecture", "licence", "state")
    widths = {c: max(len(c), *(len(r[c]) for r in rows)) for c in cols}
    for r in [dict(zip(cols, cols, strict=True)), *rows]:
        print("  ".join(r[c].ljust(widths[c]) for c in cols).rstrip())
    return 0
