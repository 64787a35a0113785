"""Shared pieces of the configuration tree: the section base class and where the project lives."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict

REPO_ROOT = Path(__file__).resolve().parents[2]
CONFIG_DIR = REPO_ROOT / "configs"


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


def default_shared(*parts: str) -> Path:
    """``../shared/<parts>`` next to the repository (data sets, KubeRay CRDs)."""
    return (REPO_ROOT.parent / "shared").joinpath(*parts)
