import pytest
from pydantic import ValidationError

from core.config import EngramConfig, RerankConfig, TierConfig, load_config


def test_cpu_profile_loads_with_packaged_embedder():
    cfg = load_config("cpu")
    assert cfg.profile == "cpu" and cfg.embedder.model == "packaged:all-MiniLM-L6-v2"
    assert cfg.tiers.l1.capacity == 500 and cfg.tiers.l2.capacity == 5000
    assert cfg.tiers.rerank.kind == "none"


def test_environment_overrides_the_profile(monkeypatch):
    monkeypatch.setenv("ENGRAM_TIERS__GATE__MODE", "merge")
    monkeypatch.setenv("ENGRAM_TIERS__L1__CAPACITY", "64")
    cfg = load_config("cpu")
    assert cfg.tiers.gate.mode == "merge" and cfg.tiers.l1.capacity == 64
    assert cfg.tiers.l2.capacity == 5000  # untouched siblings keep the profile's values


def test_unknown_fields_and_bad_values_are_rejected(tmp_path, monkeypatch):
    bad = tmp_path / "bad.yaml"
    bad.write_text("tiers:\n  l1: {capacity: 500, ef_constrction: 10}\n")
    with pytest.raises(ValidationError, match="ef_constrction"):
        load_config(bad)
    with pytest.raises(ValidationError):
        TierConfig(capacity=0)
    monkeypatch.setenv("ENGRAM_TIERS__GATE__MODE", "sometimes")
    with pytest.raises(ValidationError, match="replace"):
        load_config("cpu")


def test_missing_profile_names_the_known_ones():
    with pytest.raises(FileNotFoundError, match="cpu"):
        load_config("nope")


def test_cross_encoder_needs_a_model():
    with pytest.raises(ValidationError, match="rerank.model"):
        RerankConfig(kind="cross_encoder")


def test_every_field_has_a_description():
    def walk(model_cls, prefix=""):
        for name, field in model_cls.model_fields.items():
            assert field.description or hasattr(field.annotation, "model_fields"), f"{prefix}{name} lacks a description"
            ann = field.annotation
            if hasattr(ann, "model_fields"):
                walk(ann, f"{prefix}{name}.")
    walk(EngramConfig)


def test_auth_is_required_by_default_and_its_keys_file_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.delenv("ENGRAM_AUTH__REQUIRED", raising=False)
    monkeypatch.delenv("ENGRAM_AUTH__KEYS_FILE", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    cfg = load_config("cpu")
    assert cfg.auth.required is True and cfg.auth.keys_file == tmp_path / ".cache" / "engram" / "api-keys.json"
    assert load_config("cpu", {"auth": {"keys_file": "~/k.json"}}).auth.keys_file == tmp_path / "k.json"
    monkeypatch.setenv("ENGRAM_AUTH__KEYS_FILE", str(tmp_path / "env.json"))
    monkeypatch.setenv("ENGRAM_AUTH__REQUIRED", "false")
    cfg = load_config("cpu")
    assert cfg.auth.keys_file == tmp_path / "env.json" and cfg.auth.required is False
