"""The systems table: every benchmarked system, once — the one place a new system is registered.

An entry says what the rest of the project needs to know about a system without importing it:
- its name;
- its role (`ROLES`), which decides what the summary, the figures and `cherry bench systems` compare
  it with;
- its display label, colour and marker in every table and figure;
- the module whose ``SYSTEM`` attribute is its `System` class. It is imported only when asked for, so
  a run of one system never imports another's dependencies and a missing third-party package becomes
  a skipped run;
- the JSON schema of its ``options``. Each property's ``default`` is the option's only default;
  cherry's are the run schema's ``$defs/cherry_options``.

Adding a system: write ``baselines/<name>/`` with ``SYSTEM = <class>`` (a `cherry.systems.contract.System`)
and call `register_system` here (or, for code outside this repository, before building specs); no
other module names it. `cherry.systems.get_system` imports a registered system's class.

Imports: of Cherry's modules, this one imports `cherry.schemas` alone (which reads `cherry.paths` and
`cherry.schema_validator`). Importing it runs the package's ``__init__`` first, which also loads
`cherry.systems.contract` (torch, `cherry.data`, `cherry.sampling`). Neither module imports
`cherry.spec` or the engine at run time, so both read this table without a cycle.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Mapping

from cherry.schemas import load_schema

# What a system is in the comparison. "subject": the system the benchmark evaluates (exactly one;
# it micro-batches, K fixed or from the budget); "micro_batcher": a baseline that trains the logical
# batch in K micro-batches; "whole_batch": plain mini-batch training (K = 1); "library_baseline": a
# graph library's stock mini-batch training (K = 1).
ROLES = ("subject", "micro_batcher", "whole_batch", "library_baseline")
WHOLE_BATCH_ROLES = ("whole_batch", "library_baseline")


@dataclass(frozen=True)
class SystemEntry:
    """One row of the systems table (see module docstring). ``label`` defaults to the name."""

    name: str
    module: str
    role: str
    colour: str
    marker: str
    label: str = ""
    options: Mapping[str, Any] = field(default_factory=dict)  # option -> JSON schema (with "default")

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.isidentifier() or self.name != self.name.lower():
            raise ValueError(f"system name {self.name!r} must be a lower-case identifier")
        if self.role not in ROLES:
            raise ValueError(f"system {self.name!r}: role {self.role!r} is not one of {', '.join(ROLES)}")
        object.__setattr__(self, "options", MappingProxyType(copy.deepcopy(dict(self.options))))
        if not self.label:
            object.__setattr__(self, "label", self.name)

    @property
    def whole_batch(self) -> bool:
        """Trains each logical batch in one piece (K is always 1)."""
        return self.role in WHOLE_BATCH_ROLES

    @property
    def option_defaults(self) -> dict[str, Any]:
        return {key: copy.deepcopy(schema.get("default")) for key, schema in self.options.items()}

    def options_schema(self) -> dict:
        """The JSON schema of this system's ``options`` object (closed: unknown keys are errors)."""
        return {"type": "object", "additionalProperties": False, "properties": copy.deepcopy(dict(self.options))}


def cherry_option_schemas() -> dict[str, Any]:
    """Cherry's options (option -> JSON schema with its default): the run schema's ``$defs/cherry_options``."""
    return copy.deepcopy(load_schema("run")["$defs"]["cherry_options"]["properties"])


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
    """Add ``entry`` to the table (ValueError if its name is taken by a different entry, or if it is a
    second ``"subject"``)."""
    if not isinstance(entry, SystemEntry):
        raise TypeError(f"expected a SystemEntry, got {type(entry).__name__}")
    known = _TABLE.get(entry.name)
    if known is not None and known != entry:
        raise ValueError(f"system {entry.name!r} is already registered (module {known.module})")
    subjects = [e.name for e in _TABLE.values() if e.role == "subject" and e.name != entry.name]
    if entry.role == "subject" and subjects:
        raise ValueError(f"system {entry.name!r}: the table's subject is already {subjects[0]!r} (expected one)")
    _TABLE[entry.name] = entry
    return entry


for _entry in (
    SystemEntry("cherry", "cherry.execution.cherry_system", "subject", "#c0392b", "o", "Cherry",
                cherry_option_schemas()),
    SystemEntry("full", "baselines.full", "whole_batch", "#222222", "s", "full batch"),
    SystemEntry("dgl", "baselines.dgl", "library_baseline", "#2471a3", "D", "DGL"),
    SystemEntry("pyg", "baselines.pyg", "library_baseline", "#17a2b8", "P", "PyG"),
    SystemEntry("naive", "baselines.naive", "micro_batcher", "#7f8c8d", "v", "naive"),
    SystemEntry("betty", "baselines.betty", "micro_batcher", "#229954", "^", "Betty", _BETTY_OPTIONS),
    SystemEntry("buffalo", "baselines.buffalo", "micro_batcher", "#d68910", "<", "Buffalo", _BUFFALO_OPTIONS),
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


def systems_with_role(*roles: str) -> tuple[str, ...]:
    """The registered systems whose role is one of ``roles``, in registration order (ValueError for a
    role not in `ROLES`)."""
    unknown = [r for r in roles if r not in ROLES]
    if unknown:
        raise ValueError(f"unknown role {unknown[0]!r}; expected one of {', '.join(ROLES)}")
    return tuple(name for name, entry in _TABLE.items() if entry.role in roles)


def subject_system() -> str:
    """The name of the system the benchmark evaluates (the one entry of role ``"subject"``)."""
    subjects = systems_with_role("subject")
    if len(subjects) != 1:
        raise LookupError(f"the systems table has {len(subjects)} subjects: expected exactly one")
    return subjects[0]
