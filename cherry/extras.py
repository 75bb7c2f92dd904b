"""Which optional extra of the install (``pip install -e ".[EXTRA]"``, pyproject.toml) provides a
module that the engine itself does not need.

The engine needs torch, numpy, pyyaml and tqdm only; a feature that imports anything else does so
inside the function that uses it, so a missing package surfaces when the feature is called, as one
line naming the extra to install (`missing_extra`, read by `cherry.errors`). Standard library only.
"""
from __future__ import annotations

import importlib
from types import ModuleType
from typing import Optional

# top-level module -> the extra whose packages provide it (tests/unit/test_light_install.py checks
# that each extra exists in pyproject.toml and lists the module's distribution)
EXTRA_OF_MODULE = {
    "pandas": "data", "snakemake": "bench", "pyarrow": "bench", "matplotlib": "bench", "scipy": "bench",
    "pynvml": "bench", "jsonschema": "bench", "psutil": "bench",
    "ogb": "ogb", "torch_geometric": "pyg", "pymetis": "metis", "dgl": "dgl",
    "torch_scatter": "pyg-sampling", "torch_sparse": "pyg-sampling",
}


def missing_extra(exc: BaseException) -> Optional[str]:
    """What to install for the ImportError ``exc`` where the module it misses belongs to an extra, as
    ``"pip install -e '.[bench]'"``; None for any other import failure."""
    name = getattr(exc, "name", None) or ""
    extra = EXTRA_OF_MODULE.get(name.partition(".")[0])
    if extra is None or not isinstance(exc, ModuleNotFoundError):
        return None
    return f"pip install -e '.[{extra}]'"


def require(module: str) -> ModuleType:
    """``importlib.import_module(module)`` for a feature that needs an extra; where the extra is not
    installed, the ModuleNotFoundError's one line says which to install."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        install = missing_extra(exc)
        if install is None:
            raise
        raise ModuleNotFoundError(f"{exc}; {NEEDS_EXTRA}: {install}", name=exc.name) from None


NEEDS_EXTRA = "this feature needs an optional extra"
