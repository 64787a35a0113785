"""The project's packages import strictly downward, floor by floor (the README's Layout draws the plan):

core <- memory <- inference <- cores <- pipeline <- actors <- serve <- corpora <- cluster <- training <- bench

``core`` (config tree, errors, engine protocol, evidence record, cache dir) imports nothing of the project;
``bench`` may import anything and nothing imports it. Every import counts, also one inside a function.
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
LAYERS = ("core", "memory", "inference", "cores", "pipeline", "actors", "serve", "corpora", "cluster", "training",
          "bench")  # lowest first


def imported_packages(path: Path) -> list[tuple[int, str]]:
    """(line, top-level package) of every import of a project package in ``path``."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        out += [(node.lineno, n.split(".")[0]) for n in names if n.split(".")[0] in LAYERS]
    return out


def violations(root: Path) -> list[str]:
    found = []
    for layer in LAYERS:
        for path in sorted((root / layer).rglob("*.py")):
            for line, package in imported_packages(path):
                if LAYERS.index(package) > LAYERS.index(layer):
                    found.append(f"{path.relative_to(root)}:{line}: {layer} imports {package} (upward)")
    return found


def test_packages_import_only_downward() -> None:
    found = violations(REPO)
    assert not found, "upward imports between packages:\n" + "\n".join(found)


def test_an_upward_import_is_named_by_file_and_line(tmp_path: Path) -> None:
    for layer in LAYERS:
        (tmp_path / layer).mkdir()
    (tmp_path / "core" / "a.py").write_text("import os\n\n\ndef f():\n    from serve.app import build_app\n")
    (tmp_path / "actors" / "b.py").write_text("from core.config import EngramConfig\nimport bench.common\n")
    assert violations(tmp_path) == [
        "core/a.py:5: core imports serve (upward)",
        "actors/b.py:2: actors imports bench (upward)",
    ]


def test_every_layer_is_installed() -> None:
    """``pip install .`` ships each layer (the ``engram`` command imports them all, outside the repository)."""
    import tomllib

    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    include = project["tool"]["setuptools"]["packages"]["find"]["include"]
    assert all(f"{layer}*" in include for layer in LAYERS), include
