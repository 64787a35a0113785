"""The local model store: verified GGUF files and the Hugging Face folders converted from them, in the cache.

Layout under ``<cache_dir>/models`` (never in the repository)::

    gguf/<file>.gguf            an assembled file, kept only once its size and SHA-256 match the registry
    <title>/                    the HF folder the engines load (fp32 weights, tokenizer, generation config),
                                with ``engram-converted.json`` written last (a folder without it is redone)
    adapted/<name>-<sha12>/     a base model with a committed LoRA adapter merged in (``ADAPTED_MODELS``), one
                                folder per adapter file (a retrained adapter gets a new folder)

:func:`assemble` joins a model's pieces in order and verifies the result (a wrong or missing piece is refused and
nothing is kept); :func:`convert` turns a verified GGUF into the HF folder once (transformers de-quantizes the
GGUF; it will not save such a model, so a fresh model of the same architecture takes the weights, the logits are
checked, and that one is saved); :func:`merge_adapter` adds a committed LoRA adapter into a converted base once.
:func:`resolve_model` maps a config's model name to a loadable path. Fetching
the pieces from the package registry is ``cluster/model_fetch.py`` (``engram models fetch NAME``).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import logging
import os
import shutil
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Literal

from core.cache import default_cache_dir
from core.config.models import ADAPTED_MODELS, ALIASES, KNOWN_MODELS, PACKAGED_SMOLLM2, AdaptedModel, KnownModel

log = logging.getLogger(__name__)
MARKER = "engram-converted.json"
FORMAT_VERSION = 1
CHUNK = 1 << 20
Progress = Callable[[int], object]  # called with the bytes just processed
State = Literal["absent", "verified", "converted"]


class ModelFileError(RuntimeError):
    """A model file that is missing, incomplete or not the file the registry names (it is never loaded)."""


def known(name: str) -> KnownModel | None:
    """The registry entry of ``name`` (or of its alias), None for hub names and paths."""
    return KNOWN_MODELS.get(ALIASES.get(name, name))


def store(cache_dir: str | Path | None = None) -> Path:
    return Path(cache_dir or default_cache_dir()).expanduser() / "models"


def gguf_path(model: KnownModel, cache_dir: str | Path | None = None) -> Path:
    return store(cache_dir) / "gguf" / model.file


def converted_dir(model: KnownModel, cache_dir: str | Path | None = None) -> Path:
    """``<cache_dir>/models/<title>``, e.g. ``~/.cache/engram/models/SmolLM2-135M-Instruct``."""
    return store(cache_dir) / model.title


def installed_file(model: KnownModel) -> Path | None:
    """The whole file inside an installed package (``model.installed``), found without importing it."""
    if model.installed is None:
        return None
    spec = importlib.util.find_spec(model.installed)
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / model.file
    return path if path.is_file() else None


def sha256_of(path: Path, progress: Progress | None = None) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(CHUNK):
            digest.update(chunk)
            if progress is not None:
                progress(len(chunk))
    return digest.hexdigest()


def verify(path: Path, model: KnownModel, progress: Progress | None = None) -> None:
    """Raise :class:`ModelFileError` unless ``path`` has the registry's size and SHA-256."""
    size = path.stat().st_size
    if size != model.size:
        raise ModelFileError(f"{path} has {size:,} bytes; {model.name} has {model.size:,}")
    found = sha256_of(path, progress)
    if found != model.sha256:
        raise ModelFileError(f"{path} has SHA-256 {found}; {model.name} has {model.sha256}")


def assemble(model: KnownModel, pieces: Iterable[Path], cache_dir: str | Path | None = None,
             progress: Progress | None = None) -> Path:
    """Concatenate ``pieces`` (in part order) into the store, verify, and return the file's path.

    The file is written beside its final name and renamed only once verified: a wrong size or hash deletes it
    (``ModelFileError``), so nothing ever loads a file the registry does not name."""
    pieces = [Path(p) for p in pieces]
    if len(pieces) != len(model.parts):
        raise ModelFileError(f"{model.name} has {len(model.parts)} parts; {len(pieces)} given")
    missing = [str(p) for p in pieces if not p.is_file()]
    if missing:
        raise ModelFileError(f"missing part(s) of {model.name}: {', '.join(missing)}")
    target = gguf_path(model, cache_dir)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.tmp-{os.getpid()}")
    digest, size = hashlib.sha256(), 0
    try:
        with tmp.open("wb") as out:
            for piece in pieces:
                with piece.open("rb") as f:
                    while chunk := f.read(CHUNK):
                        out.write(chunk)
                        digest.update(chunk)  # NOTE: hashed as written: one pass over the bytes
                        size += len(chunk)
                        if progress is not None:
                            progress(len(chunk))
        if size != model.size:
            raise ModelFileError(f"the parts of {model.name} add up to {size:,} bytes, not {model.size:,}")
        if digest.hexdigest() != model.sha256:
            raise ModelFileError(f"the parts of {model.name} have SHA-256 {digest.hexdigest()}, not {model.sha256}; "
                                 "nothing was kept")
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    return target


def is_converted(path: str | Path) -> bool:
    """True when ``path`` holds a finished conversion (its marker, written last, is present and readable)."""
    try:
        return json.loads((Path(path) / MARKER).read_text()).get("format_version") == FORMAT_VERSION
    except (OSError, ValueError):
        return False


def state(model: KnownModel, cache_dir: str | Path | None = None) -> State:
    """'converted' (loadable), 'verified' (the GGUF is in the store or installed, not converted yet) or 'absent'."""
    if is_converted(converted_dir(model, cache_dir)):
        return "converted"
    if gguf_path(model, cache_dir).is_file() or installed_file(model) is not None:
        return "verified"
    return "absent"


def source_file(model: KnownModel, cache_dir: str | Path | None = None) -> Path:
    """The model's GGUF: in the store (verified when it was assembled) or in its installed package (verified now)."""
    stored = gguf_path(model, cache_dir)
    if stored.is_file():
        return stored
    packaged = installed_file(model)
    if packaged is None:
        raise ModelFileError(f"{model.name} is not in {store(cache_dir)}: run `engram models fetch {model.name}`")
    verify(packaged, model)
    return packaged


def publish(target: Path, build: Callable[[Path], object], marker: dict[str, object], force: bool = False) -> float:
    """Fill a temporary sibling of ``target`` with ``build(tmp)``, write the marker (``marker`` plus the format
    version and the seconds spent) last, and rename it into place — unless another process finished ``target``
    first (then its folder is kept; ``force`` replaces it). Two processes building at once (e.g. two replicas on
    first use) never see a half-written folder. Returns the seconds the build took."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.parent / f".{target.name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    t0 = time.perf_counter()
    try:
        build(tmp)
        seconds = time.perf_counter() - t0
        (tmp / MARKER).write_text(json.dumps({
            "format_version": FORMAT_VERSION, **marker, "seconds": round(seconds, 1)}, indent=2))
        if is_converted(target) and not force:
            log.info("another process finished %s first; keeping it", target)
        else:
            shutil.rmtree(target, ignore_errors=True)  # a half-written or forced-over folder
            os.replace(tmp, target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return seconds


def convert(model: KnownModel, cache_dir: str | Path | None = None, force: bool = False) -> Path:
    """Convert the model's GGUF to its HF folder (built by :func:`publish`) and return the folder; a no-op when
    already done."""
    target = converted_dir(model, cache_dir)
    if is_converted(target) and not force:
        return target
    gguf = source_file(model, cache_dir)
    seconds = publish(target, lambda tmp: _convert_into(gguf, tmp, model.architecture),
                      {"model": model.name, "source": str(gguf), "sha256": model.sha256}, force=force)
    log.info("converted %s -> %s in %.1f s", gguf.name, target, seconds)
    return target


def _convert_into(gguf: Path, out: Path, architecture: str) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    src_dir, name = str(gguf.parent), gguf.name
    tokenizer = AutoTokenizer.from_pretrained(src_dir, gguf_file=name)
    loaded = AutoModelForCausalLM.from_pretrained(src_dir, gguf_file=name, dtype=torch.float32)
    if loaded.config.model_type != architecture:
        raise ModelFileError(f"{gguf} holds a {loaded.config.model_type!r} model, not {architecture!r}")
    # NOTE: transformers will not save a GGUF-loaded model; a fresh model from the same config (minus
    # quantization_config) takes the same weights (assigned, not copied: no second copy in memory) and saves.
    cfg = loaded.config.to_dict()
    cfg.pop("quantization_config", None)
    with torch.device("meta"):
        fresh = type(loaded)(type(loaded.config).from_dict(cfg))
    fresh.load_state_dict(loaded.state_dict(), assign=True)
    for name, buffer in loaded.named_buffers():  # NOTE: non-persistent buffers (RoPE) are not in the state dict
        owner, _, key = name.rpartition(".")
        fresh.get_submodule(owner)._buffers[key] = buffer
    fresh.tie_weights()
    fresh.eval()
    fresh.generation_config = loaded.generation_config

    probe = tokenizer("The capital of France is", return_tensors="pt").input_ids
    with torch.no_grad():
        diff = (loaded(probe).logits - fresh(probe).logits).abs().max().item()
    if diff != 0.0:
        raise RuntimeError(f"converted {name} disagrees with the GGUF model (max |logit diff| = {diff})")
    out.mkdir(parents=True)
    fresh.save_pretrained(out)
    tokenizer.save_pretrained(out)


ADAPTER_FILE, ADAPTER_SETTINGS = "adapter.safetensors", "adapter.json"
TOKENIZER_FILES = ("tokenizer", "special_tokens_map", "vocab", "merges", "chat_template", "added_tokens")


def adapted(name: str) -> AdaptedModel | None:
    """The :data:`ADAPTED_MODELS` entry of ``name``, else None."""
    return ADAPTED_MODELS.get(name)


def adapter_folder(model: AdaptedModel) -> Path:
    """``model.adapter`` inside the installed ``inference`` package (found without importing it)."""
    spec = importlib.util.find_spec("inference")
    if spec is None or not spec.submodule_search_locations:
        raise ModelFileError(f"{model.name}: the inference package that holds its adapter is not installed")
    return Path(next(iter(spec.submodule_search_locations))) / model.adapter


def adapter_file(model: AdaptedModel) -> Path:
    """The adapter's weights; raises ``ModelFileError``, naming the command that trains it, when missing."""
    weights = adapter_folder(model) / ADAPTER_FILE
    if not weights.is_file():
        raise ModelFileError(f"{model.name}: its adapter {weights} is missing (retrain it with "
                             f"`python -m training.train_reader --out inference/{model.adapter}`)")
    return weights


def adapted_dir(model: AdaptedModel, cache_dir: str | Path | None = None, digest: str | None = None) -> Path:
    """``<cache_dir>/models/adapted/<name>-<first 12 hex of the adapter file's SHA-256>`` (``digest``: that
    SHA-256 when the caller has it)."""
    digest = digest or sha256_of(adapter_file(model))
    return store(cache_dir) / "adapted" / f"{model.name}-{digest[:12]}"


def merge_adapter(model: AdaptedModel, cache_dir: str | Path | None = None) -> Path:
    """The base model with ``model``'s adapter merged into its weights, as an HF folder built once by
    :func:`publish`; a no-op when present."""
    weights = adapter_file(model)
    digest = sha256_of(weights)
    target = adapted_dir(model, cache_dir, digest)
    if is_converted(target):
        return target
    base = known(model.base)
    if base is None:
        raise ValueError(f"{model.name}: base {model.base!r} is not a registry model")
    base_dir = convert(base, cache_dir)
    settings = json.loads((weights.parent / ADAPTER_SETTINGS).read_text())
    if settings.get("base") != base.name:
        raise ModelFileError(f"{weights.parent} adapts {settings.get('base')!r}, not {base.name!r}")

    def build(tmp: Path) -> None:
        import torch
        from safetensors.torch import load_file
        from transformers import AutoModelForCausalLM

        from core.lora import merge

        loaded = AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32)
        merge(loaded, load_file(str(weights)), float(settings["scale"]))
        loaded.save_pretrained(tmp)
        for f in base_dir.iterdir():  # the tokenizer's files, as they are
            if f.is_file() and f.name.startswith(TOKENIZER_FILES):
                shutil.copy2(f, tmp / f.name)

    seconds = publish(target, build, {"model": model.name, "base": base.name, "base_sha256": base.sha256,
                                      "adapter": model.adapter, "adapter_sha256": digest})
    log.info("merged %s's adapter into %s -> %s in %.1f s", model.name, base.name, target, seconds)
    return target


def resolve_model(name_or_path: str, cache_dir: str | Path | None = None) -> str:
    """Map a model name from a config to something ``from_pretrained`` / vLLM can load.

    A registry name (``smollm2-135m``, ``qwen2.5-coder-0.5b``, ...; ``packaged:SmolLM2-135M-Instruct`` is
    ``smollm2-135m``) -> its converted folder, converting on first use when the verified GGUF is there (SmolLM2's
    comes with its installed package; the one conversion is slow, later calls are not:
    docs/results/2026-11-29-engine.md); a model not fetched yet raises ``ModelFileError`` naming the fetch
    command. An adapted name (``smollm2-135m-reader``) -> its base with the committed adapter merged in, built
    once. Any other string (hub name, local folder) is returned unchanged."""
    if (tuned := adapted(name_or_path)) is not None:
        return str(merge_adapter(tuned, cache_dir))
    model = known(name_or_path)
    if model is None:
        if name_or_path.startswith("packaged:"):
            raise ValueError(f"unknown packaged model {name_or_path!r}; known: {PACKAGED_SMOLLM2!r}")
        return name_or_path
    if state(model, cache_dir) != "converted":
        log.info("first use of %s: converting its GGUF into %s (once)", model.name, converted_dir(model, cache_dir))
    return str(convert(model, cache_dir))
