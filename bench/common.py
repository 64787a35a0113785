"""Shared pieces of the benchmarks: cached fact embeddings, timing summaries, result files, JSON output, API keys."""

from __future__ import annotations

import json
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from inference.question_kind import FACT, INFERENCE, LIST, TEMPORAL, QuestionKind
from serve.embedder import Embedder

logger = logging.getLogger(__name__)


# LoCoMo's categories as the service's question kinds: 1 multi-hop -> list, 2 temporal, 3 open-domain -> inference,
# 4 single-hop -> fact; 5 (a false premise) is no kind: it is asked without a hint
LOCOMO_KINDS: dict[int, QuestionKind] = {1: LIST, 2: TEMPORAL, 3: INFERENCE, 4: FACT}


def locomo_kind(category: int) -> QuestionKind | None:
    """The kind hint a LoCoMo question is asked with in ``--category gold`` mode (``None`` for category 5).

    >>> locomo_kind(2), locomo_kind(5)
    (<QuestionKind.TEMPORAL: 'temporal'>, None)
    """
    return LOCOMO_KINDS.get(category)


def offline_service_env() -> None:
    """Defaults for a benchmark that starts Ray and the service here: Ray's auth off (the same for every Ray
    process), no usage stats, models from the local cache only. A value already set wins."""
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def warm_up(embedder: Embedder, rounds: int = 20) -> None:
    """NOTE: the first encodes pay for torch's thread pool; run them before anything is timed."""
    for _ in range(rounds):
        embedder.encode(["warm-up query"], is_query=True)


def percentiles_ms(seconds: Sequence[float]) -> dict[str, float]:
    """Wall times in seconds -> p50 / p95 / mean in milliseconds."""
    ms = np.asarray(seconds, dtype=np.float64) * 1000.0
    if len(ms) == 0:
        return {"p50": float("nan"), "p95": float("nan"), "mean": float("nan")}
    return {"p50": float(np.percentile(ms, 50)), "p95": float(np.percentile(ms, 95)), "mean": float(ms.mean())}


def reciprocal_rank(target: Any, ranked: Sequence[Any]) -> float:
    """1/rank of target in ranked (1-based), 0 when absent.

    >>> reciprocal_rank(7, [3, 7, 9])
    0.5
    """
    return 1.0 / (list(ranked).index(target) + 1) if target in ranked else 0.0


def parse_int_list(text: str) -> list[int]:
    """'42,43' -> [42, 43]; '42-46' -> [42, 43, 44, 45, 46]."""
    out: list[int] = []
    for part in text.split(","):
        part = part.strip()
        if "-" in part[1:]:
            lo, hi = part.split("-", 1)
            out.extend(range(int(lo), int(hi) + 1))
        elif part:
            out.append(int(part))
    if not out:
        raise ValueError(f"no integers in {text!r}")
    return out


def read_jsonl(path: str | Path) -> list[dict]:
    """The rows of a JSONL file, in order; a missing file has none. A line that does not parse is skipped: an
    append-only cache's last line may be cut short by a crash mid-write."""
    path = Path(path)
    if not path.is_file():
        return []
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return rows


def emit_json(payload: dict[str, Any]) -> None:
    """The benchmark contract: one JSON object as the last line of stdout."""
    sys.stdout.write(json.dumps(payload, sort_keys=False) + "\n")
    sys.stdout.flush()


def save_and_emit(results_dir: str | Path, name: str, payload: dict[str, Any]) -> None:
    """``payload`` to ``<results_dir>/<name>/results.json``, then to stdout as the contract's last line."""
    out_dir = Path(results_dir) / name
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "results.json").write_text(json.dumps(payload, indent=1))
    emit_json(payload)


def bearer(api_key: str | None) -> dict[str, str]:
    """Headers that carry an API key: ``bearer("k") == {"Authorization": "Bearer k"}``; none without a key."""
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


def admin_key(folder: str | Path) -> tuple[Path, str]:
    """For a service a benchmark starts itself: a new keys file in ``folder`` with one admin key -> (file, key);
    the service gets the file as ``auth.keys_file`` in its config overrides.

    NOTE: ENGRAM_AUTH__* would win over those overrides, so they are dropped from this process's environment."""
    from serve.auth import KeyStore

    for var in ("ENGRAM_AUTH__KEYS_FILE", "ENGRAM_AUTH__REQUIRED"):
        os.environ.pop(var, None)
    path = Path(folder) / "api-keys.json"
    return path, KeyStore(path).create([], admin=True, name="benchmark")[0]


def setup_logging() -> None:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(name)s: %(message)s")
