"""Dependencies point one way: every module's imports, parsed with ``ast``, respect the layers.

The rule table is :data:`LAYERS` below (the README's architecture section shows the same table): each
package and the eaglehead packages it may import. ``builtin`` is the bottom, ``engines`` (vLLM and
llama.cpp, in process or as child processes) sits on it alone; the library (``draftheads``,
``decode``, ``train``, ``eval``) sits on it; ``datagen``, ``pretrain``, ``diagnostics`` and ``demos`` are
applications of the library; the top package (``cli/``: the command line only) may import anything, and
nothing imports it.
"""

import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# package -> (its directory, the eaglehead packages it may import besides itself)
LAYERS = {
    "builtin": ("builtin", set()),
    # serving engines as child processes: standard library and builtin only, used by eval and datagen
    "engines": ("engines", {"builtin"}),
    "draftheads": ("draftheads", {"builtin"}),
    "decode": ("decode", {"draftheads", "builtin"}),
    "train": ("train", {"draftheads", "builtin"}),
    "eval": ("eval", {"engines", "decode", "draftheads", "builtin"}),
    "datagen": ("datagen", {"engines", "decode", "builtin"}),
    "pretrain": ("pretrain", {"train", "builtin"}),
    "diagnostics": ("diagnostics", {"engines", "eval", "decode", "train", "draftheads", "builtin"}),
    "demos": ("demos", {"engines", "diagnostics", "pretrain", "datagen", "eval", "decode", "train", "draftheads",
                        "builtin", "configs"}),
    # the generated documentation pages: config dataclasses in, Markdown out (the top package passes the parser)
    "docsgen": ("docsgen", {"train", "datagen", "pretrain", "builtin"}),
    "": ("cli", {"engines", "demos", "diagnostics", "pretrain", "datagen", "eval", "decode", "train", "draftheads",
                 "builtin", "configs", "docsgen"}),
}
SUBPACKAGES = {name for name in LAYERS if name} | {"configs"}


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
    "import eaglehead.cli": ("builtin", "the top package"),
    "from eaglehead.demos.stdlib import run_demo": ("datagen", "demos"),
    "from eaglehead.eval.prompts import load_prompt_set": ("datagen", "eval"),
    "from eaglehead.decode import SamplingConfig": ("pretrain", "decode"),
    "from eaglehead.decode import speculative_generate": ("train", "decode"),
    "from eaglehead.draftheads import Eagle3Head": ("builtin", "draftheads"),
    "from eaglehead.decode import speculative_generate as g": ("engines", "decode"),
    "from eaglehead.engines import VllmServer": ("builtin", "engines"),
}


@pytest.mark.parametrize("source", FORBIDDEN)
def test_the_checker_catches_edges_against_the_rule(tmp_path, monkeypatch, source):
    package, layer = FORBIDDEN[source]
    fake = tmp_path / LAYERS[package][0]
    fake.mkdir()
    (fake / "offender.py").write_text(source + "\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    assert any(f"{package} may not import {layer}" in v for v in violations())


# Short enough to read: limits every package module keeps (tests are not held to them).
MAX_FUNCTION_LINES = 80
MAX_MODULE_LINES = 500


def _package_modules(root: Path) -> list[tuple[str, Path]]:
    return [(package, path) for package, (dirname, _) in LAYERS.items()
            for path in sorted((root / dirname).rglob("*.py")) if "assets" not in path.parts]


def shape_violations(root: Path) -> list[str]:
    """Functions over MAX_FUNCTION_LINES lines (docstring included), modules over MAX_MODULE_LINES, and
    imports of another module's ``_private`` names."""
    bad = []
    for package, path in _package_modules(root):
        text = path.read_text()
        where = path.relative_to(root)
        if len(text.splitlines()) > MAX_MODULE_LINES:
            bad.append(f"{where}: {len(text.splitlines())} lines (at most {MAX_MODULE_LINES})")
        for node in ast.walk(ast.parse(text, str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = node.end_lineno - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    bad.append(f"{where}:{node.lineno}: {node.name} is {length} lines (at most {MAX_FUNCTION_LINES})")
            elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[-1:] != ["__future__"]:
                private = [a.name for a in node.names if a.name.startswith("_") and not a.name.startswith("__")]
                if private:
                    bad.append(f"{where}:{node.lineno}: imports private names {private} from another module")
    return bad


def test_functions_and_modules_are_short_and_privates_stay_private():
    assert shape_violations(ROOT) == []


def test_the_shape_checker_catches_a_long_function_a_long_module_and_a_private_import(tmp_path):
    fake = tmp_path / LAYERS["eval"][0]
    fake.mkdir()
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_FUNCTION_LINES))
    (fake / "long.py").write_text(f"def f():\n{body}\n")
    (fake / "big.py").write_text("\n".join(f"y{i} = {i}" for i in range(MAX_MODULE_LINES + 1)) + "\n")
    (fake / "peek.py").write_text("from .report import _fmt\n")
    found = "\n".join(shape_violations(tmp_path))
    assert "f is 81 lines" in found and "big.py: 501 lines" in found and "private names ['_fmt']" in found


def test_the_readme_layer_table_is_this_table():
    """The README's "may import" table names every package of LAYERS with exactly its allowed imports."""
    text = (ROOT / "README.md").read_text()
    rows = {}
    for line in text.split("| package | may import |")[1].split("\n\n")[0].splitlines()[2:]:
        name, allowed = (c.strip() for c in line.strip("|").split("|"))
        rows[name.replace("`", "")] = allowed
    assert set(rows) == {name or "top (cli/)" for name in LAYERS}, sorted(rows)
    for name, (_, allowed) in LAYERS.items():
        cell = rows[name or "top (cli/)"]
        if cell.startswith(("nothing else", "all of the above", "everything")):
            continue
        assert {c.strip(" `") for c in cell.split(",")} == allowed, name
