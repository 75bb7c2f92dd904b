"""The systems Cherry is compared with; each an adapter with the same interface.

Each sub-package ``baselines.<name>`` exposes ``SYSTEM``, a `cherry.systems.contract.System` subclass whose
``name`` is ``<name>``: ``full`` (plain mini-batch), ``naive`` (K independently sampled groups),
``betty`` (REG + METIS), ``buffalo`` (degree buckets + knapsack), ``dgl`` and ``pyg``. They import only
`cherry.data`, `cherry.sampling`, `cherry.models`, `cherry.spec`, `cherry.probe`, `cherry.systems` and
`cherry.bench`, never `cherry.planning` or `cherry.execution` (checked by a test). Which baselines exist is the systems table's business (`cherry.systems`); this
module only reads it.
"""
from __future__ import annotations


def baseline_names() -> tuple[str, ...]:
    """The registered systems whose class lives in this package."""
    from cherry.systems import system_entry, system_names

    return tuple(n for n in system_names() if system_entry(n).module.startswith("baselines."))


def system_class(name: str) -> type:
    """The ``SYSTEM`` class of baseline ``name`` (imported on demand, so one whose framework is
    missing fails only when used)."""
    from cherry.systems import get_system

    if name not in baseline_names():
        raise ValueError(f"unknown baseline {name!r}; expected one of {baseline_names()}")
    return get_system(name)


__all__ = ["baseline_names", "system_class"]
