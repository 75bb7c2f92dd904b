"""The benchmarked systems: the table and the contract each implements.

- `cherry.systems.table`: the systems table (`SystemEntry`, `ROLES`, `register_system`, `system_names`,
  `system_entry`, `is_whole_batch`, `systems_with_role`, `subject_system`), the one place a system is
  registered and the one module that knows systems by name.
- `cherry.systems.contract`: `System`, `StepOutcome`, `SystemUnavailable` and `get_system` (imports a
  registered system's class on demand).

Cherry's own adapter is `cherry.execution.cherry_system` (beside the executor it wraps); the baselines
live in `baselines/`. This package imports no execution code and reads `cherry.spec` for typing only,
so `cherry.spec` and the engine may import it.
"""
from cherry.systems.table import (ROLES, SystemEntry, is_whole_batch, register_system, subject_system,
                                  system_entry, system_names, systems_with_role)
from cherry.systems.contract import StepOutcome, System, SystemUnavailable, get_system

__all__ = ["ROLES", "StepOutcome", "System", "SystemEntry", "SystemUnavailable", "get_system", "is_whole_batch",
           "register_system", "subject_system", "system_entry", "system_names", "systems_with_role"]
