"""Dependencies point one way: every module's imports, parsed with ``ast``, respect the layers.

``builtin`` is the bottom (built-in models, corpora, the shared loaders) and imports nothing else of
eaglehead; ``draftheads`` may use ``builtin``; ``decode`` and ``train`` may use ``draftheads`` and
``builtin``; ``eval`` may use ``decode``, ``draftheads`` and ``builtin``; the top package (``cli/``:
the command line, the demo and its recipes) may import anything, and nothing imports it.
"""

import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# package -> (its directory, the eaglehead packages it may import besides itself)
LAYERS = {
    "builtin": ("builtin", set()),
    "draftheads": ("draftheads", {"builtin"}),
    "decode": ("decode", {"draftheads", "builtin"}),
    "train": ("train", {"draftheads", "builtin"}),
    "eval": ("eval", {"decode", "draftheads", "builtin"}),
    "": ("cli", {"builtin", "draftheads", "decode", "train", "eval", "configs"}),
}
SUBPACKAGES = {"builtin", "draftheads", "decode", "train", "eval", "configs"}


def _module_name(package: str, path: Path, directory: Path) -> list[str]:
    parts = list(path.relative_to(directory).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ["eaglehead", *([package] if package else []), *parts]


def imported_modules(path: Path, module: list[str]) -> list[tuple[int, str]]:
    """(line, absolute dotted name) of every import in the file, relative imports resolved."""
    is_package = path.name == "__init__.py"
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module if is_package else module[:-1]
                base = base[: len(base) - (node.level - 1)]
                name = ".".join(base + ([node.module] if node.module else []))
            else:
                name = node.module
            out.append((node.lineno, name))
            # ``from eaglehead import demo`` / ``from . import schedule`` import submodules by name.
            out += [(node.lineno, f"{name}.{alias.name}") for alias in node.names if alias.name != "*"]
    return out


def layer_of(dotted: str) -> str | None:
    """The eaglehead layer a dotted name belongs to ("" for the top package), None outside eaglehead."""
    parts = dotted.split(".")
    if parts[0] != "eaglehead":
        return None
    return parts[1] if len(parts) > 1 and parts[1] in SUBPACKAGES else ""


def violations() -> list[str]:
    bad = []
    for package, (dirname, allowed) in LAYERS.items():
        directory = ROOT / dirname
        for path in sorted(directory.rglob("*.py")):
            if "assets" in path.parts:
                continue
            module = _module_name(package, path, directory)
            for line, name in imported_modules(path, module):
                target = layer_of(name)
                if target is None or target == package:
                    continue
                if target == "" and name.split(".") == ["eaglehead"] and package:
                    # ``from eaglehead.X import y`` also lists ``eaglehead``; only a bare ``import eaglehead``
                    # or ``from eaglehead import <top module>`` reaches the top package's code.
                    continue
                if target not in allowed:
                    where = path.relative_to(ROOT)
                    bad.append(f"{where}:{line}: {'.'.join(module)} imports {name} "
                               f"({package or 'top'} may not import {target or 'the top package'})")
    return bad


def test_dependencies_point_one_way():
    assert violations() == []


# Edges the rule forbids: an import line -> (package of the offending module, the layer it may not reach).
FORBIDDEN = {
    "from eaglehead.train.rollout import rollout": ("eval", "train"),
    "from ..train import rollout": ("eval", "train"),
    "from eaglehead import demo_target": ("train", "the top package"),
    "import eaglehead.demo_target": ("builtin", "the top package"),
    "from eaglehead.decode import speculative_generate": ("train", "decode"),
    "from eaglehead.draftheads import Eagle3Head": ("builtin", "draftheads"),
}


@pytest.mark.parametrize("source", FORBIDDEN)
def test_the_checker_catches_edges_against_the_rule(tmp_path, monkeypatch, source):
    package, layer = FORBIDDEN[source]
    fake = tmp_path / LAYERS[package][0]
    fake.mkdir()
    (fake / "offender.py").write_text(source + "\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    assert any(f"{package} may not import {layer}" in v for v in violations())
