"""One typed configuration tree for the whole service.

Loaded once at an entry point by :func:`load_config` from ``configs/<profile>.yaml``
with environment overrides under ``ENGRAM_`` (nested with ``__``, e.g.
``ENGRAM_TIERS__GATE__MODE=merge``). Nothing here is read at import time.

Every constant taken from a paper is a default whose description names the source:
HTM-EAR (tiered memory), E-mem (episodic memory), MemRouter (admission). The sections live in
``memory`` (embedder, tiers, router), ``episodic`` (episodes, admission), ``engine`` (the small-model
engine), ``service`` (topology, API keys, data, paths) and ``training`` (what only the training and benchmark
code reads: ``training``, ``bench``); everything is importable from here.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml
from pydantic import Field
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from core.config.base import CONFIG_DIR, REPO_ROOT, Section
from core.config.engine import EngineConfig
from core.config.episodic import AdmissionConfig, EpisodicConfig
from core.config.memory import (
    BGL_ENTITY_PATTERNS,
    PACKAGED_MINILM,
    SYNTHETIC_ENTITY_PATTERNS,
    DedupConfig,
    EmbedderConfig,
    EntityConfig,
    EvictionConfig,
    GateConfig,
    RerankConfig,
    RouterConfig,
    ScoringConfig,
    TierConfig,
    TierMemoryConfig,
)
from core.config.models import ALIASES, ROLES, ModelsConfig, Role
from core.config.service import AuthConfig, ClusterConfig, DataConfig, PathsConfig, TenantHash, TracingConfig
from core.config.training import AdmissionTrainingConfig, BenchConfig, TrainingConfig

__all__ = [
    "BGL_ENTITY_PATTERNS", "CONFIG_DIR", "PACKAGED_MINILM", "REPO_ROOT", "SYNTHETIC_ENTITY_PATTERNS",
    "AdmissionConfig", "AdmissionTrainingConfig", "AuthConfig", "BenchConfig", "ClusterConfig", "DataConfig",
    "DedupConfig", "EmbedderConfig", "EngineConfig",
    "EngramConfig", "EntityConfig", "EpisodicConfig", "EvictionConfig", "GateConfig", "ModelsConfig", "PathsConfig",
    "ROLES", "Role",
    "RerankConfig", "RouterConfig", "ScoringConfig", "Section", "TenantHash", "TierConfig", "TierMemoryConfig",
    "TracingConfig", "TrainingConfig",
    "deep_merge", "load_config", "profile_data", "profile_path",
]


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
    models: ModelsConfig = Field(default_factory=ModelsConfig)
    admission: AdmissionConfig = Field(default_factory=AdmissionConfig)
    cluster: ClusterConfig = Field(default_factory=ClusterConfig)
    auth: AuthConfig = Field(default_factory=AuthConfig)
    tracing: TracingConfig = Field(default_factory=TracingConfig)
    data: DataConfig = Field(default_factory=DataConfig)
    paths: PathsConfig = Field(default_factory=PathsConfig)
    training: TrainingConfig = Field(default_factory=TrainingConfig)
    bench: BenchConfig = Field(default_factory=BenchConfig)

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

    def model_for(self, role: Role) -> str:
        """The model ``role`` runs: ``models.<role>``, else ``engine.model`` (an alias as its registry name)."""
        name = self.models.of(role) or self.engine.model
        return ALIASES.get(name, name)

    def engine_for(self, role: Role) -> EngineConfig:
        """The engine section with ``role``'s model and ``models.engines.<role>`` (what that role's pool loads)."""
        override = self.models.engines.get(role)
        changes = override.changes() if override is not None else {}
        return EngineConfig.model_validate({**self.engine.model_dump(), **changes, "model": self.model_for(role)})

    def engine_groups(self) -> list[tuple[EngineConfig, tuple[Role, ...]]]:
        """The distinct engines the roles run, each with the roles that share it (in ``ROLES`` order): roles with
        the same model and the same ``models.engines`` settings share one engine (one LLM pool in the service)."""
        groups: dict[str, tuple[EngineConfig, list[Role]]] = {}
        for role in ROLES:
            engine = self.engine_for(role)
            groups.setdefault(engine.model_dump_json(), (engine, []))[1].append(role)
        return [(engine, tuple(roles)) for engine, roles in groups.values()]


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


def profile_data(profile: str | Path, seen: tuple[Path, ...] = ()) -> dict[str, Any]:
    """The YAML of a profile as a mapping; a profile that says ``extends: <profile>`` is merged over that one.

    A profile's name is its file's stem (an extending profile keeps its own name)."""
    path = profile_path(profile)
    if not path.is_file():
        known = sorted(p.stem for p in CONFIG_DIR.glob("*.yaml"))
        raise FileNotFoundError(f"config profile {str(profile)!r} not found at {path} (known profiles: {known})")
    if path.resolve() in seen:
        raise ValueError(f"{path}: 'extends' loops back to it")
    data: dict[str, Any] = yaml.safe_load(path.read_text()) or {}
    if not isinstance(data, dict):
        raise ValueError(f"{path}: top level must be a mapping")
    base = data.pop("extends", None)
    data.setdefault("profile", path.stem)
    if base is not None:
        data = deep_merge(profile_data(base, (*seen, path.resolve())), data)
    return data


def load_config(profile: str | Path | None = None, overrides: dict[str, Any] | None = None) -> EngramConfig:
    """Load ``configs/<profile>.yaml`` (default: ``$ENGRAM_PROFILE`` or ``cpu``; ``extends:`` followed),
    ``overrides`` merged over it (same keys as the YAML), plus ``ENGRAM_*`` environment overrides (which win)."""
    data = profile_data(profile or os.environ.get("ENGRAM_PROFILE") or "cpu")
    return EngramConfig(**deep_merge(data, overrides or {}))
