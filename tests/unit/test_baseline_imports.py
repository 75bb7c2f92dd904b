"""Baselines stay independent of Cherry's engine: no baseline imports cherry.planning, cherry.execution
or cherry.session (statically, by parsing every .py file under baselines/)."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FORBIDDEN = ("cherry.planning", "cherry.execution", "cherry.session")
DYNAMIC_IMPORTERS = ("import_module", "__import__")


def _is_forbidden(module: str) -> bool:
    return any(module == f or module.startswith(f + ".") for f in FORBIDDEN)


def forbidden_imports(source: str, filename: str = "<source>") -> list[str]:
    """Every module named by an import in ``source`` that is (inside) a forbidden package, including
    ``from cherry import planning`` and ``importlib.import_module("cherry.execution")``."""
    found = []
    for node in ast.walk(ast.parse(source, filename=filename)):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names if _is_forbidden(a.name)]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            found += [n for n in names if _is_forbidden(n)][:1]
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
            arg = node.args[0].value
            if name in DYNAMIC_IMPORTERS and isinstance(arg, str) and _is_forbidden(arg):
                found.append(arg)
    return found


def baseline_files() -> list[Path]:
    return sorted((ROOT / "baselines").rglob("*.py"))


@pytest.mark.parametrize("source", [
    "import cherry.planning",
    "import cherry.execution.executor as ex",
    "from cherry.planning.split import split_seeds",
    "from cherry import planning",
    "from cherry import data, session",
    "import importlib\nimportlib.import_module('cherry.execution')",
    "def f():\n    from cherry.session import Session",
])
def test_checker_catches_forbidden_imports(source):
    assert forbidden_imports(source)


@pytest.mark.parametrize("source", [
    "import cherry.sampling",
    "from cherry.data import Dataset",
    "from cherry import models, bench",
    "from .common import x",
    "import cherry_planning",
    "from cherry.planningish import x",
])
def test_checker_allows_other_imports(source):
    assert forbidden_imports(source) == []


def test_baselines_exist_to_be_checked():
    names = {p.relative_to(ROOT / "baselines").parts[0] for p in baseline_files()}
    assert {"common.py", "library.py", "full", "naive", "betty", "buffalo", "dgl", "pyg"} <= names


def test_no_baseline_imports_cherry_engine():
    offenders = {}
    for path in baseline_files():
        bad = forbidden_imports(path.read_text(encoding="utf-8"), str(path))
        if bad:
            offenders[str(path.relative_to(ROOT))] = bad
    assert offenders == {}, f"baselines must not import {FORBIDDEN}: {offenders}"
