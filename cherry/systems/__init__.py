"""The benchmarked systems: the table, the contract each implements, and Cherry's own adapter.

- `cherry.systems.table`: the systems table (`SystemEntry`, `register_system`, `system_names`,
  `system_entry`, `is_whole_batch`), the one place a system is registered; it imports nothing of
  Cherry's, so `cherry.spec` reads it without a cycle.
- `cherry.systems.contract`: `System`, `StepOutcome`, `SystemUnavailable` and `get_system` (imports a
  registered system's class on demand).
- `cherry.systems.cherry_system`: Cherry behind that contract (the baselines live in `baselines/`).

This package re-exports the first two, so ``from cherry.systems import get_system`` works; modules that
`cherry.spec` or the engine import use `cherry.systems.table` directly.
"""
from cherry.systems.table import SystemEntry, is_whole_batch, register_system, system_entry, system_names
from cherry.systems.contract import StepOutcome, System, SystemUnavailable, get_system

__all__ = ["StepOutcome", "System", "SystemEntry", "SystemUnavailable", "get_system", "is_whole_batch",
           "register_system", "system_entry", "system_names"]
