"""Learned write-side admission (MemRouter): store a turn or not, decided in embedding space, one forward pass.

A *chunk* is the current turn plus up to ``max_turns - 1`` turns before it in the same conversation (MemRouter:
at most 5), given as the sequence of their sentence embeddings, oldest first. Each turn is rendered
``[date_time] speaker: text`` and embedded **once** (:class:`ChunkStream` keeps the last few vectors of each
conversation, so a new turn costs one embedding; the same vectors can later index the admitted turn)::

    turn embeddings (T ≤ 5, 384) --Projector--> soft tokens (T, 576) --frozen LLM (inputs_embeds), its first
    exit_layer layers--> hidden state of the last position --op head--> ADD / NOOP
                                             --type head--> content type (meaningful for ADD)

No tokenisation of the chunk and no generation. Chunks shorter than ``max_turns`` are left-padded with an
attention mask and per-row position ids, so a chunk gets the same decision alone and in a batch.
Only the projector and the two heads train; the backbone is frozen (``requires_grad=False``, eval mode).
The committed heads (``inference/admission_heads/``, ``admission.weights: packaged``) exit after 4 of
SmolLM2-135M's 30 layers (the accuracy / latency curve that chose it: docs/results/2026-12-02-admission.md).

Content types (:data:`CONTENT_TYPES`) are not published by MemRouter; this project uses six, labelled on the
train split by the documented keyword rule :func:`content_type_rule` (docs/admission.md).
"""

from __future__ import annotations

import json
import logging
import re
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import torch
from torch import nn

from memory.segmenter import TurnLike, render_turn

if TYPE_CHECKING:
    from core.config import EngramConfig

log = logging.getLogger(__name__)

OPS = ("NOOP", "ADD")  # op head classes; index 1 = ADD
CONTENT_TYPES = ("fact", "preference", "plan", "emotion", "event", "other")
WEIGHTS_DIR = "admission"  # under the config's paths.cache_dir
WEIGHTS_FILE = "admission.pt"
SETTINGS_FILE = "admission.json"
PACKAGED_WEIGHTS = "admission_heads"  # folder next to this module: the committed heads (admission.weights: packaged)
TRAIN_COMMAND = "python -m training.train_admission"
DEFAULT_THRESHOLD = 0.5  # p_add cut when neither the config nor the trained settings give one

# Keyword rule for the content-type label, checked in this order; the first match wins, else "other".
_TYPE_RULES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("plan", re.compile(
        r"\b(plan|plans|planning|going to|gonna|will|next (week|month|year|weekend)|tomorrow|hope to|"
        r"want to|intend|looking forward|thinking (about|of))\b", re.I)),
    ("event", re.compile(
        r"\b(yesterday|last (week|month|year|weekend|night|friday|saturday|sunday)|went|attended|visited|"
        r"took|joined|started|finished|won|bought|moved|met|celebrated|ago)\b", re.I)),
    ("emotion", re.compile(
        r"\b(feel|feeling|felt|happy|sad|excited|nervous|anxious|proud|scared|stressed|grateful|thrilled|"
        r"upset|lonely|overwhelmed|glad|worried|afraid)\b", re.I)),
    ("preference", re.compile(
        r"\b(love|loves|like|likes|enjoy|enjoys|favorite|favourite|prefer|hate|fan of|passionate)\b", re.I)),
    ("fact", re.compile(r"\b(i am|i'm|my|i have|i've|i work|i live|is a|are a)\b", re.I)),
)


def keyword_count(text: str) -> int:
    """How many memory keywords a turn holds (every match of every content-type rule); the keyword
    admission baseline of ``bench.admission_downstream`` ranks turns by it."""
    return sum(len(pattern.findall(text)) for _, pattern in _TYPE_RULES)


def rule_decision(text: str, keyword_min: int | None = None) -> Decision:
    """Admission without a model: ADD with the keyword rule's content type; with ``keyword_min``, NOOP for a turn
    holding fewer memory keywords (``admission.mode: keyword``)."""
    keep = keyword_min is None or keyword_count(text) >= keyword_min
    return Decision("ADD" if keep else "NOOP", content_type_rule(text), None)


def content_type_rule(text: str) -> str:
    """The content-type label this project trains on: first matching keyword rule, else ``other``.

    ``content_type_rule("We are going to Paris next month!") == "plan"``
    """
    for name, pattern in _TYPE_RULES:
        if pattern.search(text):
            return name
    return "other"


@dataclass(frozen=True, slots=True)
class Decision:
    """One admission decision: ``op`` is ``ADD`` or ``NOOP``; ``content_type`` is the type head's best guess."""

    op: str
    content_type: str
    p_add: float


class EncoderLike(Protocol):
    """Sentence encoder (``serve.embedder.Embedder`` fits): texts -> float32 rows of unit length."""

    dim: int

    def encode(self, texts: Sequence[str]) -> np.ndarray: ...


class ChunkStream:
    """Turns chunks out of turn streams, embedding every turn exactly once.

    ``push(turns)`` embeds the new turns in one encoder call and returns one chunk per turn: an array
    (≤ max_turns, dim) of that turn's conversation's recent turn vectors, the turn itself last. Turns of a
    conversation must arrive in stream order; ``conv_id`` (if a turn has one) keeps conversations apart.
    """

    def __init__(self, encoder: EncoderLike, max_turns: int = 5) -> None:
        self.encoder = encoder
        self.max_turns = max_turns
        self._recent: dict[str, deque[np.ndarray]] = {}

    def push(self, turns: Sequence[TurnLike]) -> list[np.ndarray]:
        vectors = self.encoder.encode([render_turn(t) for t in turns])
        chunks = []
        for turn, vec in zip(turns, vectors, strict=True):
            recent = self._recent.setdefault(getattr(turn, "conv_id", ""), deque(maxlen=self.max_turns))
            recent.append(vec)
            chunks.append(np.stack(recent))
        return chunks


def chunk_rows(n_turns: int, max_turns: int = 5) -> list[list[int]]:
    """Row indices of each turn's chunk in a stream of ``n_turns``: ``chunk_rows(3, 2) == [[0], [0, 1], [1, 2]]``."""
    return [list(range(max(0, i - max_turns + 1), i + 1)) for i in range(n_turns)]


def pad_chunks(chunks: Sequence[np.ndarray | torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-pad chunks (T_i, dim) into (B, T, dim) floats and a (B, T) attention mask (1 = real turn)."""
    width = max(len(c) for c in chunks)
    dim = chunks[0].shape[-1]
    embeds = torch.zeros(len(chunks), width, dim, dtype=torch.float32)
    mask = torch.zeros(len(chunks), width, dtype=torch.long)
    for row, chunk in enumerate(chunks):
        n = len(chunk)
        embeds[row, width - n :] = torch.as_tensor(np.asarray(chunk), dtype=torch.float32)
        mask[row, width - n :] = 1
    return embeds, mask


class Projector(nn.Module):
    """LayerNorm → Linear → GELU → Linear: one sentence embedding -> one soft token of the backbone.

    The output is rescaled to a fixed RMS (``target_rms``, the backbone's mean token-embedding RMS), so
    soft tokens enter the frozen model at the scale its own token embeddings have.
    """

    def __init__(self, in_dim: int, hidden: int, out_dim: int, target_rms: float = 1.0) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.LayerNorm(in_dim), nn.Linear(in_dim, hidden), nn.GELU(), nn.Linear(hidden, out_dim)
        )
        self.register_buffer("target_rms", torch.tensor(float(target_rms)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.net(x)
        return y * (self.target_rms / y.pow(2).mean(-1, keepdim=True).add(1e-6).sqrt())


def weights_dir(cache_dir: str | Path) -> Path:
    """Where ``python -m training.train_admission`` writes the weights and the classifier reads them."""
    return Path(cache_dir) / WEIGHTS_DIR


def require_weights(path: str | Path, alternative: str = "") -> None:
    """Raise FileNotFoundError, naming the training command (and ``alternative``), unless ``path`` holds
    the trained weights and their settings."""
    path = Path(path)
    if not (path / WEIGHTS_FILE).is_file() or not (path / SETTINGS_FILE).is_file():
        raise FileNotFoundError(
            f"no trained admission weights in {path} (expected {WEIGHTS_FILE} and {SETTINGS_FILE}); "
            f"train them with `{TRAIN_COMMAND}` (~7 min on 2 CPU cores){alternative}"
        )


def decoder_of(model: nn.Module) -> nn.Module:
    """The transformer stack of a causal LM (``LlamaForCausalLM.model``), so no LM head runs; else the model."""
    inner = getattr(model, "model", None)
    return inner if isinstance(inner, nn.Module) else model


def truncate_layers(decoder: nn.Module, exit_layer: int | None) -> int:
    """Keep the first ``exit_layer`` decoder layers of ``decoder`` (all when None) and return how many it keeps.

    The dropped layers are freed: an early exit reads, and holds, only the weights it runs. The decoder's final
    norm still runs on the exit's hidden state. ``exit_layer=0`` runs no layer: the heads then read the
    projected current turn alone (the "no backbone" ablation: docs/results/2026-12-02-admission.md).
    """
    layers = decoder.layers
    if exit_layer is None or exit_layer >= len(layers):
        return len(layers)
    if exit_layer < 0:
        raise ValueError(f"exit_layer must be >= 0, got {exit_layer}")
    decoder.layers = nn.ModuleList(list(layers)[:exit_layer])
    decoder.config.num_hidden_layers = exit_layer
    return exit_layer


class AdmissionModel(nn.Module):
    """Projector + frozen backbone + op / content-type heads. ``forward(embeds, mask) -> (op, type) logits``.

    ``exit_layer`` (None = all layers): the heads read the hidden state after that many decoder layers, and
    the layers after it are dropped (see :func:`truncate_layers`).
    """

    def __init__(self, backbone: nn.Module, embed_dim: int, projector_hidden: int = 1024,
                 exit_layer: int | None = None) -> None:
        super().__init__()
        self.backbone = decoder_of(backbone)
        for p in self.backbone.parameters():
            p.requires_grad_(False)
        self.backbone.eval()
        self.exit_layer = truncate_layers(self.backbone, exit_layer)
        hidden = int(self.backbone.config.hidden_size)
        table = self.backbone.get_input_embeddings().weight.detach()
        rms = float(table.pow(2).mean(-1).sqrt().mean())
        self.projector = Projector(embed_dim, projector_hidden, hidden, target_rms=rms)
        # NOTE: a LayerNorm before each linear head: the backbone's final hidden state has a few outlier
        # dimensions of large magnitude, which a bare linear head trains poorly on: bare heads barely beat
        # storing everything (docs/results/2026-11-29-admission.md).
        self.op_head = nn.Sequential(nn.LayerNorm(hidden), nn.Linear(hidden, len(OPS)))
        self.type_head = nn.Sequential(nn.LayerNorm(hidden), nn.Linear(hidden, len(CONTENT_TYPES)))

    def train(self, mode: bool = True) -> AdmissionModel:
        """Train the projector and heads; the backbone stays in eval mode (no dropout, frozen)."""
        super().train(mode)
        self.backbone.eval()
        return self

    def trainable_state(self) -> dict[str, torch.Tensor]:
        """What training produces (projector + heads): the checkpoint, without the frozen backbone."""
        return {k: v for k, v in self.state_dict().items() if not k.startswith("backbone.")}

    def trainable_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters() if p.requires_grad)

    def forward(self, embeds: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        # NOTE: projector and heads stay float32; a bfloat16 backbone gets bfloat16 soft tokens.
        soft = self.projector(embeds).to(self.backbone.get_input_embeddings().weight.dtype)
        # NOTE: left padding + per-row positions: each real turn gets the position it would have alone.
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        out = self.backbone(inputs_embeds=soft, attention_mask=mask, position_ids=positions, use_cache=False)
        last = out.last_hidden_state[:, -1].float()
        return self.op_head(last), self.type_head(last)


def load_backbone(name_or_path: str, cache_dir: str | Path | None = None, device: str = "cpu",
                  dtype: str = "float32") -> nn.Module:
    """The frozen backbone's decoder stack in ``dtype`` ('float32' or 'bfloat16'), eval mode (``packaged:``
    names are resolved and converted)."""
    from transformers import AutoModelForCausalLM

    from core.model_store import resolve_model

    path = resolve_model(name_or_path, cache_dir)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=getattr(torch, dtype))
    return decoder_of(model).to(device).eval()


def quantize_int8(module: nn.Module) -> nn.Module:
    """``module`` with every ``nn.Linear`` replaced by a dynamically quantized int8 one (weights int8 per
    tensor, activations quantized per call); CPU only. The admission backbone's batch-1 pass is bound by
    reading its weights, so int8 reads a quarter of float32's bytes."""
    import warnings

    from torch.ao.quantization import quantize_dynamic

    with warnings.catch_warnings():
        # NOTE: torch 2.13 marks its quantized tensor types deprecated (to move to torchao); the pinned
        # torch still runs them, and they make the batch-1 pass faster (docs/results/2026-12-02-admission.md).
        warnings.filterwarnings("ignore", category=UserWarning, message=r".*deprecated.*")
        return quantize_dynamic(module, {nn.Linear}, dtype=torch.qint8)


def packaged_weights() -> Path:
    """The admission heads committed with the code (trained by ``python -m training.train_admission``; their
    settings name the commit and the data hash they were trained from)."""
    return Path(__file__).with_name(PACKAGED_WEIGHTS)


def configured_weights(config: EngramConfig) -> Path:
    """Where the service reads the admission weights: ``admission.weights`` ('packaged' = the committed heads,
    else a folder such as ``<cache_dir>/admission``, the training command's default output)."""
    where = config.admission.weights
    return packaged_weights() if where == "packaged" else Path(where).expanduser()


class AdmissionClassifier:
    """Loads backbone + trained projector/heads once; ``classify(chunks)`` decides a batch in one pass."""

    def __init__(self, model: AdmissionModel, threshold: float, max_batch: int = 64) -> None:
        self.model = model.eval()
        self.threshold = threshold
        self.max_batch = max_batch
        self.device = next(model.parameters()).device

    @classmethod
    def load(
        cls,
        path: str | Path,
        backbone_loader: Callable[[str], nn.Module] | None = None,
        device: str = "cpu",
        dtype: str = "float32",
        *,
        threshold: float | None = None,
        cache_dir: str | Path | None = None,
    ) -> AdmissionClassifier:
        """Read ``<path>/admission.pt`` + ``admission.json`` (written by ``python -m training.train_admission``).

        ``backbone_loader(name)`` builds the backbone the settings name (default: :func:`load_backbone` in
        ``dtype``, converted models under ``cache_dir``; ``int8`` loads float32 and quantizes the layers the
        exit keeps). The settings' ``exit_layer`` (how many layers the heads were trained after) decides how
        much of the backbone runs. The projector and heads always run in float32. ``threshold`` (the config's
        ``admission.threshold``) wins when given; else the trained threshold of the settings, else
        :data:`DEFAULT_THRESHOLD`.
        """
        path = Path(path)
        require_weights(path)
        weights, settings_file = path / WEIGHTS_FILE, path / SETTINGS_FILE
        settings: dict[str, Any] = json.loads(settings_file.read_text())
        load_dtype = "float32" if dtype == "int8" else dtype
        backbone_cache = cache_dir if cache_dir is not None else settings.get("cache_dir")
        loader = backbone_loader or (lambda name: load_backbone(name, backbone_cache, device, load_dtype))
        model = AdmissionModel(loader(settings["backbone"]), settings["embed_dim"], settings["projector_hidden"],
                               exit_layer=settings.get("exit_layer"))
        state = torch.load(weights, map_location="cpu", weights_only=True)
        missing, unexpected = model.load_state_dict(state, strict=False)
        missing = [k for k in missing if not k.startswith("backbone.")]
        if missing or unexpected:
            raise ValueError(f"{weights}: checkpoint does not fit the model (missing {missing}, extra {unexpected})")
        if dtype == "int8":
            model.backbone = quantize_int8(model.backbone)
        saved = settings.get("threshold")
        if threshold is not None:
            chosen, source = float(threshold), "configured"
        elif saved is not None:
            chosen, source = float(saved), "trained"
        else:
            chosen, source = DEFAULT_THRESHOLD, "default"
        log.info("admission classifier loaded from %s (exit after %d layers, %s, threshold %.3f, %s)", path,
                 model.exit_layer, dtype, chosen, source)
        return cls(model.to(device), threshold=chosen)

    @classmethod
    def from_config(cls, config: EngramConfig) -> AdmissionClassifier:
        """The trained classifier of ``config``: weights from :func:`configured_weights`, on ``admission.device``,
        backbone in ``admission.dtype``; ``admission.threshold`` when set, else the trained threshold."""
        acfg = config.admission
        return cls.load(configured_weights(config), device=acfg.device, dtype=acfg.dtype,
                        threshold=acfg.threshold, cache_dir=config.paths.cache_dir)

    @torch.inference_mode()
    def p_add(self, chunks: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """(p_add per chunk, content-type probabilities per chunk), in batches of ``max_batch``."""
        p_add, types = [], []
        for start in range(0, len(chunks), self.max_batch):
            embeds, mask = pad_chunks(chunks[start : start + self.max_batch])
            op, ctype = self.model(embeds.to(self.device), mask.to(self.device))
            p_add.append(op.float().softmax(-1)[:, 1].cpu().numpy())
            types.append(ctype.float().softmax(-1).cpu().numpy())
        if not p_add:
            return np.zeros(0, dtype=np.float32), np.zeros((0, len(CONTENT_TYPES)), dtype=np.float32)
        return np.concatenate(p_add), np.concatenate(types)

    def classify(self, chunks: Sequence[np.ndarray]) -> list[Decision]:
        """One decision per chunk (each chunk: its turn vectors, oldest first, the turn to decide last)."""
        p_add, types = self.p_add(chunks)
        return [
            Decision("ADD" if p >= self.threshold else "NOOP", CONTENT_TYPES[int(t.argmax())], float(p))
            for p, t in zip(p_add, types, strict=True)
        ]
