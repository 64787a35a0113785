"""``AppArgs``: what ``serve.app:build_app`` takes (the ``args`` of an application in a Serve config file)."""

from __future__ import annotations

from typing import Any

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
        default_factory=DeploymentArgs, description="Small-model pool (vLLM) every assistant and the master call."
    )
    master: DeploymentArgs = Field(default_factory=DeploymentArgs, description="Master aggregation.")
