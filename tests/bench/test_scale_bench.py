import numpy as np

from bench.scale import VectorSource, many_users, one_user
from core.config import load_config
from tests.doubles import HashingEncoder, unit_vectors


def test_vector_source_serves_the_sample_then_unit_draws_like_it():
    sample = unit_vectors(50, 16, 1)
    source = VectorSource(sample)
    first = source.take(30)
    assert np.allclose(first, sample[:30])
    rest = source.take(500)
    assert np.allclose(np.linalg.norm(rest, axis=1), 1.0, atol=1e-5)
    assert np.allclose(rest[:20], sample[30:50]) and not np.allclose(rest[20:40], sample[:20])


def test_one_user_and_many_users_measure_without_losing_memories(tmp_path):
    cfg = load_config()
    encoder = HashingEncoder(dim=16)
    texts = [f"Caroline met Bob on day {i}" for i in range(40)]
    queries = ["Who met Bob?", "When did Caroline meet Bob?"]
    rows = one_user(cfg, [60, 150], VectorSource(unit_vectors(40, 16, 2)), texts, queries, encoder, batch=25,
                    replay=20, workdir=tmp_path)
    assert [r["memories"] for r in rows] == [60, 150] and all(r["replayed_records"] == 1 for r in rows)
    assert all(r["search_p50_ms"] > 0 and r["snapshot_mb"] > 0 for r in rows)
    tenants = many_users(cfg, 12, VectorSource(unit_vectors(40, 16, 3)), texts, queries, encoder, workdir=tmp_path)
    assert tenants["tenants"] == 12 and 120 <= tenants["memories"] <= 1200


def test_smaller_gate_beams_are_timed_against_the_configured_top_10(tmp_path):
    cfg = load_config()
    tiers = cfg.tiers.model_copy(update={"l1": cfg.tiers.l1.model_copy(update={"capacity": 20})})
    cfg = cfg.model_copy(update={"tiers": tiers})
    encoder = HashingEncoder(dim=16)
    texts = [f"Caroline met Bob on day {i}" for i in range(40)]
    queries = ["Who met Bob?", "When did Caroline meet Bob?", "What happened on day 7?"]
    rows = one_user(cfg, [150], VectorSource(unit_vectors(40, 16, 2)), texts, queries, encoder, batch=25,
                    replay=20, workdir=tmp_path, beams=(cfg.tiers.gate.l2_k, 2))
    beams = rows[0]["l2_k"]
    assert beams[str(cfg.tiers.gate.l2_k)]["top10_kept"] == 1.0  # the configured beam finds its own results
    assert 0.0 <= beams["2"]["top10_kept"] < 1.0 and beams["2"]["search_p50_ms"] > 0
