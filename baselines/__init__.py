"""The systems Cherry is compared with; each an adapter with the same interface.

Each sub-package ``baselines.<name>`` exposes ``SYSTEM``, a `cherry.bench.system.System` subclass whose
``name`` is ``<name>``: ``full`` (plain mini-batch), ``naive`` (K independently sampled groups),
``betty`` (REG + METIS), ``buffalo`` (degree buckets + knapsack), ``dgl`` and ``pyg``. They import only
`cherry.data`, `cherry.sampling`, `cherry.models` and `cherry.bench` (checked by a test).
`system_class(name)` imports a baseline on demand, so one whose framework is missing fails only when used.
"""
from __future__ import annotations

import importlib

BASELINE_NAMES = ("full", "naive", "betty", "buffalo", "dgl", "pyg")


def system_class(name: str) -> type:
    """The ``SYSTEM`` class of baseline ``name`` (one of `BASELINE_NAMES`)."""
    if name not in BASELINE_NAMES:
        raise ValueError(f"unknown baseline {name!r}; expected one of {BASELINE_NAMES}")
    return importlib.import_module(f"baselines.{name}").SYSTEM


__all__ = ["BASELINE_NAMES", "system_class"]
