"""The HF transformers engine backend: batched greedy/sampled ``generate``, exact choice scoring by
log-likelihood, and a prefix KV cache for one-prompt calls (see :mod:`serve.engine`)."""

from __future__ import annotations

import copy
from collections.abc import Iterable, Sequence
from typing import Any

from core.config import EngineConfig
from core.generation import GenerationRequest, GenerationResult
from core.model_store import resolve_model
from serve.prefix_cache import PrefixCache
from serve.request_tokens import check_fits, continuation_ids, render_prompt, scored_result

SHARED_PREFIX_MIN = 256  # prompt tokens from which a choice's options share one read of the prompt
SHARED_ROW_TOKENS = 512  # option tokens read side by side in one row after a shared prompt


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
                check_fits(i, len(ids), len(scored[i]), self.max_model_len)
            elif r.choice is not None:
                choices[i] = [self.tokenizer(c, add_special_tokens=False).input_ids for c in r.choice]
                check_fits(i, len(ids), max(map(len, choices[i])) + 1, self.max_model_len)
            else:
                check_fits(i, len(ids), r.max_tokens or self.config.max_tokens, self.max_model_len)

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
        the grouped-query attention expands each copy again: with the 1.5B model on a CPU, a temporal question's
        choice among a full window's line numbers was several times slower that way
        (docs/results/2026-12-06-engine.md)."""
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
