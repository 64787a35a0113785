"""Tier memory as it grows: one user with up to a million memories, and ten thousand small users on one shard.

    python -m bench.scale                                  # sizes 1e3..1e6 and 10,000 tenants (~30 min, ~12 GB)
    python -m bench.scale --sizes 1000,10000 --tenants 500 --queries 100   # a quick look

Everything runs the tier shard's core as the service runs it (``cores.durable_cores.DurableTiers``: the
``TenantTiers`` of a tier-shard actor with its write-ahead log, fsync per write), in this process, without Ray:

- **Vectors.** Real MiniLM embeddings of LoCoMo train-split turns (``--sample`` of them, cached), and for the rest
  vectors drawn from a Gaussian with the sample's mean and covariance, normalised to unit length (MiniLM's
  vectors are unit length): the same spread of similarities as real turns, without embedding a million texts.
  Each memory carries a real turn's text (cycled) for the entity extraction a write does. Queries: LoCoMo
  train-split questions, embedded at search time by the query encoder the ingress runs.
- **One user** (``--sizes``): memories are added in batches of ``--batch`` through ``add`` (journaled) until each
  size is reached. Per size: search p50 / p95 over ``--queries`` questions (``search``, k=10, the query's vector
  given: embedding excluded) and ``search_with_embed_p50_ms`` (query encoder + search); ``insert_per_s`` over
  the growth to that size; ``rss_mb`` (this process) and ``memory_mb`` (its growth since the tenant was empty);
  ``snapshot_mb`` / ``snapshot_s`` (the journal's snapshot, pickled and fsynced); ``restart_s``: a new core built
  from the journal directory (snapshot load + replay of the ``--replay`` adds logged after the snapshot), what an
  actor restart costs. The tiers are L1 500 (HTM-EAR's working tier) and an archive bounded at the largest size:
  at this scale the archive is the tenant's quota (docs/scale.md).
- **Many users** (``--tenants``): that many tenants with 10..100 memories each (uniform) on one core: resident
  memory per tenant, search p50 for a random tenant, restart time.
"""

from __future__ import annotations

import argparse
import gc
import shutil
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from bench.common import emit_json, parse_int_list, percentiles_ms, setup_logging, warm_up
from cluster.embedding_cache import embed_cached
from core.config import EngramConfig, TierConfig, load_config
from corpora.locomo import load_locomo, split

MB = 2**20


def rss_mb() -> float:
    import psutil

    return psutil.Process().memory_info().rss / MB


class VectorSource:
    """Unit vectors shaped like real embeddings: the sample first, then Gaussian draws with its mean and covariance."""

    def __init__(self, sample: np.ndarray, seed: int = 0) -> None:
        self.sample = np.asarray(sample, dtype=np.float32)
        self.mean = self.sample.mean(axis=0)
        cov = np.cov(self.sample, rowvar=False) + 1e-6 * np.eye(self.sample.shape[1])
        self._chol = np.linalg.cholesky(cov).astype(np.float32)
        self._rng = np.random.default_rng(seed)
        self._served = 0

    def take(self, n: int) -> np.ndarray:
        real = self.sample[self._served : self._served + n]
        drawn = self._rng.standard_normal((n - len(real), self.sample.shape[1]), dtype=np.float32) @ self._chol.T
        out = np.concatenate([real, drawn + self.mean]) if len(drawn) else real.copy()
        self._served += n
        return (out / np.linalg.norm(out, axis=1, keepdims=True)).astype(np.float32)


def _without_dedup(cfg: EngramConfig) -> EngramConfig:
    """NOTE: the benchmark's texts are a few sample turns recycled as placeholders for drawn vectors; the write
    dedup (tiers.dedup) would rightly drop the repeats, so it is off here: these sizes measure index mechanics."""
    tiers = cfg.tiers.model_copy(update={"dedup": cfg.tiers.dedup.model_copy(update={"enabled": False})})
    return cfg.model_copy(update={"tiers": tiers})


def _scale_config(cfg: EngramConfig, archive: int) -> EngramConfig:
    cfg = _without_dedup(cfg)
    tiers = cfg.tiers.model_copy(update={"l2": TierConfig(**{**cfg.tiers.l2.model_dump(), "capacity": archive})})
    return cfg.model_copy(update={"tiers": tiers})


def _add(core: Any, tenant: str, start: int, vectors: np.ndarray, texts: Sequence[str]) -> None:
    n = len(vectors)
    ids = [f"m{start + i}" for i in range(n)]
    batch_texts = [texts[(start + i) % len(texts)] for i in range(n)]
    core.add(tenant, ids, batch_texts, vectors, [0.5] * n, [{"turn": start + i} for i in range(n)])


def _search_times(core: Any, tenants: Sequence[str], queries: Sequence[str], qvecs: np.ndarray | None = None,
                  encoder: Any = None) -> list[float]:
    """Seconds per ``search`` (k=10), tenants in turn: with the given query vectors, or (``qvecs`` None) with each
    query embedded by ``encoder`` inside the timed span."""
    times = []
    for i, q in enumerate(queries):
        tenant = tenants[i % len(tenants)]
        t = time.perf_counter()
        vector = qvecs[i] if qvecs is not None else encoder.encode([q], is_query=True)[0]
        core.search(tenant, q, vector, 10)
        times.append(time.perf_counter() - t)
    return times


def _beams(core: Any, tenant: str, queries: Sequence[str], qvecs: np.ndarray, beams: Sequence[int]) -> dict[str, Any]:
    """Search p50 with the gate's L2 candidate count (``gate.l2_k``, hnswlib's beam when it exceeds ``ef``) set to
    each of ``beams``, and how many of the configured setting's top 10 each keeps (mean share): what a smaller
    beam costs in results for what it saves in time. The configured value is restored after."""
    mem = core._memory(tenant)
    configured = mem.config

    def top10(k2: int) -> tuple[list[list[str]], list[float]]:
        mem.config = configured.model_copy(update={"gate": configured.gate.model_copy(update={"l2_k": k2})})
        ids, times = [], []
        for q, v in zip(queries, qvecs, strict=True):
            t = time.perf_counter()
            hits = core.search(tenant, q, v, 10)
            times.append(time.perf_counter() - t)
            ids.append([h.id for h in hits])
        return ids, times

    try:
        reference, _ = top10(configured.gate.l2_k)
        found = {}
        for k2 in beams:
            top10(k2)  # warm
            ids, times = top10(k2)
            kept = [len(set(a) & set(b)) / max(1, len(b)) for a, b in zip(ids, reference, strict=True)]
            found[str(k2)] = {"search_p50_ms": percentiles_ms(times)["p50"], "top10_kept": float(np.mean(kept))}
        return found
    finally:
        mem.config = configured


def _restart(durable_cls: type, cfg: EngramConfig, dim: int, journal: Path) -> tuple[Any, float, int]:
    gc.collect()
    t = time.perf_counter()
    core = durable_cls(cfg.tiers, dim, journal_dir=journal, snapshot_every=10**9)
    return core, time.perf_counter() - t, core.recovered


def _snapshot(core: Any, journal: Path) -> tuple[float, float]:
    t = time.perf_counter()
    core.snapshot()
    seconds = time.perf_counter() - t
    size = sum(p.stat().st_size for p in journal.glob("snapshot-*.pkl"))
    return seconds, size / MB


def one_user(cfg: EngramConfig, sizes: list[int], source: VectorSource, texts: Sequence[str], queries: Sequence[str],
             encoder: Any, *, batch: int, replay: int, workdir: Path, beams: Sequence[int] = ()
             ) -> list[dict[str, Any]]:
    from cores.durable_cores import DurableTiers

    cfg = _scale_config(cfg, max(sizes))
    dim = source.sample.shape[1]
    journal = workdir / "one-user"
    core = DurableTiers(cfg.tiers, dim, journal_dir=journal, snapshot_every=10**9)
    qvecs = encoder.encode(list(queries), is_query=True)
    base, held, previous, rows = rss_mb(), 0, 0, []
    bar = tqdm(total=max(sizes), desc="one user: memories", unit="mem", unit_scale=True)
    for size in sizes:
        t = time.perf_counter()
        grow = size - held - replay
        while grow > 0:
            n = min(batch, grow)
            _add(core, "u", held, source.take(n), texts)
            held, grow = held + n, grow - n
            bar.update(n)
        insert_s = time.perf_counter() - t
        snapshot_s, snapshot_mb = _snapshot(core, journal)
        t = time.perf_counter()
        while held < size:  # the adds a restart replays from the log (after the snapshot)
            n = min(batch, size - held)
            _add(core, "u", held, source.take(n), texts)
            held += n
            bar.update(n)
        insert_s += time.perf_counter() - t
        _search_times(core, ["u"], queries[:20], qvecs[:20])  # warm
        search = percentiles_ms(_search_times(core, ["u"], queries, qvecs))
        with_embed = _search_times(core, ["u"], queries, encoder=encoder)
        by_beam = _beams(core, "u", queries, qvecs, beams) if beams else None
        rss = rss_mb()
        del core
        core, restart_s, replayed = _restart(DurableTiers, cfg, dim, journal)
        assert core.stats()["u"]["items"] == size, "restart lost memories"
        row = {"memories": size, "search_p50_ms": search["p50"], "search_p95_ms": search["p95"],
               "search_with_embed_p50_ms": percentiles_ms(with_embed)["p50"],
               "insert_per_s": (size - previous) / insert_s,
               "rss_mb": rss, "memory_mb": rss - base, "snapshot_mb": snapshot_mb, "snapshot_s": snapshot_s,
               "restart_s": restart_s, "replayed_records": replayed, **({"l2_k": by_beam} if by_beam else {})}
        rows.append(row)
        previous = size
        tqdm.write(f"{size:>9,d} memories: search p50 {row['search_p50_ms']:.2f} ms, {row['insert_per_s']:.0f}/s, "
                   f"{row['memory_mb']:.0f} MB, snapshot {snapshot_mb:.0f} MB in {snapshot_s:.1f} s, "
                   f"restart {restart_s:.1f} s")
    bar.close()
    del core
    shutil.rmtree(journal, ignore_errors=True)
    return rows


def many_users(cfg: EngramConfig, tenants: int, source: VectorSource, texts: Sequence[str], queries: Sequence[str],
               encoder: Any, *, workdir: Path, seed: int = 0) -> dict[str, Any]:
    from cores.durable_cores import DurableTiers

    cfg = _without_dedup(cfg)
    dim = source.sample.shape[1]
    journal = workdir / "many-users"
    gc.collect()
    base = rss_mb()
    core = DurableTiers(cfg.tiers, dim, journal_dir=journal, snapshot_every=10**9)
    sizes = np.random.default_rng(seed).integers(10, 101, size=tenants)
    names = [f"user-{i:05d}" for i in range(tenants)]
    start = time.perf_counter()
    for name, n in zip(tqdm(names, desc="many users: tenants", unit="tenant"), sizes.tolist(), strict=True):
        _add(core, name, 0, source.take(n), texts)
    insert_s = time.perf_counter() - start
    memory_mb = rss_mb() - base
    qvecs = encoder.encode(list(queries), is_query=True)
    order = np.random.default_rng(seed + 1).permutation(tenants)
    picked = [names[i] for i in order[: len(queries)]]
    _search_times(core, picked[:20], queries[:20], qvecs[:20])
    search = percentiles_ms(_search_times(core, picked, queries, qvecs))
    snapshot_s, snapshot_mb = _snapshot(core, journal)
    del core
    core, restart_s, _ = _restart(DurableTiers, cfg, dim, journal)
    assert len(core.tenants()) == tenants, "restart lost tenants"
    del core
    shutil.rmtree(journal, ignore_errors=True)
    total = int(sizes.sum())
    return {"tenants": tenants, "memories": total, "rss_mb": memory_mb, "rss_mb_per_tenant": memory_mb / tenants,
            "kb_per_memory": memory_mb * 1024 / total, "insert_per_s": total / insert_s,
            "search_p50_ms": search["p50"], "search_p95_ms": search["p95"], "snapshot_mb": snapshot_mb,
            "snapshot_s": snapshot_s, "restart_s": restart_s}


def _embed_seconds(embedder: Any, text: str) -> float:
    t = time.perf_counter()
    embedder.encode([text], is_query=True)
    return time.perf_counter() - t


def write_table(path: Path, rows: list[dict[str, Any]], tenants: dict[str, Any] | None, embed_p50: float) -> None:
    lines = ["| memories | search p50 / p95 (ms) | with query embedding p50 (ms) | inserts/s | RSS (MB) | "
             "memory (MB) | snapshot (MB, s) | restart (s) |", "|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['memories']:,} | {r['search_p50_ms']:.2f} / {r['search_p95_ms']:.2f} | "
                     f"{r['search_with_embed_p50_ms']:.2f} | {r['insert_per_s']:.0f} | {r['rss_mb']:.0f} | "
                     f"{r['memory_mb']:.0f} | {r['snapshot_mb']:.0f}, {r['snapshot_s']:.1f} | {r['restart_s']:.2f} |")
    beams = [r for r in rows if r.get("l2_k")]
    if beams:
        lines += ["", "| memories | gate.l2_k | search p50 (ms) | configured top 10 kept |", "|---:|---:|---:|---:|"]
        lines += [f"| {r['memories']:,} | {k} | {v['search_p50_ms']:.2f} | {v['top10_kept']:.3f} |"
                  for r in beams for k, v in r["l2_k"].items()]
    lines.append(f"\nQuery embedding alone: p50 {embed_p50:.2f} ms.")
    if tenants:
        lines.append(f"\n{tenants['tenants']:,} tenants, {tenants['memories']:,} memories: "
                     f"{tenants['rss_mb']:.0f} MB ({tenants['rss_mb_per_tenant'] * 1024:.0f} KB per tenant), search "
                     f"p50 {tenants['search_p50_ms']:.2f} ms, snapshot {tenants['snapshot_mb']:.0f} MB, restart "
                     f"{tenants['restart_s']:.1f} s.")
    path.write_text("\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m bench.scale", description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", default="1000,10000,100000,1000000", help="one user's memory sizes, ascending")
    p.add_argument("--tenants", type=int, default=10_000, help="tenants on one shard (0: skip)")
    p.add_argument("--queries", type=int, default=200, help="search calls timed per size")
    p.add_argument("--sample", type=int, default=4000, help="real turn embeddings the vectors are drawn like")
    p.add_argument("--batch", type=int, default=1000, help="memories per add call while growing")
    p.add_argument("--replay", type=int, default=1000, help="memories added after the snapshot (replayed at restart)")
    p.add_argument("--l2-k", default="", help="also time search with these gate.l2_k values, e.g. 100,50,20 "
                   "(p50 and the share of the configured top 10 each keeps)")
    p.add_argument("--data", type=Path, default=None, help="LoCoMo JSON (default: config data.locomo_path)")
    p.add_argument("--workdir", type=Path, default=None, help="journal directory (default: a temporary one)")
    args = p.parse_args(argv)
    setup_logging()
    sizes = parse_int_list(args.sizes)
    if sizes != sorted(sizes) or min(sizes) <= args.replay:
        p.error(f"--sizes must ascend and each exceed --replay ({args.replay})")
    cfg = load_config()
    from serve.embedder import Embedder
    from serve.query_encoder import build_query_encoder

    embedder = Embedder(cfg.embedder)
    encoder = build_query_encoder(cfg.embedder, cfg.paths.cache_dir)  # what the ingress embeds queries with
    warm_up(encoder)
    convs = split(load_locomo(args.data or cfg.data.locomo_path), "train")
    turns = [t.text for c in convs for t in c.turns][: args.sample]
    questions = [q.question for c in convs for q in c.questions][: args.queries]
    sample, _ = embed_cached(embedder, turns, cfg.paths.cache_dir, label="scale-sample")
    embed_p50 = percentiles_ms([_embed_seconds(encoder, q) for q in questions])["p50"]
    work = Path(tempfile.mkdtemp(prefix="engram-scale-", dir=args.workdir))
    try:
        rows = one_user(cfg, sizes, VectorSource(sample), turns, questions, encoder, batch=args.batch,
                        replay=args.replay, workdir=work, beams=parse_int_list(args.l2_k) if args.l2_k else ())
        tenants = (many_users(cfg, args.tenants, VectorSource(sample, seed=1), turns, questions, encoder,
                              workdir=work) if args.tenants else None)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    out = cfg.paths.results_dir / "scale"
    out.mkdir(parents=True, exist_ok=True)
    write_table(out / "results.md", rows, tenants, embed_p50)
    ratio = rows[-1]["search_p50_ms"] / rows[0]["search_p50_ms"]
    emit_json({"sizes": rows, "tenants": tenants, "embed_p50_ms": embed_p50,
               "query_runtime": cfg.embedder.query_runtime, "search_p50_ratio_largest_to_smallest": ratio,
               "sample": len(turns), "queries": len(questions)})


if __name__ == "__main__":
    main()
