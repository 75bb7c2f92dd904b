"""Markers for tests of optional dependencies: they skip (not fail at collection) where a package is absent.

The GPU machine has no pymetis, scipy, ogb or dgl (see docs/gpu.md); `pytest -m gpu` must still collect
and run there, so test modules never import these packages at module level.
"""
from __future__ import annotations

import importlib

import pytest


def importable(*names: str) -> bool:
    """Whether every module in ``names`` imports here."""
    try:
        for name in names:
            importlib.import_module(name)
    except ImportError:
        return False
    return True


HAS_BETTY_DEPS = importable("pymetis", "scipy.sparse")
needs_betty_deps = pytest.mark.skipif(not HAS_BETTY_DEPS, reason="Betty's REG partitioning needs pymetis and scipy")
needs_pymetis = pytest.mark.skipif(not importable("pymetis"), reason="the metis ordering needs pymetis")
BETTY = pytest.param("betty", marks=needs_betty_deps)  # "betty" in a parametrize list
