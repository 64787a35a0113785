"""The master's tuned reader: LoRA adapters (attach, save, merge into the weights at load) and the training examples
built from LoCoMo's train split (dev set held out, prompts as the master writes them). Tiny models, no download."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path

import pytest
import torch
from torch import nn

from cluster.model_fetch import describe
from core import model_store
from core.config.models import ADAPTED_MODELS, KNOWN_MODELS
from core.lora import LoRALinear, adapter_state, attach, layer_index, merge
from core.model_store import ModelFileError
from corpora.locomo import Conversation, Question, Turn
from training import train_reader


class _Block(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.q_proj = nn.Linear(width, width)
        self.down_proj = nn.Linear(width, width, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(torch.relu(self.q_proj(x)))


class _Tiny(nn.Module):
    def __init__(self, width: int = 6, depth: int = 3) -> None:
        super().__init__()
        self.layers = nn.ModuleList(_Block(width) for _ in range(depth))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = x + layer(x)
        return x


def _tiny(seed: int = 0) -> _Tiny:
    torch.manual_seed(seed)
    return _Tiny()


def test_layer_index_reads_the_decoder_layer_number() -> None:
    assert layer_index("model.layers.12.self_attn.q_proj") == 12
    assert layer_index("layers.0.q_proj") == 0 and layer_index("lm_head") is None


def test_an_attached_model_starts_as_the_base_and_only_adapters_train() -> None:
    model, x = _tiny(), torch.randn(4, 6)
    before = model(x)
    names = attach(model, ["q_proj"], rank=2, alpha=4, layers=[1, 2])
    assert names == ["layers.1.q_proj", "layers.2.q_proj"]
    assert isinstance(model.layers[1].q_proj, LoRALinear) and isinstance(model.layers[0].q_proj, nn.Linear)
    assert torch.equal(model(x), before)  # B starts at zero
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    assert trainable == {f"layers.{i}.q_proj.lora_{m}" for i in (1, 2) for m in "AB"}
    with pytest.raises(ValueError, match="no linear layer"):
        attach(_tiny(), ["o_proj"], rank=2, alpha=4)


def test_a_merged_adapter_computes_what_the_attached_model_computes() -> None:
    model, x = _tiny(), torch.randn(5, 6)
    attach(model, ["q_proj", "down_proj"], rank=3, alpha=6)
    opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.1)
    for _ in range(3):
        opt.zero_grad()
        model(x).pow(2).mean().backward()
        opt.step()
    state = adapter_state(model)
    assert len(state) == 12 and all(v.shape[0] == 3 or v.shape[1] == 3 for v in state.values())
    base = _tiny()
    assert not torch.allclose(base(x), model(x))  # training changed something
    merged = merge(base, state, scale=6 / 3)
    assert len(merged) == 6 and torch.allclose(base(x), model(x), atol=1e-6)


def test_merge_refuses_an_adapter_that_does_not_fit() -> None:
    state = adapter_state(_attached := _tiny())  # nothing attached: empty
    assert state == {}
    attach(_attached, ["q_proj"], rank=2, alpha=2)
    state = adapter_state(_attached)
    with pytest.raises(ValueError, match="lacks lora_B"):
        merge(_tiny(), {k: v for k, v in state.items() if not k.endswith("lora_B")}, 1.0)
    with pytest.raises(ValueError, match="no module"):
        merge(_tiny(), {"layers.7.q_proj.lora_A": state["layers.0.q_proj.lora_A"],
                        "layers.7.q_proj.lora_B": state["layers.0.q_proj.lora_B"]}, 1.0)
    wide = {k: torch.zeros(v.shape[0], 9) if k.endswith("lora_A") else v for k, v in state.items()}
    with pytest.raises(ValueError, match="does not fit"):
        merge(_tiny(), wide, 1.0)


def test_merge_adapter_builds_the_merged_folder_once(tmp_path: Path, monkeypatch) -> None:
    from safetensors.torch import save_file
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    base_dir = tmp_path / "base"
    LlamaForCausalLM(LlamaConfig(vocab_size=32, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                                 num_attention_heads=2, num_key_value_heads=1)).save_pretrained(base_dir)
    (base_dir / "tokenizer.json").write_text("{}")
    tuned = LlamaForCausalLM.from_pretrained(base_dir)
    attach(tuned, train_reader.TARGETS, rank=2, alpha=4, layers=[1])
    for name, p in tuned.named_parameters():
        if name.endswith("lora_B"):
            p.data.normal_()
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    save_file(adapter_state(tuned), str(adapter / model_store.ADAPTER_FILE))
    (adapter / model_store.ADAPTER_SETTINGS).write_text(json.dumps({"base": "smollm2-135m", "scale": 2.0}))
    monkeypatch.setattr(model_store, "convert", lambda model, cache_dir=None, force=False: base_dir)
    monkeypatch.setattr(model_store, "adapter_folder", lambda model: adapter)

    name = "smollm2-135m-reader"
    path = Path(model_store.resolve_model(name, tmp_path / "cache"))
    assert path.parent == tmp_path / "cache" / "models" / "adapted" and model_store.is_converted(path)
    assert (path / "tokenizer.json").is_file()
    ids = torch.tensor([[1, 5, 7, 3]])
    with torch.no_grad():
        assert torch.allclose(LlamaForCausalLM.from_pretrained(path)(ids).logits, tuned(ids).logits, atol=1e-5)
    stamp = (path / model_store.MARKER).stat().st_mtime_ns
    assert model_store.merge_adapter(ADAPTED_MODELS[name], tmp_path / "cache") == path  # a no-op the second time
    assert (path / model_store.MARKER).stat().st_mtime_ns == stamp
    assert {r["name"]: r["state"] for r in describe(tmp_path / "cache")}[name] == "converted"

    (adapter / model_store.ADAPTER_FILE).unlink()
    with pytest.raises(ModelFileError, match="training.train_reader"):
        model_store.resolve_model(name, tmp_path / "cache")


def test_the_adapted_registry_names_registry_bases() -> None:
    for name, tuned in ADAPTED_MODELS.items():
        assert tuned.name == name and tuned.base in KNOWN_MODELS and name not in KNOWN_MODELS


# -- training examples -------------------------------------------------------------------------
def _conversation() -> Conversation:
    t0 = datetime(2023, 5, 8, 13, 56)
    texts = ["I adopted a puppy named Rex yesterday!", "Lovely. I went hiking in Oregon.",
             "Rex loves the beach.", "I paint landscapes on Sundays.", "My sister lives in Denver."]
    turns = [Turn("c1", f"D1:{i + 1}", 1, i, "Ann" if i % 2 == 0 else "Bo", text, "1:56 pm on 8 May, 2023",
                  t0 + timedelta(seconds=i)) for i, text in enumerate(texts)]
    questions = [
        Question("c1", "What is the name of Ann's puppy?", "Rex", 4, ["D1:1"]),  # dev (first of category 4)
        Question("c1", "Where did Bo go hiking?", "Oregon", 4, ["D1:2"]),
        Question("c1", "When did Ann adopt the puppy?", "7 May 2023", 2, ["D1:1"]),  # a date: the line-choice path
        Question("c1", "Would Ann like a dog park?", "Likely yes; she has a puppy", 3, ["D1:1", "D1:3"]),
        Question("c1", "What does Ann's brother do?", "", 5, ["D1:4"]),  # category 5: nothing to learn
        Question("c1", "Where does Bo's sister live?", "Denver", 4, []),  # no gold evidence
    ]
    return Conversation("c1", ("Ann", "Bo"), turns, questions)


def test_examples_hold_out_the_dev_set_and_keep_free_answer_kinds() -> None:
    conv = _conversation()
    dev = train_reader.dev_skip([conv])
    assert dev == {("c1", i) for i in range(6)}  # the first 5 of each category: all of them here
    examples = train_reader.reader_examples([conv], {("c1", 0)}, lines=3)
    assert [(e.question, e.answer) for e in examples] == [
        ("Where did Bo go hiking?", "Oregon"), ("Would Ann like a dog park?", "Likely yes")]
    for e in examples:
        assert len(e.evidence) == 3 and len({x.turn_id for x in e.evidence}) == 3
    hiking, park = examples
    assert "D1:2" in {x.turn_id for x in hiking.evidence}
    assert {"D1:1", "D1:3"} <= {x.turn_id for x in park.evidence}
    grounded = next(x for x in park.evidence if x.turn_id == "D1:1")
    assert grounded.content == "[1:56 pm on 8 May, 2023] Ann: I adopted a puppy named Rex yesterday [7 May 2023]!"


def test_an_example_is_the_masters_own_prompt_with_the_answer_as_target() -> None:
    from core.config import EpisodicConfig
    from inference.master import Master

    class _Tokenizer:  # one id per character; a chat template as plain text
        def __call__(self, text: str, add_special_tokens: bool = False):
            return type("Enc", (), {"input_ids": [ord(c) for c in text]})()

        def apply_chat_template(self, messages, tokenize: bool, add_generation_prompt: bool) -> str:
            return "".join(f"<{m['role']}>{m['content']}" for m in messages) + "<assistant>"

    tokenizer = _Tokenizer()
    master = Master(train_reader._Frame(tokenizer, 2048), EpisodicConfig(), count=len)
    example = train_reader.reader_examples([_conversation()], set(), lines=2)[1]
    prompt, answer = train_reader.encode(example, master, tokenizer, end_id=-1)
    text = "".join(map(chr, prompt))
    assert text.endswith("Question: Where did Bo go hiking?\nAnswer with a short phrase copied from the evidence."
                         "<assistant>")
    assert "Marley flooring" in text  # the worked example, as the product sends it
    assert answer == [*map(ord, "Oregon"), -1]


def test_the_service_refuses_to_start_without_the_readers_adapter(tmp_path: Path, monkeypatch) -> None:
    from core.config import load_config
    from serve.app import check_ready

    monkeypatch.setattr(model_store, "adapter_folder", lambda model: tmp_path / "nowhere")
    config = load_config("cpu", {"admission": {"mode": "store_all"}, "auth": {"required": False},
                                 "models": {"master": "smollm2-135m-reader"}})
    with pytest.raises(ModelFileError, match="python -m training.train_reader --out inference/reader_adapters/"):
        check_ready(config)
