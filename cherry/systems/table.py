"""The systems table: every benchmarked system, once — the one place a new system is registered.

An entry says what the rest of the project needs to know about a system without importing it:
its name, whether it trains the logical batch whole (K is then always 1) or in micro-batches, its
colour and marker in every figure, the module whose ``SYSTEM`` attribute is its `System` class
(imported only when asked for, so a run of one system never imports another's dependencies and a
missing third-party package becomes a skipped run), and the JSON schema of its ``options`` (each
property's ``default`` is the option's only default).

Adding a system: write ``baselines/<name>/`` with ``SYSTEM = <class>`` (a `cherry.systems.contract.System`)
and call `register_system` here (or, for code outside this repository, before building specs).
`cherry.systems.get_system` imports a registered system's class. This module imports nothing of
Cherry's (`cherry.spec` reads it), so the contract, which takes a `cherry.spec.RunSpec`, lives apart.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Mapping

from cherry.planning.ordering import ORDERINGS  # the one list of orderings
from cherry.planning.residency import RESIDENCY_MODES


@dataclass(frozen=True)
class SystemEntry:
    """One row of the systems table (see module docstring)."""

    name: str
    module: str
    whole_batch: bool
    colour: str
    marker: str
    label: str = ""
    options: Mapping[str, Any] = field(default_factory=dict)  # option -> JSON schema (with "default")

    def __post_init__(self) -> None:
        if not self.name.isidentifier() or self.name != self.name.lower():
            raise ValueError(f"system name {self.name!r} must be a lower-case identifier")
        object.__setattr__(self, "options", MappingProxyType(copy.deepcopy(dict(self.options))))
        if not self.label:
            object.__setattr__(self, "label", self.name)

    @property
    def option_defaults(self) -> dict[str, Any]:
        return {key: copy.deepcopy(schema.get("default")) for key, schema in self.options.items()}

    def options_schema(self) -> dict:
        """The JSON schema of this system's ``options`` object (closed: unknown keys are errors)."""
        return {"type": "object", "additionalProperties": False, "properties": copy.deepcopy(dict(self.options))}


_CHERRY_OPTIONS = {
    "ordering": {"enum": list(ORDERINGS), "default": "metis",
                 "description": "seed ordering for locality (contiguous splits)"},
    "balance": {"enum": ["memory", "count"], "default": "memory",
                "description": "balance micro-batches by estimated bytes or by seed count"},
    "stage_features": {"type": "boolean", "default": True,
                       "description": "gather each input feature row once per mini-batch (GPU)"},
    "pipeline": {"type": "boolean", "default": True, "description": "prepare micro-batch k+1 while k computes"},
    "native_ops": {"type": "boolean", "default": True,
                   "description": "false: CHERRY_NO_EXT=1, the pure-PyTorch reference ops"},
    "safety": {"type": "number", "minimum": 0, "exclusiveMaximum": 1, "default": 0.1,
               "description": "fraction of the budget kept free when choosing K"},
    # none by default: on the CPU's emulated device a cache saves no real transfer; a GPU run whose
    # features do not fit asks for auto (which plans only the sizes that could win: ~1.3 s of a
    # 2,048-seed synth-products run's start)
    "feature_cache": {"enum": list(RESIDENCY_MODES), "default": "none",
                      "description": "input features on the device: auto (a cache of the hottest rows sized with K "
                                     "by the planner, all rows when they fit), none, all"},
    "recompute": {"enum": ["auto", "on", "off"], "default": "auto",
                  "description": "per-layer activation recomputation: auto (only when one seed per micro-batch "
                                 "does not fit), on, off"},
    "exactness_check": {"type": "string", "pattern": "^(first-step|off|every:[1-9][0-9]*)$", "default": "first-step",
                        "description": "partition invariance of the gradient, checked by the engine before the "
                                       "optimizer step: first-step, every:N (steps), off"},
}

# As released by default (see baselines/betty/system.py and baselines/buffalo/system.py).
_BETTY_OPTIONS = {
    "weighted_reg": {"type": "boolean", "default": False,
                     "description": "true (as published): co-neighbour counts as METIS edge weights"},
    "num_re_partition": {"type": "integer", "minimum": 0, "default": 0,
                         "description": "memory-aware re-splits of the largest micro-batch (0 as released)"},
}
_BUFFALO_OPTIONS = {
    "chunk_bucket": {"enum": ["fanout", "largest"], "default": "fanout",
                     "description": "bucket chunked into K pieces: degree = fanout (as released) or the most populous"},
}

_TABLE: dict[str, SystemEntry] = {}


def register_system(entry: SystemEntry) -> SystemEntry:
    """Add ``entry`` to the table (ValueError if its name is taken by a different entry)."""
    if not isinstance(entry, SystemEntry):
        raise TypeError(f"expected a SystemEntry, got {type(entry).__name__}")
    known = _TABLE.get(entry.name)
    if known is not None and known != entry:
        raise ValueError(f"system {entry.name!r} is already registered (module {known.module})")
    _TABLE[entry.name] = entry
    return entry


for _entry in (
    SystemEntry("cherry", "cherry.systems.cherry_system", False, "#c0392b", "o", "Cherry", _CHERRY_OPTIONS),
    SystemEntry("full", "baselines.full", True, "#222222", "s", "full batch"),
    SystemEntry("dgl", "baselines.dgl", True, "#2471a3", "D", "DGL"),
    SystemEntry("pyg", "baselines.pyg", True, "#17a2b8", "P", "PyG"),
    SystemEntry("naive", "baselines.naive", False, "#7f8c8d", "v", "naive"),
    SystemEntry("betty", "baselines.betty", False, "#229954", "^", "Betty", _BETTY_OPTIONS),
    SystemEntry("buffalo", "baselines.buffalo", False, "#d68910", "<", "Buffalo", _BUFFALO_OPTIONS),
):
    register_system(_entry)


def system_names() -> tuple[str, ...]:
    """Every registered system, in registration order."""
    return tuple(_TABLE)


def system_entry(name: str) -> SystemEntry:
    """The entry of ``name`` (ValueError, one line listing the known names, for an unknown one)."""
    if not isinstance(name, str):
        raise TypeError(f"system name has type {type(name).__name__}: expected a str")
    try:
        return _TABLE[name]
    except KeyError:
        raise ValueError(f"unknown system {name!r}; known systems: {', '.join(_TABLE)}") from None


def is_whole_batch(name: str) -> bool:
    """True for a system that trains each logical batch in one piece (K = 1)."""
    return system_entry(name).whole_batch
