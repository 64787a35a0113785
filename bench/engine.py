"""The model engines, per model and backend: load time, memory, prefill and decode speed (docs/engine.md).

    python -m bench.engine --models smollm2-135m,qwen2.5-coder-0.5b,qwen2.5-coder-1.5b --backend transformers
    bin/loopback-only python -m bench.engine --models qwen2.5-coder-0.5b --backend vllm

Each (model, backend) runs in a child process of its own, so memory and load time are its alone:

- ``sha256_ok``: the model's GGUF has the registry's size and SHA-256 (checked before anything loads it);
- ``load_s``: building the engine from the converted folder (conversion, once per machine, happens before and is
  not timed; ``engram models fetch NAME`` does it ahead of time);
- ``rss_mb``: resident memory of the process and its children (vLLM's engine core) after the runs (weights paged
  in, caches filled); ``rss_load_mb`` right after the load (memory-mapped weights not yet read: a lower bound);
- ``prefill_tok_s``: prompt tokens / wall time of one ~1,000-token prompt answered with one token;
- ``decode_tok_s_1`` / ``decode_tok_s_8``: completion tokens / wall time for 1 and for 8 concurrent requests (one
  batch) of short prompts that ask for long lists, ``--max-tokens`` each, greedy, after one warm-up call.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from typing import Any

from bench.common import emit_json, setup_logging
from core import model_store
from core.config import load_config
from core.config.models import KNOWN_MODELS
from core.generation import GenerationRequest, TokenBill

BACKENDS = ("transformers", "vllm")
TOPICS = ["fruits", "animals", "countries", "colors", "sports", "tools", "rivers", "musical instruments"]
LONG_TEXT = ("The committee met on Tuesday to review the budget, the schedule and the hiring plan for the next "
             "quarter; each item was discussed at length and the notes were shared with everyone afterwards. ")


def _lists(n: int, max_tokens: int) -> list[GenerationRequest]:
    return [GenerationRequest(messages=[{"role": "user", "content": f"List fifty {TOPICS[i % len(TOPICS)]}, one per "
                                         "line."}], max_tokens=max_tokens) for i in range(n)]


def _rss_mb() -> float:
    import psutil

    me = psutil.Process()
    procs = [me, *me.children(recursive=True)]
    total = 0
    for p in procs:
        try:
            total += p.memory_info().rss
        except psutil.Error:
            pass
    return total / 2**20


def measure(name: str, backend: str, max_tokens: int, prompt_tokens: int) -> dict[str, Any]:
    """One model on one backend, in this process."""
    from serve.engine import build_engine

    cfg = load_config()
    model = model_store.known(name)
    if model is None:
        raise SystemExit(f"unknown model {name!r}; known: {', '.join(KNOWN_MODELS)}")
    try:
        model_store.verify(model_store.source_file(model, cfg.paths.cache_dir), model)
        sha_ok = True
    except model_store.ModelFileError:
        sha_ok = False
    model_store.convert(model, cfg.paths.cache_dir)  # NOTE: once per machine; not part of load_s
    ecfg = cfg.engine.model_copy(update={"backend": backend, "model": name, "cache_dir": str(cfg.paths.cache_dir)})
    t0 = time.perf_counter()
    engine = build_engine(ecfg)
    load_s = time.perf_counter() - t0
    rss_load = _rss_mb()
    engine.generate(_lists(1, 8))  # warm-up
    words = LONG_TEXT * max(1, prompt_tokens // 40)
    prefill = GenerationRequest(messages=[{"role": "user", "content": f"{words}\nSummarise this in one word."}],
                                max_tokens=1)
    t0 = time.perf_counter()
    [res] = engine.generate([prefill])
    prefill_tok_s = res.prompt_tokens / (time.perf_counter() - t0)
    decode: dict[int, float] = {}
    for n in (1, 8):
        t0 = time.perf_counter()
        bill = TokenBill.of(engine.generate(_lists(n, max_tokens)))
        decode[n] = bill.completion_tokens / (time.perf_counter() - t0)
    rss = _rss_mb()
    engine.close()
    return {"name": name, "backend": backend, "sha256_ok": sha_ok, "load_s": round(load_s, 2),
            "rss_mb": round(rss, 1), "rss_load_mb": round(rss_load, 1), "prefill_tok_s": round(prefill_tok_s, 1),
            "prefill_prompt_tokens": res.prompt_tokens, "decode_tok_s_1": round(decode[1], 2),
            "decode_tok_s_8": round(decode[8], 2), "max_tokens": max_tokens}


def _child(name: str, backend: str, args: argparse.Namespace) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "bench.engine", "--child", name, backend, "--max-tokens", str(args.max_tokens),
           "--prompt-tokens", str(args.prompt_tokens)]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    sys.stderr.write(done.stderr[-4000:])
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        return {"name": name, "backend": backend, "error": (done.stderr.strip().splitlines() or ["failed"])[-1]}
    return json.loads(lines[-1])


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default="smollm2-135m", help=f"comma list of {', '.join(KNOWN_MODELS)}")
    p.add_argument("--backend", default="transformers", help="comma list of transformers, vllm")
    p.add_argument("--max-tokens", type=int, default=64, help="completion tokens per decode request")
    p.add_argument("--prompt-tokens", type=int, default=1000, help="about this many tokens in the prefill prompt")
    p.add_argument("--child", nargs=2, metavar=("MODEL", "BACKEND"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        out = measure(*args.child, args.max_tokens, args.prompt_tokens)
        emit_json(out)
        return out
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    backends = [b.strip() for b in args.backend.split(",") if b.strip()]
    if unknown := [m for m in models if m not in KNOWN_MODELS]:
        p.error(f"--models: unknown {unknown}; known: {', '.join(KNOWN_MODELS)}")
    if not models or not backends or any(b not in BACKENDS for b in backends):
        p.error(f"--backend must be a comma list of {', '.join(BACKENDS)}")
    setup_logging()
    rows = []
    for name in models:
        for backend in backends:
            print(f"bench.engine: {name} on {backend}", file=sys.stderr)
            rows.append(_child(name, backend, args))
    out = {"models": rows}
    emit_json(out)
    return out


if __name__ == "__main__":  # NOTE: required for vLLM, whose engine core runs in a child process
    main()
