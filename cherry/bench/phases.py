"""The experiment table: one row (`Phase`) per experiment phase of the workflow.

A row says everything the rest of the workflow needs about a phase, so adding one is a row here, a
figure function (`cherry.report.figures.register_figure`) and a caption
(``workflow/report/captions/<figure>.rst``):

- ``name``: the key under ``experiments:`` in a config and the ``experiment`` of its run specs;
- ``case_schema``: the ``$defs`` entry of ``workflow/schemas/config.schema.yaml`` that one case
  matches (the config schema's ``experiments`` keys are generated from this table);
- ``expand(case, base)``: the case's runs as ``(axis, spec fields)`` pairs (``base``: the config's
  and the case's ``run`` settings merged); `cherry.bench.experiments` adds dataset, seed, repeat;
- ``timed``: whether its step times are compared (its CPU runs never overlap: ``common.smk``);
- ``figures``: names of the figures drawn from its runs (``cherry.report.figures.FIGURES``);
- ``summary``: names of the summary sections its runs feed (``cherry.report.summary.SECTIONS``);
- ``searched``: expanded into largest-batch searches (``cherry.bench.capacity``) instead of runs.

Invariants: names are unique; the table's order is the order of runs, figures and sections.
Figures that read every run of one system whatever its phase are `SYSTEM_FIGURES`.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator, Mapping, Optional

from cherry.systems.table import subject_system

Expansion = Iterable[tuple[Optional[str], dict]]
NAME = re.compile(r"^[a-z][a-z0-9_]*$")


class ConfigError(ValueError):
    """A workflow config that cannot run; the message is one line naming the bad key and value."""


@dataclass(frozen=True)
class Phase:
    """One experiment phase (see the module docstring for each field's contract)."""

    name: str
    case_schema: str
    expand: Callable[[dict, dict], Expansion]
    timed: bool
    figures: tuple[str, ...] = ()
    summary: tuple[str, ...] = ()
    searched: bool = False

    def __post_init__(self) -> None:
        for field in ("name", "case_schema"):
            value = getattr(self, field)
            if not isinstance(value, str) or not NAME.match(value):
                raise ValueError(f"phase {field} {value!r}: expected a lower-case identifier")
        if not callable(self.expand):
            raise TypeError(f"phase {self.name}: expand is {type(self.expand).__name__}, expected a callable")
        if not isinstance(self.timed, bool) or not isinstance(self.searched, bool):
            raise TypeError(f"phase {self.name}: timed and searched must be booleans")
        for field in ("figures", "summary"):
            names = getattr(self, field)
            if not isinstance(names, tuple) or not all(isinstance(n, str) and NAME.match(n) for n in names):
                raise TypeError(f"phase {self.name}: {field} {names!r}: expected a tuple of lower-case names")


def _system_ks(systems: Mapping[str, list]) -> Iterator[tuple[str, Any]]:
    for system, ks in systems.items():
        for k in ks:
            yield system, k


def expand_grid(case: dict, base: dict) -> Expansion:
    """Every listed system at each of its K (the plain grid most phases are)."""
    for system, k in _system_ks(case["systems"]):
        yield None, {"system": system, "num_microbatches": k}


def _memory_wall(case: dict, base: dict) -> Expansion:
    """One search per system and K, starting at ``start_batch``, under the case's capacity."""
    for system, k in _system_ks(case["systems"]):
        yield None, {"system": system, "num_microbatches": k, "batch_size": case.get("start_batch", 256),
                     "device_memory_bytes": case["device_memory_bytes"]}


def _epoch_time(case: dict, base: dict) -> Expansion:
    """Every system at each K under each emulated capacity (same batch): time per epoch vs capacity."""
    for capacity in case["device_memory_bytes"]:
        for system, k in _system_ks(case["systems"]):
            yield None, {"system": system, "num_microbatches": k, "device_memory_bytes": capacity}


def _accuracy_cap(case: dict, base: dict) -> Expansion:
    """Under the case's capacity: a whole-batch system at K = 1 once per fitted axis
    (`cherry.bench.fit_setting.FIT_AXES`: its batch or its fanouts searched before it trains); every
    other system at the run's batch and fanouts with its own K (axis ``own_k``)."""
    from cherry.bench.fit_setting import FIT_AXES
    from cherry.systems.table import system_entry, system_names

    for system, k in _system_ks(case["systems"]):
        fields = {"system": system, "num_microbatches": k, "device_memory_bytes": case["device_memory_bytes"]}
        plain = system in system_names() and system_entry(system).whole_batch and k == 1
        for axis in (FIT_AXES if plain else ("own_k",)):
            yield axis, fields


SENSITIVITY_AXES = ("aggr", "layers", "hidden", "fanout")


def _sensitivity(case: dict, base: dict) -> Expansion:
    """One axis varied at a time around ``base`` (see ``sensitivity_case`` in the config schema)."""
    from cherry.spec import schema_defaults

    defaults = schema_defaults()
    layer_fanouts = case.get("layer_fanouts") or base.get("fanouts") or defaults["fanouts"]
    layers = base.get("num_layers", defaults["num_layers"])
    for axis in SENSITIVITY_AXES:
        for value in case["vary"].get(axis, ()):
            if axis == "aggr":
                change = {"model": "gat", "aggr": None} if value == "gat" else {"model": "sage", "aggr": value}
            elif axis == "layers":
                if value > len(layer_fanouts):
                    raise ConfigError(f"layers {value} needs {value} fanouts, but layer_fanouts is {layer_fanouts}")
                change = {"num_layers": value, "fanouts": list(layer_fanouts[:value])}
            elif axis == "hidden":
                change = {"hidden": value}
            else:
                change = {"fanouts": [value] * layers}
            for system, k in _system_ks(case["systems"]):
                yield axis, {**change, "system": system, "num_microbatches": k}


def _ablation(case: dict, base: dict) -> Expansion:
    """The subject (cherry) with all techniques on, then with each variant's options, at each K."""
    for k in case["num_microbatches"]:
        for options in [{}] + [dict(v) for v in case["variants"]]:
            yield None, {"system": subject_system(), "num_microbatches": k, "options": options}


def _distributed(case: dict, base: dict) -> Expansion:
    """The subject (cherry) at each K on each number of data-parallel ranks (the same logical batch
    each time)."""
    for k in case["num_microbatches"]:
        for nproc in case["nproc"]:
            yield None, {"system": subject_system(), "num_microbatches": k, "nproc": nproc}


# The table. Untimed phases measure memory, K or accuracy, which jobs running beside them do not
# change (sensitivity: its peaks are the point, its times are indicative; accuracy_cap: its accuracy is
# the point, its training seconds, one thread per job, are indicative).
PHASES: dict[str, Phase] = {p.name: p for p in (
    Phase("memory_wall", "memory_wall_case", _memory_wall, timed=False, figures=("memory_wall",),
          summary=("memory_wall",), searched=True),
    Phase("microbatch_cost", "grid_case", expand_grid, timed=True, figures=("microbatch_cost", "redundancy"),
          summary=("step_time", "memory")),
    Phase("breakdown", "grid_case", expand_grid, timed=True, figures=("breakdown",),
          summary=("step_time", "memory")),
    Phase("convergence", "grid_case", expand_grid, timed=False, figures=("convergence",),
          summary=("convergence",)),
    Phase("sensitivity", "sensitivity_case", _sensitivity, timed=False, figures=("sensitivity",),
          summary=("memory",)),
    Phase("ablation", "ablation_case", _ablation, timed=True, figures=("ablation",), summary=("ablation",)),
    Phase("distributed", "distributed_case", _distributed, timed=True),
    Phase("epoch_time", "epoch_time_case", _epoch_time, timed=True, figures=("epoch_time",),
          summary=("epoch_time",)),
    Phase("accuracy_cap", "accuracy_cap_case", _accuracy_cap, timed=False, figures=("accuracy_cap",),
          summary=("accuracy_cap",)),
)}

# Figures drawn from every run of one system, whatever its phase: figure -> system (the estimator's:
# the subject of the systems table, cherry).
SYSTEM_FIGURES: dict[str, str] = {"estimator": subject_system()}


def check_new_entry(kind: str, name: str, taken: Iterable[str], value: Callable) -> None:
    """The checks of every registration beside the table (a figure, a summary section): ValueError
    unless ``name`` is a lower-case identifier not in ``taken``, TypeError unless ``value`` is callable."""
    if not isinstance(name, str) or not NAME.match(name):
        raise ValueError(f"{kind} name {name!r}: expected a lower-case identifier")
    if name in taken:
        raise ValueError(f"{kind} {name!r} is already registered")
    if not callable(value):
        raise TypeError(f"{kind} {name}: got {type(value).__name__}, expected a callable")


def register_phase(phase: Phase) -> Phase:
    """Append ``phase`` to the table (ValueError if its name or one of its figures is taken)."""
    if not isinstance(phase, Phase):
        raise TypeError(f"register_phase takes a Phase, got {type(phase).__name__}")
    if phase.name in PHASES:
        raise ValueError(f"experiment phase {phase.name!r} is already in the table")
    taken = set(figure_sources())
    clash = [f for f in phase.figures if f in taken]
    if clash:
        raise ValueError(f"phase {phase.name}: figure {clash[0]!r} is already drawn by another phase")
    PHASES[phase.name] = phase
    return phase


def unregister_phase(name: str) -> None:
    """Remove a registered phase (tests; KeyError naming it if absent)."""
    if name not in PHASES:
        raise KeyError(f"no experiment phase {name!r}")
    del PHASES[name]


def phase(name: str) -> Phase:
    """The row of phase ``name`` (ValueError listing the phases if unknown)."""
    if name not in PHASES:
        raise ValueError(f"unknown experiment phase {name!r}; expected one of: {', '.join(PHASES)}")
    return PHASES[name]


def timed_phases() -> tuple[str, ...]:
    """Names of the phases whose step times are compared."""
    return tuple(p.name for p in PHASES.values() if p.timed)


def figure_sources() -> dict[str, str]:
    """``{figure: source}`` of every figure, in table order: source is the phase whose runs draw it,
    or for `SYSTEM_FIGURES` the system whose runs (of any phase) draw it."""
    sources = {figure: p.name for p in PHASES.values() for figure in p.figures}
    sources.update(SYSTEM_FIGURES)
    return sources


def phases_of_figure(figure: str) -> tuple[str, ...]:
    """Names of the phases whose runs figure ``figure`` draws."""
    return tuple(p.name for p in PHASES.values() if figure in p.figures)


def phases_of_section(section: str) -> tuple[str, ...]:
    """Names of the phases whose runs summary section ``section`` reads."""
    return tuple(p.name for p in PHASES.values() if section in p.summary)
