"""Importing a script of benchmarks/ as a module, the way ``python benchmarks/X.py`` finds its
imports (``from common import ...``), for tests of its functions without running its ``main``."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

BENCHMARKS = Path(__file__).resolve().parent.parent.parent / "benchmarks"


def load_script(monkeypatch: pytest.MonkeyPatch, script: str, name: str) -> Iterator[ModuleType]:
    """Yield ``benchmarks/SCRIPT`` imported as module ``name``; afterwards the benchmarks'
    modules leave ``sys.modules`` again (a fixture's body: ``yield from load_script(...)``)."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    added = [m for m in ("common", name) if m not in sys.modules]
    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / script)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    yield module
    for m in added:
        sys.modules.pop(m, None)
