"""Every benchmark script under benchmarks/ still imports against today's package.

Benchmarks are run by hand, so a refactor that moves a module (``basketgnn.train`` ->
``basketgnn.engine``) breaks them silently. Here each script is imported as a module, the way
``python benchmarks/X.py`` finds its imports (benchmarks/ and the project root on sys.path),
without running its ``main``: importing must not print, write a file or append a result. The
imports of ``basketgnn`` inside functions (run only by ``main``) are checked too, by reading
the script: each named module must import and hold the names taken from it. Imports inside an
``except ImportError`` handler are the fallbacks for checkouts from before a refactor and are
not checked.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import sys
from pathlib import Path

import pytest

PROJECT = Path(__file__).resolve().parent.parent
BENCHMARKS = PROJECT / "benchmarks"
SCRIPTS = sorted(BENCHMARKS.glob("*.py"))
#: Scripts whose optional third-party dependency is not one of basketgnn's (see its docstring).
OPTIONAL = {"bench_lightning": "lightning"}
#: The package the benchmarks run against: the one `import basketgnn` finds.
PACKAGE = Path(importlib.import_module("basketgnn").__file__ or "").resolve().parent


def _tree_state(folder: Path) -> dict[str, int]:
    return {str(p.relative_to(folder)): p.stat().st_size for p in folder.rglob("*") if p.is_file()}


def _has_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except ValueError:
        return False


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.stem)
def test_benchmark_script_imports_without_side_effects(
    script: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.syspath_prepend(str(PROJECT))
    monkeypatch.syspath_prepend(str(BENCHMARKS))  # `from common import ...`, as when run as a script
    monkeypatch.chdir(tmp_path)
    name = f"_benchmark_{script.stem}"
    # The benchmarks' own modules leave sys.modules again afterwards.
    added = [m for m in ("common", "benchmarks", "benchmarks.common", name) if m not in sys.modules]
    before = _tree_state(BENCHMARKS)
    spec = importlib.util.spec_from_file_location(name, script)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        optional = OPTIONAL.get(script.stem)
        if optional is not None and not _has_module(optional):
            # Its basketgnn imports come first; then it stops with a message naming the dependency.
            with pytest.raises(SystemExit, match=optional):
                spec.loader.exec_module(module)
        else:
            spec.loader.exec_module(module)
            if script.stem != "common":
                assert callable(getattr(module, "main", None)), f"{script.name} has no main()"
    finally:
        for m in added:
            sys.modules.pop(m, None)
    assert capsys.readouterr().out == "", f"importing {script.name} printed"
    assert list(tmp_path.iterdir()) == [], f"importing {script.name} wrote files"
    assert _tree_state(BENCHMARKS) == before, f"importing {script.name} changed benchmarks/"


def _package_imports(tree: ast.AST) -> list[tuple[str, list[str], int]]:
    """(module, names, line) of every ``basketgnn`` import, outside ``except`` handlers."""
    found: list[tuple[str, list[str], int]] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.ExceptHandler):
            return  # a fallback for an older checkout
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module.split(".")[0] == "basketgnn":
                found.append((node.module, [a.name for a in node.names], node.lineno))
        elif isinstance(node, ast.Import):
            found.extend((a.name, [], node.lineno) for a in node.names if a.name.split(".")[0] == "basketgnn")
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.stem)
def test_benchmark_script_package_imports_resolve(script: Path) -> None:
    imports = _package_imports(ast.parse(script.read_text(), filename=str(script)))
    for module_name, names, line in imports:
        try:
            module = importlib.import_module(module_name)
        except ImportError as e:
            pytest.fail(f"{script.name}:{line}: cannot import {module_name} ({e})")
        # Not a module some other installed copy of basketgnn still has (an editable install of
        # another checkout can serve a subpackage this one removed).
        origin = Path(module.__file__ or "").resolve()
        assert origin.is_relative_to(PACKAGE), f"{script.name}:{line}: {module_name} is not in {PACKAGE} ({origin})"
        for attr in names:
            if attr == "*" or hasattr(module, attr):
                continue
            # `from package import submodule`
            assert _has_module(f"{module_name}.{attr}"), f"{script.name}:{line}: {module_name} has no {attr!r}"


def test_package_import_check_sees_stale_and_lazy_imports() -> None:
    """The checker finds function-level imports and skips the except-ImportError fallbacks."""
    source = (
        "from basketgnn.engine.trainer import setup_torch\n"
        "def f():\n"
        "    from basketgnn.train.trainer import train_dnntsp\n"
        "try:\n"
        "    import basketgnn.registry\n"
        "except ImportError:\n"
        "    from basketgnn.recommenders.dnntsp import DNNTSPRecommender\n"
    )
    found = _package_imports(ast.parse(source))
    assert found == [
        ("basketgnn.engine.trainer", ["setup_torch"], 1),
        ("basketgnn.train.trainer", ["train_dnntsp"], 3),
        ("basketgnn.registry", [], 5),
    ]
