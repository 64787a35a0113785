"""The HTM-EAR ablations and baselines, as variants of one tier configuration.

``full``: importance eviction, gate, configured re-ranker. ``no_rerank``: no re-ranker.
``no_gate``: L1 only at query time. ``lru``: last-access eviction in both tiers and no
re-ranker (as in HTM-EAR's code). ``oracle``: one tier large enough to never evict,
searched with ``oracle_k``. A suffix ``@T`` sets the gate's similarity threshold,
e.g. ``full@0.84`` is the full system with the paper's threshold.
"""

from __future__ import annotations

from core.config import TierConfig, TierMemoryConfig

MODES = ("full", "no_rerank", "no_gate", "lru", "oracle")


def parse_mode(mode: str) -> tuple[str, float | None]:
    """'full@0.84' -> ('full', 0.84); 'lru' -> ('lru', None)."""
    name, _, threshold = mode.partition("@")
    if name not in MODES:
        raise ValueError(f"unknown mode {mode!r}; known: {', '.join(MODES)} (optionally with @threshold)")
    try:
        return name, float(threshold) if threshold else None
    except ValueError:
        raise ValueError(f"mode {mode!r}: threshold after '@' must be a number") from None


def mode_config(base: TierMemoryConfig, mode: str, *, total_items: int) -> TierMemoryConfig:
    """The configuration that ``mode`` runs with; ``total_items`` sizes the oracle's single tier."""
    name, threshold = parse_mode(mode)
    cfg = base.model_copy(deep=True)
    if threshold is not None:
        cfg.gate.similarity_threshold = threshold
    if name in ("no_rerank", "lru"):
        cfg.rerank.kind = "none"
    if name == "no_gate":
        cfg.gate.enabled = False
    if name == "lru":
        cfg.eviction.policy = "lru"
    if name == "oracle":
        cfg.l1 = TierConfig(capacity=max(total_items, 1), M=cfg.l1.M, ef_construction=cfg.l1.ef_construction,
                            ef=cfg.l1.ef)
        cfg.l2 = None
    return cfg
