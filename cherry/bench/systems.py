"""Registry of benchmarked systems: name -> `System` class, imported only when asked for.

``cherry`` is `cherry.bench.cherry_system.CherrySystem`; every other name ``n`` is the ``SYSTEM``
attribute of the package ``baselines.<n>``. Lazy imports keep a run of one system from importing
another's dependencies (DGL, PyG), and let a missing third-party package become a skipped run.
"""
from __future__ import annotations

import importlib

from cherry.bench.system import System, SystemUnavailable

SYSTEM_NAMES = ("cherry", "full", "naive", "dgl", "pyg", "betty", "buffalo")

# A missing module under these roots is a bug in the repository, not a missing optional dependency.
_OWN_PACKAGES = ("cherry", "baselines")


def get_system(name: str) -> type[System]:
    """The class registered as ``name``.

    Raises ValueError (one line, listing the names) for an unknown name, `SystemUnavailable` when a
    third-party package the system needs is not installed, and ImportError for a broken module of
    this repository.
    """
    if not isinstance(name, str):
        raise TypeError(f"system name has type {type(name).__name__}: expected a str")
    if name not in SYSTEM_NAMES:
        raise ValueError(f"unknown system {name!r}; known systems: {', '.join(SYSTEM_NAMES)}")
    if name == "cherry":
        from cherry.bench.cherry_system import CherrySystem

        return CherrySystem
    module_name = f"baselines.{name}"
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        missing = exc.name or ""
        if missing.split(".")[0] in _OWN_PACKAGES:
            raise ImportError(f"system {name!r}: module {missing!r} is missing from this repository") from exc
        raise SystemUnavailable(f"system {name!r} needs the package {missing!r}, which is not installed") from exc
    cls = getattr(module, "SYSTEM", None)
    if not (isinstance(cls, type) and issubclass(cls, System)):
        raise ImportError(f"{module_name}.SYSTEM must be a subclass of cherry.bench.system.System, got {cls!r}")
    return cls
