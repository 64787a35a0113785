"""Throughput of a generation engine: one request at a time vs one batch of 8 (numbers in docs/engine.md).

    python -m bench.engine_throughput --backend transformers
    ../shared/bin/loopback-only env VLLM_HOST_IP=127.0.0.1 python -m bench.engine_throughput --backend vllm

Completion tokens per second of wall time (prefill included), greedy, ``--max-tokens`` per request,
after one warm-up call. Prompts ask for lists so most completions run to the token cap.
"""

from __future__ import annotations

import argparse
import json
import time

from core.config import EngineConfig
from core.generation import GenerationRequest, TokenBill
from serve.engine import build_engine

TOPICS = ["fruits", "animals", "countries", "colors", "sports", "tools", "rivers", "musical instruments"]


def _requests(n: int, max_tokens: int) -> list[GenerationRequest]:
    return [
        GenerationRequest(
            messages=[{"role": "user", "content": f"List twenty {TOPICS[i % len(TOPICS)]}, one per line."}],
            max_tokens=max_tokens,
        )
        for i in range(n)
    ]


def measure(backend: str, max_tokens: int, singles: int, batch: int) -> dict[str, float]:
    t0 = time.perf_counter()
    engine = build_engine(EngineConfig(backend=backend))
    start_s = time.perf_counter() - t0
    engine.generate(_requests(1, 8))  # warm-up
    out: dict[str, float] = {"start_s": round(start_s, 1)}
    t0 = time.perf_counter()
    bill = sum(TokenBill.of(engine.generate([r])) for r in _requests(singles, max_tokens))
    wall = time.perf_counter() - t0
    out |= {"single_tok_s": round(bill.completion_tokens / wall, 1), "single_tokens": bill.completion_tokens}
    t0 = time.perf_counter()
    bill = TokenBill.of(engine.generate(_requests(batch, max_tokens)))
    wall = time.perf_counter() - t0
    out |= {
        f"batch{batch}_tok_s": round(bill.completion_tokens / wall, 1),
        f"batch{batch}_tokens": bill.completion_tokens,
    }
    engine.close()
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--backend", choices=["transformers", "vllm"], default="transformers")
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--singles", type=int, default=3, help="requests sent one at a time")
    p.add_argument("--batch", type=int, default=8, help="requests sent in one call")
    a = p.parse_args()
    print(json.dumps({"backend": a.backend, **measure(a.backend, a.max_tokens, a.singles, a.batch)}))


if __name__ == "__main__":  # NOTE: required for vLLM, whose engine core runs in a child process
    main()
