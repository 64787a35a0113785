"""Low-rank adapters (LoRA) for a frozen causal LM: attach, train, save, and merge into the weights at load.

A plain module (no Ray, no peft): :func:`attach` wraps chosen ``nn.Linear`` layers in :class:`LoRALinear`
(``W x + scale * B A x``, ``B`` zero at the start, so an attached model computes what the base computes),
:func:`adapter_state` is what gets saved (only ``A`` and ``B``), :func:`merge` adds ``scale * B A`` into the base
weights so any engine (vLLM included) loads the tuned model as a plain HF folder.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

import torch
from torch import nn

LORA_A, LORA_B = "lora_A", "lora_B"


class LoRALinear(nn.Module):
    """A frozen ``nn.Linear`` plus a trainable rank-``rank`` update ``scale * B A`` (``scale = alpha / rank``)."""

    def __init__(self, base: nn.Linear, rank: int, alpha: float) -> None:
        super().__init__()
        if rank <= 0:
            raise ValueError(f"rank must be positive, got {rank}")
        self.base = base
        self.scale = alpha / rank
        self.lora_A = nn.Parameter(torch.empty(rank, base.in_features, dtype=base.weight.dtype))
        self.lora_B = nn.Parameter(torch.zeros(base.out_features, rank, dtype=base.weight.dtype))
        nn.init.kaiming_uniform_(self.lora_A, a=math.sqrt(5))
        base.weight.requires_grad_(False)
        if base.bias is not None:
            base.bias.requires_grad_(False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.base(x) + (x @ self.lora_A.T @ self.lora_B.T) * self.scale


def layer_index(name: str) -> int | None:
    """The decoder layer a module belongs to: ``layer_index('model.layers.12.self_attn.q_proj') == 12``."""
    parts = name.split(".")
    for before, part in zip(parts, parts[1:], strict=False):
        if before == "layers" and part.isdigit():
            return int(part)
    return None


def attach(model: nn.Module, targets: Iterable[str], rank: int, alpha: float,
           layers: Iterable[int] | None = None) -> list[str]:
    """Freeze ``model`` and wrap each ``nn.Linear`` whose last name part is in ``targets`` (e.g. ``q_proj``) and,
    when ``layers`` is given, whose decoder layer is one of them. Returns the wrapped modules' names; raises
    ``ValueError`` when nothing matched."""
    targets, wanted = set(targets), None if layers is None else set(layers)
    for p in model.parameters():
        p.requires_grad_(False)
    chosen = [name for name, m in model.named_modules()
              if isinstance(m, nn.Linear) and name.rpartition(".")[2] in targets
              and (wanted is None or layer_index(name) in wanted)]
    if not chosen:
        raise ValueError(f"no linear layer named {sorted(targets)} in the chosen layers")
    for name in chosen:
        owner, _, attr = name.rpartition(".")
        parent = model.get_submodule(owner)
        setattr(parent, attr, LoRALinear(getattr(parent, attr), rank, alpha))
    return chosen


def adapter_state(model: nn.Module) -> dict[str, torch.Tensor]:
    """``{'<module>.lora_A': A, '<module>.lora_B': B}`` for every attached module (detached copies)."""
    out = {}
    for name, m in model.named_modules():
        if isinstance(m, LoRALinear):
            out[f"{name}.{LORA_A}"] = m.lora_A.detach().clone().contiguous()
            out[f"{name}.{LORA_B}"] = m.lora_B.detach().clone().contiguous()
    return out


def merge(model: nn.Module, state: Mapping[str, torch.Tensor], scale: float) -> list[str]:
    """Add ``scale * B A`` of each adapted module in ``state`` into ``model``'s plain ``nn.Linear`` of that name.
    Returns the merged modules' names; raises ``ValueError`` on a module the model lacks, a wrong shape or an
    unpaired A/B."""
    names = sorted({key.rpartition(".")[0] for key in state})
    for name in names:
        a, b = state.get(f"{name}.{LORA_A}"), state.get(f"{name}.{LORA_B}")
        if a is None or b is None:
            raise ValueError(f"adapter for {name} lacks {LORA_A if a is None else LORA_B}")
        try:
            linear = model.get_submodule(name)
        except AttributeError as e:
            raise ValueError(f"the model has no module {name}") from e
        if not isinstance(linear, nn.Linear) or tuple(linear.weight.shape) != (b.shape[0], a.shape[1]) \
                or a.shape[0] != b.shape[1]:
            raise ValueError(f"adapter for {name} ({tuple(b.shape)} x {tuple(a.shape)}) does not fit {linear}")
        with torch.no_grad():
            linear.weight += scale * (b.to(linear.weight.dtype) @ a.to(linear.weight.dtype))
    return names
