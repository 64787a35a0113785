"""TransformersEngine against the real SmolLM2-135M-Instruct."""

from __future__ import annotations

import pytest
import torch

from core.generation import GenerationEngine, GenerationRequest, TokenBill
from serve.request_tokens import render_prompt

pytestmark = pytest.mark.model


def chat(text: str, **kw) -> GenerationRequest:
    return GenerationRequest(messages=[{"role": "user", "content": text}], **kw)


def test_answers_a_short_question_with_consistent_token_counts(tf_engine) -> None:
    assert isinstance(tf_engine, GenerationEngine)
    [res] = tf_engine.generate([chat("What is the capital of France?")])
    assert "Paris" in res.text
    tok = tf_engine.tokenizer
    reference = tok.apply_chat_template(
        [{"role": "user", "content": "What is the capital of France?"}],
        tokenize=False,
        add_generation_prompt=True,
    )
    assert res.prompt_tokens == len(tok(reference, add_special_tokens=False).input_ids) > 0
    assert res.finish_reason == "stop"  # so the count includes the end-of-turn token
    assert res.completion_tokens == len(tok(res.text, add_special_tokens=False).input_ids) + 1
    assert res.bill == TokenBill(res.prompt_tokens, res.completion_tokens, 1)


def test_max_tokens_caps_the_completion(tf_engine) -> None:
    [res] = tf_engine.generate([chat("Write a long story about a dragon.", max_tokens=5)])
    assert (res.finish_reason, res.completion_tokens) == ("length", 5)


def test_choice_in_one_batch_is_valid_and_is_the_likeliest(tf_engine) -> None:
    reqs = [
        chat("What is the capital of France? Answer with one word.", choice=["London", "Paris", "Berlin"]),
        chat("Is the sun hot? Answer yes or no.", choice=["yes", "no"]),
        chat("Should a memory system store 'My sister's name is Ana'?", choice=["ADD", "NOOP"]),
        chat("Pick a colour.", choice=["red", "green", "blue", "a very long colour name"]),
    ]
    results = tf_engine.generate(reqs)
    assert results[0].text == "Paris"
    for req, res in zip(reqs, results, strict=True):
        assert res.text in req.choice
        assert set(res.choice_logprobs) == set(req.choice)
        assert res.text == max(res.choice_logprobs, key=res.choice_logprobs.get)
        n_choice = len(tf_engine.tokenizer(res.text, add_special_tokens=False).input_ids)
        assert res.completion_tokens == n_choice + 1
        assert res.prompt_tokens == len(render_prompt(tf_engine.tokenizer, req))
    # Reference score of one choice, computed unbatched and unpadded: log P(choice + <|im_end|> | prompt).
    prompt = render_prompt(tf_engine.tokenizer, reqs[3])
    target = tf_engine.tokenizer("a very long colour name", add_special_tokens=False).input_ids + [2]
    with torch.inference_mode():
        logp = torch.log_softmax(tf_engine.model(torch.tensor([prompt + target])).logits[0], -1)
    ref = sum(logp[len(prompt) - 1 + k, t].item() for k, t in enumerate(target))
    assert results[3].choice_logprobs["a very long colour name"] == pytest.approx(ref, abs=1e-3)


@pytest.mark.parametrize("row_tokens", [512, 7])  # all options in one row; a few per row
def test_a_long_prompt_shares_one_read_among_its_choices_with_the_same_scores(tf_engine, monkeypatch,
                                                                              row_tokens) -> None:
    from serve.transformers_engine import SHARED_PREFIX_MIN

    monkeypatch.setattr("serve.transformers_engine.SHARED_ROW_TOKENS", row_tokens)

    lines = "\n".join(f"[{k}] 8 May 2023, Mel: I painted picture number {k} in the park." for k in range(1, 26))
    req = chat(f"{lines}\nWhich line says when Mel painted picture 7? Answer with its number.",
               choice=[str(k) for k in range(1, 26)])
    prompt = render_prompt(tf_engine.tokenizer, req)
    assert len(prompt) >= SHARED_PREFIX_MIN
    [res] = tf_engine.generate([req])
    options = [tf_engine.tokenizer(c, add_special_tokens=False).input_ids for c in req.choice]
    full = tf_engine._score([(prompt, o) for o in options])  # each option as a whole sequence
    assert [res.choice_logprobs[c] for c in req.choice] == pytest.approx(full, abs=1e-3)
    assert res.text == req.choice[max(range(len(full)), key=full.__getitem__)]


def test_greedy_decision_is_the_same_alone_and_in_a_batch(tf_engine) -> None:
    probe_free = chat("Name one fruit.", max_tokens=12)
    probe_choice = chat("Is ice cold? Answer yes or no.", choice=["yes", "no"])
    others = [
        chat("Tell me, in a few words and without any detail, what a volcano is, please.", max_tokens=12),
        chat("Hi", max_tokens=12),
        chat("Is fire cold? Answer yes or no.", choice=["yes", "no"]),
        chat("Which is a planet? Mars or Paris?", choice=["Mars", "Paris"]),
    ]
    [alone_free, alone_choice] = tf_engine.generate([probe_free, probe_choice])
    batch = tf_engine.generate([others[0], probe_free, others[1], others[2], probe_choice, others[3]])
    assert batch[1].text == alone_free.text and batch[1].completion_tokens == alone_free.completion_tokens
    assert batch[4].text == alone_choice.text
    assert batch[4].choice_logprobs == pytest.approx(alone_choice.choice_logprobs, abs=1e-3)


def test_unsupported_or_oversized_requests_fail_before_running(tf_engine) -> None:
    with pytest.raises(NotImplementedError, match="regex"):
        tf_engine.generate([chat("Hi"), chat("A date?", regex=r"\d{4}-\d\d-\d\d")])
    with pytest.raises(NotImplementedError, match="json_schema"):
        tf_engine.generate([chat("Bob, 42", json_schema={"type": "object"})])
    with pytest.raises(ValueError, match="max_model_len"):
        tf_engine.generate([chat("word " * 2000)])
    assert tf_engine.generate([]) == []


def test_a_prompt_read_from_a_cached_prefix_answers_as_a_full_read(tf_engine) -> None:
    lines = "\n".join(f"[{k}] 8 May 2023, Mel: I painted picture number {k} in the park." for k in range(1, 21))
    first, second = (chat(f"{lines}\nWhat did Mel paint as picture {k}? Answer briefly.", max_tokens=12)
                     for k in (3, 11))
    tf_engine.prefix.clear()
    hits = tf_engine.prefix.hits
    [a] = tf_engine.generate([first])
    [b] = tf_engine.generate([second])  # shares the lines with the first prompt: read from its cache
    assert tf_engine.prefix.hits == hits + 1 and len(tf_engine.prefix) == 2
    tf_engine.prefix.clear()
    [b_full] = tf_engine.generate([second])  # nothing cached: read whole
    assert (b.text, b.prompt_tokens, b.completion_tokens) == (b_full.text, b_full.prompt_tokens,
                                                              b_full.completion_tokens)
    [a_again] = tf_engine.generate([first])
    assert a_again.text == a.text


def test_choices_read_from_a_cached_prefix_score_as_a_full_read(tf_engine) -> None:
    lines = "\n".join(f"[{k}] 8 May 2023, Mel: I painted picture number {k} in the park." for k in range(1, 26))
    req = chat(f"{lines}\nWhich line says when Mel painted picture 7? Answer with its number.",
               choice=[str(k) for k in range(1, 26)])
    tf_engine.prefix.clear()
    tf_engine.generate([chat(f"{lines}\nHow many pictures did Mel paint?", max_tokens=4)])  # caches the lines
    hits = tf_engine.prefix.hits
    [cached] = tf_engine.generate([req])
    assert tf_engine.prefix.hits == hits + 1
    tf_engine.prefix.clear()
    [full] = tf_engine.generate([req])
    assert cached.text == full.text
    assert [cached.choice_logprobs[c] for c in req.choice] == pytest.approx(
        [full.choice_logprobs[c] for c in req.choice], abs=1e-3)
