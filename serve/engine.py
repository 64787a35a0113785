"""Small-model generation engines: two backends of ``core.generation.GenerationEngine`` (plain classes, no Ray).

Assistants (evidence extraction) and the master model call an engine with many requests at once; the
engine runs them as one batched model call and bills the tokens of each::

    engine = build_engine(EngineConfig(backend="transformers"))
    ask = GenerationRequest(messages=[{"role": "user", "content": "What is the capital of France?"}])
    [r] = engine.generate([ask])
    r.text              # 'The capital of France is Paris.'
    r.bill              # TokenBill(prompt_tokens=37, completion_tokens=8, calls=1)

Backends:
- :class:`TransformersEngine`: HF ``generate`` with left padding; ``choice`` is decided by scoring every
  choice's log-likelihood (valid by construction); ``regex`` / ``json_schema`` are not supported.
- :class:`VLLMEngine`: vLLM's offline ``LLM`` (continuous batching, xgrammar structured outputs).
  NOTE: vLLM runs its engine in a child process, so a script that builds one needs an
  ``if __name__ == "__main__":`` guard; on CPU it must also run where Ray/vLLM cannot dial an external
  address (the loopback-only namespace here).
"""

from __future__ import annotations

import copy
import logging
import os
from collections.abc import Iterable, Sequence
from typing import Any

from core.config import EngineConfig
from core.generation import GenerationEngine, GenerationRequest, GenerationResult
from core.model_store import resolve_model
from serve.prefix_cache import PrefixCache

log = logging.getLogger(__name__)


def render_prompt(tokenizer: Any, request: GenerationRequest) -> list[int]:
    """Token ids the model reads: the chat template with the assistant turn opened, or the raw prompt."""
    if request.messages is not None:
        text = tokenizer.apply_chat_template(
            [m.model_dump() for m in request.messages], tokenize=False, add_generation_prompt=True
        )
        return list(tokenizer(text, add_special_tokens=False).input_ids)
    return list(tokenizer(request.prompt).input_ids)


def continuation_ids(tokenizer: Any, request: GenerationRequest) -> list[int]:
    """Token ids of a scored request's continuation, tokenised on its own (no special tokens)."""
    return list(tokenizer(request.continuation, add_special_tokens=False).input_ids)


SHARED_PREFIX_MIN = 256  # prompt tokens from which a choice's options share one read of the prompt
SHARED_ROW_TOKENS = 512  # option tokens read side by side in one row after a shared prompt


def scored_result(prompt_len: int, logprobs: Sequence[float]) -> GenerationResult:
    """The result of a scored request: no text, the continuation's log-probabilities."""
    return GenerationResult("", prompt_len + len(logprobs), 0, "stop",
                            continuation_logprobs=tuple(float(x) for x in logprobs))


def _check_fits(i: int, prompt_len: int, budget: int, max_model_len: int) -> None:
    if prompt_len + budget > max_model_len:
        raise ValueError(
            f"request {i}: {prompt_len} prompt tokens + {budget} completion tokens "
            f"exceed max_model_len={max_model_len}"
        )


class TransformersEngine:
    """HF transformers backend: batched greedy/sampled ``generate`` and exact choice scoring."""

    supports_regex = False

    def __init__(self, config: EngineConfig | None = None) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.config = config or EngineConfig(backend="transformers")
        if self.config.num_threads is not None:
            torch.set_num_threads(self.config.num_threads)
        self.max_model_len = self.config.max_model_len
        path = resolve_model(self.config.model, self.config.cache_dir)
        dtype = "auto" if self.config.dtype == "auto" else getattr(torch, self.config.dtype)
        self.tokenizer = AutoTokenizer.from_pretrained(path)
        self.model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype).to(self.config.device).eval()
        eos = self.model.generation_config.eos_token_id
        self._eos_ids = set(
            eos if isinstance(eos, list) else [eos if eos is not None else self.tokenizer.eos_token_id]
        )
        self._eos = min(self._eos_ids)
        self._pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else self._eos
        self._torch = torch
        # NOTE: one-prompt calls (the master's) reuse the KV cache of a recent prompt with the same beginning
        self.prefix = PrefixCache(self.config.prefix_cache_entries, self.config.prefix_cache_min_tokens)

    def generate(self, requests: Sequence[GenerationRequest]) -> list[GenerationResult]:
        for i, r in enumerate(requests):
            if r.constraint in ("regex", "json_schema"):
                raise NotImplementedError(
                    f"request {i}: TransformersEngine cannot constrain output to a {r.constraint}; use "
                    "backend='vllm' (xgrammar structured outputs) or a 'choice' constraint"
                )
            if r.choice is not None and r.temperature > 0:
                raise NotImplementedError(
                    f"request {i}: TransformersEngine decides 'choice' by maximum likelihood, "
                    "at temperature 0 only"
                )
        prompts = [render_prompt(self.tokenizer, r) for r in requests]
        choices: dict[int, list[list[int]]] = {}
        scored: dict[int, list[int]] = {}
        for i, (r, ids) in enumerate(zip(requests, prompts, strict=True)):
            if r.continuation is not None:
                scored[i] = continuation_ids(self.tokenizer, r)
                _check_fits(i, len(ids), len(scored[i]), self.max_model_len)
            elif r.choice is not None:
                choices[i] = [self.tokenizer(c, add_special_tokens=False).input_ids for c in r.choice]
                _check_fits(i, len(ids), max(map(len, choices[i])) + 1, self.max_model_len)
            else:
                _check_fits(i, len(ids), r.max_tokens or self.config.max_tokens, self.max_model_len)

        results: list[GenerationResult] = [None] * len(requests)  # type: ignore[list-item]
        free = [i for i in range(len(requests)) if i not in choices and i not in scored]
        # NOTE: generate takes one sampling setting per call, hence one group per temperature.
        for temp in sorted({requests[i].temperature for i in free}):
            group = [i for i in free if requests[i].temperature == temp]
            for chunk in self._chunks(group, lambda i: len(prompts[i])):
                budgets = [requests[i].max_tokens or self.config.max_tokens for i in chunk]
                outs = self._generate_chunk([prompts[i] for i in chunk], budgets, temp)
                for i, res in zip(chunk, outs, strict=True):
                    results[i] = res
        # Choice: score every (prompt, choice) pair, keep the likeliest choice per request. A long prompt is read
        # once and its KV cache shared by its choices; short ones are scored as whole sequences, many per batch.
        scores: dict[tuple[int, int], float] = {}
        shared = [i for i in choices
                  if len(prompts[i]) >= SHARED_PREFIX_MIN and len(choices[i]) > 1 and all(choices[i])]
        for i in shared:
            for j, score in enumerate(self._score_shared(prompts[i], choices[i])):
                scores[i, j] = score
        pairs = [(i, j) for i in choices if i not in shared for j in range(len(choices[i]))]
        for chunk in self._chunks(pairs, lambda ij: len(prompts[ij[0]]) + len(choices[ij[0]][ij[1]])):
            for ij, score in zip(
                chunk, self._score([(prompts[i], choices[i][j]) for i, j in chunk]), strict=True
            ):
                scores[ij] = score
        for chunk in self._chunks(list(scored), lambda i: len(prompts[i]) + len(scored[i])):
            for i, logprobs in zip(chunk, self._token_logprobs([(prompts[i], scored[i]) for i in chunk]), strict=True):
                results[i] = scored_result(len(prompts[i]), logprobs)
        for i, options in choices.items():
            ranked = sorted(range(len(options)), key=lambda j: -scores[i, j])
            texts = requests[i].choice or []
            results[i] = GenerationResult(
                texts[ranked[0]],
                len(prompts[i]),
                len(options[ranked[0]]) + 1,
                "stop",
                {texts[j]: scores[i, j] for j in ranked},
            )
        return results

    def _chunks(self, items: list[Any], length: Any) -> Iterable[list[Any]]:
        """Batches of at most max_batch_size, similar lengths together so padding wastes little."""
        ordered = sorted(items, key=length)
        for start in range(0, len(ordered), self.config.max_batch_size):
            yield ordered[start : start + self.config.max_batch_size]

    def _left_pad(self, seqs: list[list[int]]) -> dict[str, Any]:
        """Left-padded batch with the positions each row would have alone (as ``generate`` computes them)."""
        torch, width = self._torch, max(map(len, seqs))
        ids = torch.tensor([[self._pad] * (width - len(s)) + s for s in seqs], device=self.model.device)
        mask = torch.tensor([[0] * (width - len(s)) + [1] * len(s) for s in seqs], device=self.model.device)
        return {"input_ids": ids, "attention_mask": mask, "position_ids": (mask.cumsum(-1) - 1).clamp(min=0)}

    def _generate_chunk(
        self, prompts: list[list[int]], budgets: list[int], temp: float
    ) -> list[GenerationResult]:
        if len(prompts) == 1 and self.prefix.entries > 0:
            return [self._generate_one(prompts[0], budgets[0], temp)]
        batch = self._left_pad(prompts)
        batch.pop("position_ids")  # generate derives them from the mask
        sampling = {"temperature": temp} if temp > 0 else {}  # other knobs: the model's generation config
        with self._torch.inference_mode():
            out = self.model.generate(
                **batch,
                max_new_tokens=max(budgets),
                do_sample=temp > 0,
                pad_token_id=self._pad,
                eos_token_id=sorted(self._eos_ids),
                **sampling,
            )
        width = batch["input_ids"].shape[1]
        return [self._result(row, budget, len(prompt))
                for row, budget, prompt in zip(out[:, width:].tolist(), budgets, prompts, strict=True)]

    def _generate_one(self, prompt: list[int], budget: int, temp: float) -> GenerationResult:
        """One prompt, read from the longest cached prefix on (:class:`PrefixCache`); its cache kept after."""
        torch = self._torch
        _, cache = self.prefix.lookup(prompt)
        ids = torch.tensor([prompt], device=self.model.device)
        sampling = {"temperature": temp} if temp > 0 else {}
        with torch.inference_mode():
            out = self.model.generate(
                input_ids=ids,
                attention_mask=torch.ones_like(ids),
                past_key_values=cache,  # NOTE: None: generate starts a cache of its own
                max_new_tokens=budget,
                do_sample=temp > 0,
                pad_token_id=self._pad,
                eos_token_id=sorted(self._eos_ids),
                return_dict_in_generate=True,
                **sampling,
            )
        self.prefix.store(prompt, out.past_key_values)
        return self._result(out.sequences[0, len(prompt):].tolist(), budget, len(prompt))

    def _result(self, row: list[int], budget: int, prompt_tokens: int) -> GenerationResult:
        """A generated row (maybe past its end-of-turn token or budget) -> its result."""
        row = row[:budget]
        stop = next((k for k, t in enumerate(row) if t in self._eos_ids), None)
        kept = row if stop is None else row[: stop + 1]
        text = self.tokenizer.decode(kept if stop is None else kept[:-1], skip_special_tokens=True)
        return GenerationResult(text, prompt_tokens, len(kept), "length" if stop is None else "stop")

    def _score(self, pairs: list[tuple[list[int], list[int]]]) -> list[float]:
        """log P(choice tokens + end-of-turn | prompt) per (prompt, choice) pair: a full-sequence score.

        NOTE: each pair is a full forward pass (k choices cost k prompt passes): fine for short decisions
        (ADD/NOOP, yes/no) batched many at a time; prompts of :data:`SHARED_PREFIX_MIN` tokens or more go through
        :meth:`_score_shared` instead.
        """
        return [sum(lp) for lp in self._token_logprobs([(p, c + [self._eos]) for p, c in pairs])]

    def _score_shared(self, prompt: list[int], options: list[list[int]]) -> list[float]:
        """The same scores as :meth:`_score` for one prompt's options: the prompt is read once (its last position
        scores every option's first token), then the options are read side by side in one row after it, each
        attending to the prompt and to its own earlier tokens only (a 4D mask and per-option positions), at most
        :data:`SHARED_ROW_TOKENS` option tokens per row. No option repeats the prompt's KV cache.

        NOTE: repeating the cache per option (a batch of options) costs a copy of the whole cache per option, and
        the grouped-query attention expands each copy again: ~20 s for 41 line numbers after a 1,600-token prompt
        with the 1.5B model on 2 cores."""
        torch = self._torch
        scores: list[float] = []
        with torch.inference_mode():
            prefix, last = self._read(prompt)
            first = torch.log_softmax(last.float(), dim=-1)
            rows: list[list[int]] = [[]]
            for j, option in enumerate(options):
                if rows[-1] and sum(len(options[k]) for k in rows[-1]) + len(option) > SHARED_ROW_TOKENS:
                    rows.append([])
                rows[-1].append(j)
            scored: dict[int, float] = {}
            for n, row in enumerate(rows):
                cache = prefix if n == len(rows) - 1 else copy.deepcopy(prefix)  # NOTE: reading extends the cache
                logp, starts = self._read_side_by_side(len(prompt), [options[j] for j in row], cache)
                for j, start in zip(row, starts, strict=True):
                    option = options[j]
                    targets = [*option[1:], self._eos]  # each option token predicts the next, the last the end
                    scored[j] = float(first[option[0]] + sum(logp[start + m, t] for m, t in enumerate(targets)))
            scores = [scored[j] for j in range(len(options))]
        return scores

    def _read_side_by_side(self, past: int, options: list[list[int]], cache: Any) -> tuple[Any, list[int]]:
        """Log-probabilities after each token of ``options`` read in one row after a cached prompt of ``past``
        tokens, each option seeing the prompt and its own earlier tokens only; and where each option starts."""
        torch = self._torch
        device = self.model.device
        starts, flat, positions = [], [], []
        for option in options:
            starts.append(len(flat))
            flat += option
            positions += range(past, past + len(option))
        n = len(flat)
        allowed = torch.zeros(n, past + n, dtype=torch.bool)
        allowed[:, :past] = True
        for start, option in zip(starts, options, strict=True):
            for m in range(len(option)):
                allowed[start + m, past + start : past + start + m + 1] = True
        dtype = self.model.dtype
        mask = torch.zeros(n, past + n, dtype=dtype).masked_fill(~allowed, torch.finfo(dtype).min)
        logits = self.model(input_ids=torch.tensor([flat], device=device),
                            position_ids=torch.tensor([positions], device=device),
                            attention_mask=mask[None, None].to(device), past_key_values=cache, use_cache=True).logits
        return torch.log_softmax(logits[0].float(), dim=-1), starts

    def _read(self, ids: list[int]) -> tuple[Any, Any]:
        """The KV cache of ``ids`` (from the longest cached prefix on; a copy is kept in :attr:`prefix`) and the
        logits its last position gives the next token."""
        torch = self._torch
        k, cache = self.prefix.lookup(ids)
        out = self.model(input_ids=torch.tensor([ids[k:]], device=self.model.device), past_key_values=cache,
                         use_cache=True, logits_to_keep=1)
        if self.prefix.entries > 0:
            self.prefix.store(ids, copy.deepcopy(out.past_key_values))
        return out.past_key_values, out.logits[0, -1]

    def _token_logprobs(self, pairs: list[tuple[list[int], list[int]]]) -> list[list[float]]:
        """log P(each target token | prompt and the targets before it), per (prompt, targets) pair.

        Left padding puts every target at the end of its row, so only the last few positions need logits.
        """
        torch = self._torch
        keep = max(len(t) for _, t in pairs) + 1
        batch = self._left_pad([p + t for p, t in pairs])
        with torch.inference_mode():
            logits = self.model(**batch, logits_to_keep=keep).logits.float()
        logp = torch.log_softmax(logits[:, :-1], dim=-1)  # position k predicts token k + 1
        out = []
        for row, (_, t) in enumerate(pairs):
            picked = logp[row, keep - 1 - len(t) :].gather(-1, torch.tensor(t, device=logp.device)[:, None])
            out.append(picked.squeeze(-1).tolist())
        return out

    def close(self) -> None:
        self.model = None  # type: ignore[assignment]


def cpu_ranges(cpus: Iterable[int]) -> str:
    """Compress core ids into vLLM's binding syntax: ``cpu_ranges({0, 1, 2, 5}) == "0-2,5"``."""
    parts: list[str] = []
    for c in sorted(set(cpus)):
        if parts and int(parts[-1].split("-")[-1]) == c - 1:
            parts[-1] = f"{parts[-1].split('-')[0]}-{c}"
        else:
            parts.append(str(c))
    return ",".join(parts)


def vllm_env(config: EngineConfig) -> dict[str, str]:
    """Environment vLLM reads at start-up; variables already set in the process win (and are logged)."""
    wanted = {
        "VLLM_CPU_KVCACHE_SPACE": str(config.kv_cache_gib),
        "VLLM_CPU_OMP_THREADS_BIND": config.cpu_threads_bind or cpu_ranges(os.sched_getaffinity(0)),
        # NOTE: vLLM (like Ray) otherwise advertises the machine's external address.
        "VLLM_HOST_IP": "127.0.0.1",
    }
    for key, value in wanted.items():
        if os.environ.get(key, value) != value:
            log.info(
                "%s=%s from the environment overrides the engine config (%s)", key, os.environ[key], value
            )
        os.environ.setdefault(key, value)
    return {k: os.environ[k] for k in wanted}


class VLLMEngine:
    """vLLM backend (offline ``LLM``); build it under a ``__main__`` guard (engine core: a child process)."""

    supports_regex = True

    def __init__(self, config: EngineConfig | None = None) -> None:
        self.config = config or EngineConfig(backend="vllm")
        self.max_model_len = self.config.max_model_len
        path = resolve_model(self.config.model, self.config.cache_dir)
        log.info("vLLM environment: %s", vllm_env(self.config))  # NOTE: before vllm is imported
        from transformers import AutoTokenizer
        from vllm import LLM
        from vllm.sampling_params import SamplingParams, StructuredOutputsParams

        self._params, self._structured = SamplingParams, StructuredOutputsParams
        self.tokenizer = AutoTokenizer.from_pretrained(path)
        self._llm = LLM(
            model=path,
            dtype=self.config.dtype,
            max_model_len=self.max_model_len,
            enforce_eager=self.config.enforce_eager,
            gpu_memory_utilization=self.config.gpu_memory_utilization,
            seed=self.config.seed,
        )

    def _sampling(self, r: GenerationRequest) -> Any:
        if r.continuation is not None:  # read the prompt, report its tokens' log-probabilities, emit one token
            return self._params(max_tokens=1, temperature=0.0, prompt_logprobs=0)
        so = None
        max_tokens = r.max_tokens or self.config.max_tokens
        if r.choice is not None:
            so = self._structured(choice=list(r.choice))
            if r.max_tokens is None:  # room for the longest choice and the end-of-turn token
                longest = max(len(self.tokenizer(c, add_special_tokens=False).input_ids) for c in r.choice)
                max_tokens = max(max_tokens, longest + 1)
        elif r.regex is not None:
            so = self._structured(regex=r.regex)
        elif r.json_schema is not None:
            so = self._structured(json=r.json_schema)
        return self._params(max_tokens=max_tokens, temperature=r.temperature, structured_outputs=so)

    def generate(self, requests: Sequence[GenerationRequest]) -> list[GenerationResult]:
        from vllm.inputs import TokensPrompt

        prompts = [render_prompt(self.tokenizer, r) for r in requests]
        tails = [continuation_ids(self.tokenizer, r) if r.continuation is not None else [] for r in requests]
        params = [self._sampling(r) for r in requests]
        for i, (ids, tail, sp) in enumerate(zip(prompts, tails, params, strict=True)):
            _check_fits(i, len(ids) + len(tail), sp.max_tokens, self.max_model_len)
        if not requests:
            return []
        outs = self._llm.generate(
            [TokensPrompt(prompt_token_ids=ids + tail) for ids, tail in zip(prompts, tails, strict=True)],
            params, use_tqdm=False,
        )
        results = []
        for ids, tail, o in zip(prompts, tails, outs, strict=True):
            if tail:  # NOTE: prompt_logprobs[k] maps token ids to Logprob at position k (None at 0)
                full = o.prompt_token_ids
                results.append(scored_result(len(ids), [o.prompt_logprobs[k][full[k]].logprob
                                                        for k in range(len(ids), len(full))]))
            else:
                out = o.outputs[0]
                results.append(GenerationResult(out.text, len(o.prompt_token_ids), len(out.token_ids),
                                                out.finish_reason))
        return results

    def close(self) -> None:
        """Stop the engine-core child process now rather than at interpreter exit."""
        engine = getattr(self, "_llm", None)
        core = getattr(getattr(engine, "llm_engine", None), "engine_core", None)
        if core is not None:
            core.shutdown()
            # NOTE: vLLM 0.32's sync client leaves its zmq context open (a ResourceWarning at garbage
            # collection). Once its output thread has closed its sockets, the context can be destroyed.
            thread = getattr(core, "output_queue_thread", None)
            if thread is not None:
                thread.join(timeout=10)
            ctx = getattr(core, "ctx", None)
            if ctx is not None and not ctx.closed and (thread is None or not thread.is_alive()):
                ctx.destroy(linger=0)
        self._llm = None


def build_engine(config: EngineConfig) -> GenerationEngine:
    """The engine ``config.backend`` names, with its model loaded (vLLM: call under a ``__main__`` guard)."""
    if config.backend == "vllm":
        return VLLMEngine(config)
    return TransformersEngine(config)
