"""Config of the training and benchmark code: read by ``training/`` and ``bench/`` only, never by the service.

``training.admission`` steers ``python -m training.train_admission`` (what the service loads is the result:
``admission.weights``); ``bench`` holds what only a benchmark reads (its baselines, its extra data sets).
"""

from __future__ import annotations

from pathlib import Path

from pydantic import Field

from core.config.base import Section, default_shared


class AdmissionTrainingConfig(Section):
    """Training of the admission classifier's projector and heads (MemRouter) on the train split."""

    exit_layer: int | None = Field(
        None,
        ge=0,
        le=1024,
        description="The heads read the hidden state after this many backbone layers (None = all); the "
        "layers after it never run. The classifier takes the value its weights were trained with.",
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
    type_labels: str = Field(
        "teacher",
        min_length=1,
        description="Where the content-type labels come from: 'teacher' (the committed labels of "
        "python -m training.content_teacher, Qwen2.5-Coder-1.5B restricted to the six types: "
        "bench/labels/content_types_teacher.jsonl), a path to such a file, or 'rule' (the keyword rule "
        "inference.admission.content_type_rule).",
    )
    max_train_minutes: float = Field(
        20.0,
        gt=0,
        le=10_000,
        description="Wall-time budget of training; the step that crosses it ends training (then held-out evaluation).",
    )
    seed: int = Field(0, ge=0, le=2**31 - 1, description="Seed of initialisation and shuffling.")


class TrainingConfig(Section):
    admission: AdmissionTrainingConfig = Field(default_factory=AdmissionTrainingConfig)


class BenchConfig(Section):
    """What only the benchmarks read."""

    rag_top_k: int = Field(10, gt=0, le=1000, description="Turns the plain-RAG baseline gives the answer model.")
    bgl_path: Path = Field(
        default_factory=lambda: default_shared("data", "bgl", "BGL_2k.log"), description="BGL_2k.log."
    )
