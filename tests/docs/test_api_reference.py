"""The API reference cannot rot without MkDocs installed: every `::: target` of docs/api.md imports and
has a docstring, and each public entry point is a target or a documented member of one."""
from __future__ import annotations

import importlib
import inspect
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TARGETS = re.findall(r"^::: ([\w.]+)\s*$", (ROOT / "docs" / "api.md").read_text(), flags=re.M)
ENTRY_POINTS = [
    "cherry.spec.make_spec", "cherry.execution.Trainer", "cherry.execution.EpochResult", "cherry.data.Dataset",
    "cherry.data.Dataset.from_arrays", "cherry.data.load_dataset", "cherry.sampling.Blocks", "cherry.sampling.Block",
    "cherry.models.register_model", "cherry.interop.from_dgl", "cherry.interop.from_pyg",
    "cherry.execution.check_exact", "cherry.memory.DeviceMemory",
]


def _resolve(path: str):
    """The object at dotted ``path``: the longest importable module prefix, then attributes."""
    parts = path.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for name in parts[cut:]:
            obj = getattr(obj, name)
        return obj
    raise ImportError(path)


def _docstring(obj) -> str:
    """The docstring written for ``obj`` (not the signature a dataclass gets when it has none)."""
    doc = inspect.getdoc(obj) or ""
    return "" if inspect.isclass(obj) and doc.startswith(f"{obj.__name__}(") else doc


def _documented(owner: str, name: str) -> bool:
    """Whether mkdocstrings renders ``owner.name``: a public member of a module in its ``__all__``
    (or defined there), or a public method of a class."""
    parent = _resolve(owner)
    if inspect.ismodule(parent):
        return name in getattr(parent, "__all__", ()) or getattr(getattr(parent, name, None), "__module__", "") == owner
    return not name.startswith("_") and hasattr(parent, name)


@pytest.mark.parametrize("target", TARGETS)
def test_target_imports_and_has_a_docstring(target):
    assert _docstring(_resolve(target)), f"docs/api.md: `::: {target}` has no docstring"


@pytest.mark.parametrize("path", ENTRY_POINTS)
def test_entry_point_is_in_the_reference(path):
    obj = _resolve(path)
    assert _docstring(obj), f"{path} has no docstring: the reference would skip it"
    owner, name = path.rsplit(".", 1)
    covered = path in TARGETS or (any(owner == t or owner.startswith(t + ".") for t in TARGETS)
                                  and _documented(owner, name))
    assert covered, f"{path} is not under any `:::` target of docs/api.md"
    assert f"#{path})" in (ROOT / "docs" / "api.md").read_text(), f"docs/api.md's entry table does not link {path}"
