"""The engine's code stays readable by construction: no function in `cherry/` longer than 80 lines,
and the executor's step loop in a module of its own size (staging, recovery and recomputation live
beside it, `cherry.execution.staging|recovery|recompute`)."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MAX_FUNCTION_LINES = 80
MAX_EXECUTOR_LINES = 400


def _long_functions(package: Path) -> list[str]:
    found = []
    for path in sorted(package.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({lines} lines)")
    return found


def test_no_function_in_cherry_is_longer_than_80_lines():
    assert _long_functions(ROOT / "cherry") == []


def test_the_executor_module_holds_the_step_loop_only():
    lines = (ROOT / "cherry" / "execution" / "executor.py").read_text(encoding="utf-8").count("\n")
    assert lines <= MAX_EXECUTOR_LINES, f"executor.py has {lines} lines: move a part with its own state out"
