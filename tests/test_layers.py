"""The package's layers, one way down: no module imports a layer above its own, and no import
cycle exists anywhere (docs/architecture.md)."""

from __future__ import annotations

import ast
from pathlib import Path

import basketgnn

ROOT = Path(basketgnn.__file__).parent

#: Layer of each top-level module or subpackage, lowest first; a module imports only its own
#: layer and those below.
LAYERS: dict[str, int] = {
    "errors": 0, "io_utils": 0, "jit": 0, "metrics": 0, "registry": 0, "results_table": 0,
    "data": 1, "fingerprint": 1,
    "graph": 2, "nn": 2,
    "models": 3,
    "engine": 4,
    "scoring": 5, "recommenders": 5,
    "workflow": 6,
    "cli": 7, "pipeline": 7, "experiments": 7, "serve": 7, "__main__": 7,
}


def _modules() -> dict[str, Path]:
    out = {}
    for path in sorted(ROOT.rglob("*.py")):
        parts = path.relative_to(ROOT.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """basketgnn modules ``name`` imports (TYPE_CHECKING imports included)."""
    found = set()
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        targets = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(up + ([base] if base else []))
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
        for t in targets:
            while t and t not in modules:
                t = t.rpartition(".")[0]
            if t.startswith("basketgnn") and t != name:
                found.add(t)
    return found


def _layer(name: str) -> int:
    parts = name.split(".")
    if len(parts) == 1:  # the package's own __init__
        return 0
    return LAYERS[parts[1]]


def test_every_module_has_a_layer_and_imports_only_downwards():
    modules = _modules()
    upward = []
    for name, path in modules.items():
        for target in _imports(name, path, modules):
            if _layer(target) > _layer(name):
                upward.append(f"{name} (layer {_layer(name)}) imports {target} (layer {_layer(target)})")
    assert upward == []


def test_no_import_cycles():
    modules = _modules()
    graph = {name: _imports(name, path, modules) for name, path in modules.items()}
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(node: str, path: list[str]) -> list[str] | None:
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return path + [node, nxt]
            if nxt not in state and (cycle := visit(nxt, path + [node])):
                return cycle
        state[node] = 2
        return None

    for name in sorted(graph):
        if name not in state:
            cycle = visit(name, [])
            assert cycle is None, " -> ".join(cycle)
