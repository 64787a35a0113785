"""Config sections of the running service: the actor topology, API keys, data sets and paths."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field, field_validator

from core.cache import default_cache_dir
from core.config.base import Section, default_shared

TenantHash = Literal["rendezvous", "modulo"]  # pipeline/shards.py: shard_of


class DataConfig(Section):
    locomo_path: Path = Field(
        default_factory=lambda: default_shared("data", "locomo", "locomo10.json"), description="LoCoMo JSON file."
    )
    kuberay_crds_path: Path = Field(
        default_factory=lambda: default_shared("kuberay-crds"), description="Folder with the KubeRay CRD YAMLs."
    )


class PathsConfig(Section):
    cache_dir: Path = Field(
        default_factory=default_cache_dir,
        description="Converted models, trained weights and embedding caches (never committed).",
    )
    results_dir: Path = Field(Path("results"), description="Benchmark tables and plots.")


class ClusterConfig(Section):
    """The actor topology of the service on Ray (names, counts, placement, restarts)."""

    namespace: str = Field("engram", min_length=1, description="Ray namespace of the named actors.")
    tier_shards: int = Field(
        2, ge=1, le=4096, description="Tier-shard actors; a tenant lives on one of them, chosen by tenant_hash."
    )
    assistant_actors: int = Field(
        2, ge=1, le=4096,
        description="Assistant actors; each hosts many segments, placed by tenant_hash of (tenant, segment).",
    )
    router_shards: int = Field(
        1, ge=1, le=4096, description="Router actors; a tenant's router is chosen by tenant_hash."
    )
    tenant_hash: TenantHash = Field(
        "rendezvous",
        description="How a tenant (and a segment) is placed on the shards of each kind. 'rendezvous' (highest "
        "random weight) moves about 1/n of the tenants when a shard count changes (only to an added shard, or "
        "only a removed shard's own); 'modulo' (hash % n) is the scheme of earlier versions and moves almost all "
        "of them. A storage_dir records the scheme and shard counts it was first written under (placement.json) and "
        "the service refuses to start on it with others (tenants would be looked up on shards that do not hold "
        "their state); one written before the record needs 'modulo'.",
    )
    assistant_max_concurrency: int = Field(
        8, ge=1, le=1024,
        description="Concurrent calls an assistant actor serves (Ray max_concurrency); they wait on the small-model "
        "pool and only read held segments meanwhile.",
    )
    actor_num_cpus: float = Field(
        0.0, ge=0, le=256, description="CPUs each stateful actor reserves (0: share the node; they hold no model)."
    )
    max_restarts: int = Field(-1, ge=-1, description="Ray restarts of a crashed actor (-1: forever).")
    placement: Literal["round_robin", "spread", "default"] = Field(
        "round_robin",
        description="'round_robin': actor i of each kind is pinned to alive node i % nodes (hard affinity; when that "
        "node is gone the first caller revives the actor on an alive one); 'spread': Ray's SPREAD strategy (best "
        "effort); 'default': Ray decides.",
    )
    summaries: bool = Field(
        True,
        description="Write each closed segment's one-line summary (router's global path) in the background, "
        "after the write is acknowledged.",
    )
    storage_dir: str | None = Field(
        None,
        description="Where each stateful actor keeps its write-ahead log and snapshots (<dir>/<namespace>/<actor>): "
        "a directory every node can reach in a multi-node cluster (a ReadWriteMany volume), or an fsspec URL of an "
        "object store (s3://bucket/prefix, gs://..., file:///...; cores/object_journal.py). None: memory only, "
        "lost when an actor restarts.",
    )
    storage_options: dict[str, Any] = Field(
        default_factory=dict,
        description="fsspec options of a storage_dir URL, e.g. {client_kwargs: {endpoint_url: http://minio:9000}}; "
        "credentials are best left to the store's own environment (AWS_ACCESS_KEY_ID, a pod's service account).",
    )
    snapshot_every: int = Field(
        10_000, ge=1, le=100_000_000, description="Log records after which an actor writes a snapshot."
    )
    local_query_embedding: bool = Field(
        True,
        description="The ingress embeds search/ask queries itself (saves the Serve hop to the Embedder deployment "
        "on every query: docs/results/2026-11-29-cluster.md) at the cost of one more embedder copy per ingress "
        "replica; writes always use the Embedder deployment.",
    )
    summary_delay_s: float = Field(
        30.0, ge=0, le=3600,
        description="Segment summaries run when writes pause (none for write_idle_s), or once the oldest has waited "
        "this long.",
    )
    summary_batch: int = Field(
        4, ge=1, le=1024,
        description="Segments per background summary call (each a long prompt, slow on a CPU: "
        "docs/results/2026-11-29-cluster.md); one call at a time per assistant actor so summaries never hold the "
        "pool for long against ask requests.",
    )
    summary_timeout_s: float = Field(
        900.0, gt=0, le=86_400,
        description="Longest wait for one background summary call (a slow pool is not an error).",
    )
    write_idle_s: float = Field(
        1.0, ge=0, le=3600,
        description="Writes count as paused once none has run for this long; background summaries wait for a pause "
        "(or summary_delay_s).",
    )
    ask_timeout_s: float = Field(
        300.0, gt=0, le=3600,
        description="Longest wait for the assistants' evidence of one question (they queue on the small-model pool).",
    )
    actor_call_timeout_s: float = Field(
        60.0, gt=0, le=3600, description="Longest wait for one actor call before the request fails with 503."
    )


class AuthConfig(Section):
    """API keys of the HTTP API (``serve/auth.py``; created with ``engram keys create``)."""

    required: bool = Field(
        True,
        description="API keys required on every /v1 route except /v1/health (/metrics and the OpenAPI pages stay "
        "open too); false only on a private dev box.",
    )
    keys_file: Path = Field(
        default_factory=lambda: default_cache_dir() / "api-keys.json",
        description="JSON file of the keys' SHA-256 hashes, tenants and admin flags (mode 0600), read by every "
        "ingress replica on its own node and re-read when it changes; '~' is expanded.",
    )

    @field_validator("keys_file")
    @classmethod
    def _expand(cls, path: Path) -> Path:
        return path.expanduser()


class TracingConfig(Section):
    """OpenTelemetry spans of the HTTP API's requests (``core/tracing.py``): off by default."""

    enabled: bool = Field(False, description="Record spans: one tree per request, ingress -> admission -> actors "
                          "-> model pools -> master.")
    exporter: Literal["console", "otlp", "file"] = Field(
        "console", description="console: spans printed to stdout (development); otlp: OTLP over HTTP to "
        "otlp_endpoint (production: a collector, Jaeger, Tempo...); file: JSON Lines appended to file_path.")
    otlp_endpoint: str = Field("http://127.0.0.1:4318/v1/traces", description="OTLP/HTTP traces endpoint.")
    file_path: Path = Field(Path("spans.jsonl"), description="Where the file exporter appends (one span per line).")
    service_name: str = Field("engram-cluster", min_length=1, description="The resource's service.name.")
    record_text: bool = Field(False, description="Also record questions, queries and answers as attributes "
                              "(never by default: spans carry ids, counts and timings only).")

