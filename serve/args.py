"""``AppArgs``: what ``serve.app:build_app`` takes (the ``args`` of an application in a Serve config file)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class DeploymentArgs(BaseModel):
    """Replicas and resources of one deployment."""

    model_config = ConfigDict(extra="forbid")

    num_replicas: int = Field(1, ge=1, le=1024, description="Replicas of the deployment.")
    num_cpus: float = Field(0.0, ge=0, le=1024, description="CPUs each replica reserves (0: share the node).")
    num_gpus: float = Field(0.0, ge=0, le=64, description="GPUs each replica reserves (fractions share a GPU).")
    max_ongoing_requests: int = Field(64, ge=1, le=100_000, description="Requests a replica takes at once.")
    resources: dict[str, float] = Field(
        default_factory=dict, description="Custom Ray resources a replica needs (e.g. to keep it on the head node)."
    )


class AppArgs(BaseModel):
    """The service: which config profile, overrides of it, and each deployment's replicas/resources."""

    model_config = ConfigDict(extra="forbid")

    profile: str = Field("cpu", description="configs/<profile>.yaml, or a path to a YAML file.")
    config: dict[str, Any] = Field(
        default_factory=dict, description="Overrides merged over the profile (same keys as the YAML)."
    )
    ingress: DeploymentArgs = Field(default_factory=DeploymentArgs, description="The HTTP API (FastAPI).")
    embedder: DeploymentArgs = Field(default_factory=DeploymentArgs, description="Sentence embedder.")
    admission: DeploymentArgs = Field(default_factory=DeploymentArgs, description="Admission classifier.")
    llm: DeploymentArgs = Field(
        default_factory=DeploymentArgs,
        description="Each LLM pool (one per distinct model of the roles assistant / master / summary), unless "
        "llm_pools sets it.",
    )
    llm_pools: dict[Literal["assistant", "master", "summary"], DeploymentArgs] = Field(
        default_factory=dict,
        description="Replicas/resources of the pool that serves a role's model (keyed by the first role, in "
        "assistant, master, summary order, that names the model), e.g. {master: {num_gpus: 1}}.",
    )
    master: DeploymentArgs = Field(default_factory=DeploymentArgs, description="Master aggregation.")
