"""The workflow's experiment matrix: a config (``config/*.yaml``) expanded into run specs.

Which phases exist, and how each case of a phase expands, is the experiment table
(`cherry.bench.phases.PHASES`); this module applies it to a config.

`expand_experiments(config)` is the one place that turns the config into runs; the Snakefile and
the tests call it. Each run is a complete run-spec dict (``workflow/schemas/run.schema.yaml``, every
default filled in) whose ``experiment`` (and, for sensitivity runs, ``axis``) says which figure it
belongs to; its id is `cherry.spec.run_id`, the readable file name of its spec and record.
The memory wall is not a list of runs but one search per (case, system, K): `plan_searches` gives
each search's spec (its batch size is the search's start) and tolerances, which
``python -m cherry.bench.capacity_run`` takes. A run whose axis is fitted (`cherry.bench.fit_setting.FIT_AXES`,
the accuracy under a cap) trains with a setting found by a search first: `plan_fits` gives those
searches and runs, which `expand_experiments` leaves out.
Invariants: ids are unique in the result (identical runs of one experiment collapse into one); the
order is the config's order; every spec passed `cherry.spec.spec_from_dict`, so
``python -m cherry.bench.run`` accepts it.
"""
from __future__ import annotations

import copy
from typing import Any, Iterator, Mapping, Optional

from cherry.bench.phases import PHASES, ConfigError
from cherry.schemas import one_line as _one_line
from cherry.schemas import schema_problem

__all__ = ["ConfigError", "config_schema", "describe_config_error", "validate_config", "expand_experiments",
           "plan_runs", "plan_searches", "plan_fits", "verify_checks", "verify_arguments", "needs_ordering", "datasets_used",
           "check_datasets_available", "graphs_dir_of"]


def config_schema() -> dict:
    """The config schema (``workflow/schemas/config.schema.yaml``) with one ``experiments`` key per
    phase of the experiment table (`cherry.bench.phases.PHASES`), each a list of that phase's cases."""
    from cherry.schemas import load_schema

    schema = copy.deepcopy(load_schema("config"))
    experiments = schema["properties"]["experiments"]
    experiments["properties"] = {p.name: {"type": "array", "items": {"$ref": f"#/$defs/{p.case_schema}"}}
                                 for p in PHASES.values()}
    experiments["additionalProperties"] = False
    return schema


def describe_config_error(config: Any) -> Optional[str]:
    """One line describing the most relevant schema violation of ``config``, or None if it is valid."""
    return schema_problem(config, "config", "config", schema=config_schema())


def validate_config(config: Any) -> None:
    """Raise `ConfigError` (one line) unless ``config`` matches the workflow's config schema."""
    problem = describe_config_error(config)
    if problem is not None:
        raise ConfigError(problem)


def _phase_names(searched: bool) -> tuple[str, ...]:
    """The table's phases expanded into searches (``searched``) or into runs, in table order."""
    return tuple(p.name for p in PHASES.values() if p.searched == searched)


def _build_spec(fields: dict, where: str, root: Optional[str]):
    from cherry.spec import SpecError, spec_from_dict

    if root is not None:
        fields = {**fields, "root": root}
    try:
        return spec_from_dict(fields)
    except SpecError as exc:
        raise ConfigError(f"invalid config: {where}: {_one_line(exc).replace('invalid run spec: ', '')}") from None


def _expand(config: Mapping[str, Any], experiments: tuple[str, ...]) -> Iterator[tuple[dict, Any]]:
    """(case, validated RunSpec) of every run of ``experiments`` in ``config``, in the config's order."""
    if not isinstance(config, Mapping):
        raise TypeError(f"config has type {type(config).__name__}: expected a mapping")
    config = copy.deepcopy(dict(config))
    validate_config(config)
    root = (config.get("data") or {}).get("root")
    defaults = dict(config.get("run") or {})
    for experiment in experiments:
        for index, case in enumerate(config["experiments"].get(experiment) or ()):
            base = {**defaults, **(case.get("run") or {})}
            # a search measures memory (deterministic): one per setting, whatever the repeats
            repeats = 1 if PHASES[experiment].searched else case.get("repeats", config.get("repeats", 1))
            seeds = case.get("seeds") or [base.get("seed", 0)]
            for axis, fields in PHASES[experiment].expand(case, base):
                for seed in seeds:
                    for repeat in range(repeats):
                        merged = {**base, **fields, "dataset": case["dataset"], "experiment": experiment,
                                  "axis": axis, "seed": seed, "repeat": repeat}
                        yield case, _build_spec(merged, f"experiments/{experiment}/{index}", root)


def expand_experiments(config: Mapping[str, Any]) -> list[dict]:
    """Every run of ``config`` as a complete run-spec dict (see the module docstring).

    Raises `ConfigError` (one line naming the experiment, case and problem) for a config that does
    not match the schema or yields a run that could not run (bad K for a system, K above the batch
    size, unknown dataset, "auto" without a budget ...).
    """
    from cherry.spec import run_id

    from cherry.bench.fit_setting import FIT_AXES

    seen: dict[str, dict] = {}
    for _, spec in _expand(config, _phase_names(searched=False)):
        if spec.axis not in FIT_AXES:
            seen.setdefault(run_id(spec), spec.to_dict())
    for _ in _expand(config, _phase_names(searched=True)):  # a search's spec must be valid too: fail here, not in a job
        pass
    return list(seen.values())


def plan_searches(config: Mapping[str, Any]) -> dict[str, dict]:
    """``{search id: search}`` of every memory-wall search: ``spec`` (a run-spec dict whose batch size
    is the start), ``ratio_tolerance`` and ``seed_tolerance`` (`cherry.bench.capacity`). The id is the
    spec's run id (ConfigError as for `expand_experiments`)."""
    from cherry.bench.capacity import RATIO_TOLERANCE, SEED_TOLERANCE
    from cherry.spec import run_id

    searches: dict[str, dict] = {}
    for case, spec in _expand(config, _phase_names(searched=True)):
        searches.setdefault(run_id(spec), {"spec": spec.to_dict(),
                                           "ratio_tolerance": case.get("ratio_tolerance", RATIO_TOLERANCE),
                                           "seed_tolerance": case.get("seed_tolerance", SEED_TOLERANCE)})
    return searches


def plan_fits(config: Mapping[str, Any]) -> tuple[dict[str, dict], dict[str, dict]]:
    """``(fits, fitted)``: ``{fit id: fit}`` of every setting search (``spec``: the probe spec,
    ``knob``, ``ratio_tolerance``, ``seed_tolerance``) and ``{run id: {"spec", "fit"}}`` of every run
    that trains with one (its spec before the fit, and the id of its fit). One search serves every
    seed and repeat (ConfigError as for `expand_experiments`, or for fanouts that cannot be searched)."""
    from cherry.bench.capacity import RATIO_TOLERANCE, SEED_TOLERANCE
    from cherry.bench.fit_setting import FIT_AXES, check_knob, fit_search_spec
    from cherry.spec import run_id, spec_from_dict

    fits: dict[str, dict] = {}
    fitted: dict[str, dict] = {}
    for case, spec in _expand(config, _phase_names(searched=False)):
        if spec.axis not in FIT_AXES:
            continue
        knob = FIT_AXES[spec.axis]
        try:
            check_knob(knob, spec.fanouts)
        except ValueError as exc:
            raise ConfigError(f"invalid config: experiments/{spec.experiment}: {spec.system}: {exc}") from None
        probe = spec_from_dict(fit_search_spec(spec.to_dict(), case.get("fit_steps", 2)))
        fit_id = run_id(probe)
        fits.setdefault(fit_id, {"spec": probe.to_dict(), "knob": knob,
                                 "ratio_tolerance": case.get("ratio_tolerance", RATIO_TOLERANCE),
                                 "seed_tolerance": case.get("seed_tolerance", SEED_TOLERANCE)})
        fitted.setdefault(run_id(spec), {"spec": spec.to_dict(), "fit": fit_id})
    return fits, fitted


def plan_runs(config: Mapping[str, Any]) -> dict[str, dict]:
    """``{run id: spec dict}`` for every run of ``config``, in `expand_experiments` order."""
    from cherry.spec import run_id, spec_from_dict

    return {run_id(spec_from_dict(spec)): spec for spec in expand_experiments(config)}


def verify_checks(config: Mapping[str, Any]) -> dict[str, dict]:
    """``{check name: check}`` of the config's ``verify`` list (ConfigError on a repeated name)."""
    checks: dict[str, dict] = {}
    for check in config.get("verify") or ():
        if check["name"] in checks:
            raise ConfigError(f"invalid config: key verify: check name {check['name']!r} is used twice")
        checks[check["name"]] = dict(check)
    return checks


def verify_arguments(check: Mapping[str, Any], root: Optional[str] = None) -> list[str]:
    """The `cherry verify` arguments of one check: every spec key ``k`` is the option ``--k`` with
    dashes (the CLI accepts each spec key under that name), lists comma-separated; keys at the run
    schema's default (Snakemake's validation fills them in) are left out, so the command stays short."""
    from cherry.spec import schema_defaults

    defaults = schema_defaults()
    args = []
    for key, value in check.items():
        if key == "name" or value is None or (key in defaults and defaults[key] == value):
            continue
        text = ",".join(str(v) for v in value) if isinstance(value, (list, tuple)) else str(value)
        args.append(f"--{key.replace('_', '-')}={text}")  # "=": a value like -1,-1 is not an option
    if root is not None:
        args += ["--root", str(root)]
    return args


def needs_ordering(spec: Mapping[str, Any]) -> Optional[str]:
    """The seed ordering a run computes before training, or None: a run whose system has an
    ``ordering`` option (cherry's, `cherry.systems`) with K != 1 or several ranks."""
    ordering = (spec.get("options") or {}).get("ordering")
    if ordering is None or (spec["num_microbatches"] == 1 and spec.get("nproc", 1) == 1):
        return None
    return None if ordering == "none" else ordering


def datasets_used(config: Mapping[str, Any]) -> list[str]:
    """Every dataset the runs and checks of ``config`` read, sorted."""
    names = {spec["dataset"] for spec in expand_experiments(config)}
    names.update(run["spec"]["dataset"] for run in plan_fits(config)[1].values())
    names.update(search["spec"]["dataset"] for search in plan_searches(config).values())
    names.update(check["dataset"] for check in verify_checks(config).values())
    return sorted(names)


def check_datasets_available(config: Mapping[str, Any]) -> None:
    """Raise `ConfigError` (one line naming the dataset and the directory to populate) if a real
    dataset the config uses is not in its data root: before any job runs, not inside one."""
    from cherry.data.datasets import check_available
    from cherry.data.gnn_benchmark import check_file
    from cherry.data.ogb_dir import source_files
    from cherry.data.sources import dataset_kind

    root = (config.get("data") or {}).get("root")
    for name in datasets_used(config):
        try:
            kind = dataset_kind(name)
            if kind == "builtin":
                check_available(name, root)
            elif kind == "path":
                source_files(name)  # the directory and its OGB files exist
            elif kind == "npz":
                check_file(name)  # the file exists and holds gnn-benchmark's members
        except (FileNotFoundError, ValueError) as exc:
            raise ConfigError(f"invalid config: dataset {name}: {' '.join(str(exc).split())}") from None


def graphs_dir_of(config: Mapping[str, Any], base_dir: str) -> str:
    """Where the runs of ``config`` read bare ``NAME.npz`` datasets: its ``data.graphs`` (relative to
    ``base_dir``, the repository), else `cherry.data.gnn_benchmark.graphs_dir`."""
    import os

    from cherry.data.gnn_benchmark import graphs_dir

    graphs = (config.get("data") or {}).get("graphs") if isinstance(config, Mapping) else None
    return os.path.join(base_dir, graphs) if graphs else str(graphs_dir())
