"""No import cycles in `cherry/`: every import statement of every module (module level and inside
functions alike, since a deferred import is still a dependency; ``if TYPE_CHECKING:`` blocks excepted)
is an edge, and the graph must have no strongly connected component of two or more modules. The same
holds one level up: with every module folded into its package (``cherry.execution.trainer`` into
``cherry.execution``; a top-level module such as ``cherry.spec`` is its own node), the packages form
no cycle either, so the layers (spec, systems, execution, ...) stack one way.

``from a.b import c`` is an edge to ``a.b.c`` when that is a module, else to ``a.b``; a package's
``__init__`` is the module of its name. Parents imported implicitly by Python are not edges.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def module_files(root: Path, package: str) -> dict[str, Path]:
    """Dotted module name -> file, for every ``.py`` under ``root/package``."""
    modules = {}
    for path in sorted((root / package).rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def imported_modules(module: str, path: Path, known: set[str]) -> set[str]:
    """The modules of ``known`` that ``module`` (source at ``path``) imports anywhere in its code."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parts = parts[: len(parts) - (node.level - 1)]
                base = ".".join(parts + ([base] if base else []))
            for alias in node.names:
                full = f"{base}.{alias.name}"
                found.add(full if full in known else base)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(path.read_text(encoding="utf-8"), filename=str(path)))
    return {m for m in found if m in known and m != module}


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of two or more nodes (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    cycles.append(sorted(component))
    return cycles


def import_graph(root: Path, package: str) -> dict[str, set[str]]:
    modules = module_files(root, package)
    return {m: imported_modules(m, p, set(modules)) for m, p in modules.items()}


def test_cherry_has_no_import_cycles():
    graph = import_graph(REPO, "cherry")
    assert len(graph) > 50  # the walk found the package
    cycles = import_cycles(graph)
    described = ["; ".join(f"{m} -> {sorted(graph[m] & set(c))}" for m in c) for c in cycles]
    assert not cycles, "import cycles in cherry/:\n" + "\n".join(described)


def package_of(module: str, depth: int = 2) -> str:
    """The first ``depth`` dotted parts of ``module``: ``cherry.execution`` for ``cherry.execution.trainer``."""
    return ".".join(module.split(".")[:depth])


def package_graph(graph: dict[str, set[str]], depth: int = 2) -> dict[str, set[str]]:
    """``graph`` with every module folded into its package (`package_of`); an edge inside one package
    is dropped."""
    def package(module: str) -> str:
        return package_of(module, depth)

    folded: dict[str, set[str]] = {package(m): set() for m in graph}
    for module, deps in graph.items():
        folded[package(module)].update(package(d) for d in deps if package(d) != package(module))
    return folded


def test_cherrys_packages_have_no_import_cycles():
    graph = import_graph(REPO, "cherry")
    packages = package_graph(graph)
    assert {"cherry.spec", "cherry.systems", "cherry.execution"} <= set(packages)
    cycles = import_cycles(packages)
    why = []
    for cycle in cycles:  # each package edge of the cycle with the module imports behind it
        for a in cycle:
            for b in sorted(packages[a] & set(cycle)):
                pairs = sorted(f"{m} -> {d}" for m, ds in graph.items() if package_of(m) == a
                               for d in ds if package_of(d) == b)
                why.append(f"{a} -> {b}: {', '.join(pairs)}")
    assert not cycles, "package-level import cycles in cherry/:\n" + "\n".join(why)


def test_the_package_walk_finds_a_cycle_that_no_module_forms(tmp_path):
    """spec -> systems.table, systems.contract -> spec: no module cycle, but a package cycle."""
    pkg = tmp_path / "toy"
    (pkg / "systems").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "systems" / "__init__.py").write_text("")
    (pkg / "spec.py").write_text("from toy.systems.table import x\n")
    (pkg / "systems" / "table.py").write_text("x = 1\n")
    (pkg / "systems" / "contract.py").write_text("from toy.spec import y\n")
    graph = import_graph(tmp_path, "toy")
    assert import_cycles(graph) == []
    assert import_cycles(package_graph(graph)) == [["toy.spec", "toy.systems"]]
    (pkg / "systems" / "contract.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from toy.spec import y\n")
    assert import_cycles(package_graph(import_graph(tmp_path, "toy"))) == []


@pytest.mark.parametrize("function_level", [False, True])
def test_the_walk_finds_a_cycle_and_its_members(tmp_path, function_level):
    pkg = tmp_path / "toy"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("from . import b\n")
    (pkg / "a.py").write_text("import toy.sub\nfrom typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import toy.c\n")
    deferred = "def f():\n    from ..a import x\n" if function_level else "from toy.a import x\n"
    (pkg / "sub" / "b.py").write_text(deferred)
    (pkg / "c.py").write_text("import toy.a\n")
    graph = import_graph(tmp_path, "toy")
    assert graph["toy.a"] == {"toy.sub"} and graph["toy.sub"] == {"toy.sub.b"} and graph["toy.sub.b"] == {"toy.a"}
    assert import_cycles(graph) == [["toy.a", "toy.sub", "toy.sub.b"]]
    (pkg / "sub" / "b.py").write_text("import os\n")
    assert import_cycles(import_graph(tmp_path, "toy")) == []


def loaded_with(graph: dict[str, set[str]], module: str) -> set[str]:
    """Every module of ``graph`` that importing ``module`` loads: its imports, transitively, with the
    parent packages Python runs first."""
    seen: set[str] = set()
    todo = [module]
    while todo:
        current = todo.pop()
        if current in seen or current not in graph:
            continue
        seen.add(current)
        parts = current.split(".")
        todo += [".".join(parts[:i]) for i in range(1, len(parts))] + sorted(graph[current])
    return seen


def test_the_systems_table_imports_what_its_docstring_says():
    """`cherry.systems.table` imports `cherry.schemas` alone of Cherry's; loading it (with its package's
    ``__init__``) loads neither `cherry.spec` nor the engine."""
    graph = import_graph(REPO, "cherry")
    assert graph["cherry.systems.table"] == {"cherry.schemas"}
    loaded = loaded_with(graph, "cherry.systems.table")
    assert {"cherry.systems", "cherry.systems.contract", "cherry.schemas"} <= loaded
    assert "cherry.spec" not in loaded and not [m for m in loaded if m.startswith("cherry.execution")]
