"""The workflow's experiment matrix: a config (``config/*.yaml``) expanded into run specs.

`expand_experiments(config)` is the one place that turns the config into runs; the Snakefile and
the tests call it. Each run is a complete run-spec dict (``workflow/schemas/run.schema.yaml``, every
default filled in) whose ``tag`` names its experiment, so a record says which figure it belongs to;
its id is `cherry.bench.spec.spec_id`, the file name of its spec and record. Invariants: ids are
unique in the result (identical runs of one experiment collapse into one); the order is the config's
order; every spec passed `spec_from_dict`, so ``python -m cherry.bench.run`` accepts it.

Tags: the experiment name (``memory_wall``, ``microbatch_cost``, ``breakdown``, ``convergence``,
``ablation``), or ``sensitivity/<axis>`` for the axis a sensitivity run varies.
"""
from __future__ import annotations

import copy
import functools
from pathlib import Path
from typing import Any, Iterator, Mapping, Optional

SCHEMA_PATH = Path(__file__).resolve().parents[2] / "workflow" / "schemas" / "config.schema.yaml"
EXPERIMENTS = ("memory_wall", "microbatch_cost", "breakdown", "convergence", "sensitivity", "ablation")
SINGLE_K_SYSTEMS = frozenset({"full", "dgl", "pyg"})  # they train the whole batch at once
SENSITIVITY_AXES = ("aggr", "layers", "hidden", "fanout")


class ConfigError(ValueError):
    """A workflow config that cannot run; the message is one line naming the bad key and value."""


@functools.lru_cache(maxsize=None)
def _schema(path: str) -> dict:
    import yaml

    with open(path, encoding="utf-8") as f:
        return yaml.safe_load(f)


def _one_line(text: Any) -> str:
    return " ".join(str(text).split())


def describe_config_error(config: Any, schema_path: str | Path = SCHEMA_PATH) -> Optional[str]:
    """One line describing the most relevant schema violation of ``config``, or None if it is valid."""
    import jsonschema

    validator = jsonschema.Draft202012Validator(_schema(str(schema_path)))
    errors = list(validator.iter_errors(config))
    if not errors:
        return None
    best = jsonschema.exceptions.best_match(errors)
    where = "/".join(str(p) for p in best.absolute_path) or "(top level)"
    message = best.message
    if best.validator == "additionalProperties":
        allowed = sorted(best.schema.get("properties", {}))
        message += f" (allowed keys: {', '.join(allowed)})"
    elif best.validator == "oneOf" and best.schema.get("description"):
        message += f" (expected: {best.schema['description']})"
    return _one_line(f"invalid config: key {where}: {message}")


def validate_config(config: Any, schema_path: str | Path = SCHEMA_PATH) -> None:
    """Raise `ConfigError` (one line) unless ``config`` matches the workflow's config schema."""
    problem = describe_config_error(config, schema_path)
    if problem is not None:
        raise ConfigError(problem)


def _k_error(system: str, k: Any) -> Optional[str]:
    if system in SINGLE_K_SYSTEMS and k != 1:
        return f"system {system} trains the whole batch: K must be 1, got {k!r}"
    if k == "auto" and system != "cherry":
        return f"system {system} cannot choose K from a budget: give an integer K, got 'auto'"
    return None


def _system_ks(systems: Mapping[str, list]) -> Iterator[tuple[str, Any]]:
    for system, ks in systems.items():
        for k in ks:
            yield system, k


def _memory_wall(case: dict) -> Iterator[tuple[str, dict]]:
    for system, k in _system_ks(case["systems"]):
        for batch_size in case["batch_sizes"]:
            yield "memory_wall", {"system": system, "microbatches": k, "batch_size": batch_size,
                                  "device_memory": case["device_memory"]}


def _grid(name: str):
    def expand(case: dict) -> Iterator[tuple[str, dict]]:
        for system, k in _system_ks(case["systems"]):
            yield name, {"system": system, "microbatches": k}
    return expand


def _sensitivity(case: dict, base: dict) -> Iterator[tuple[str, dict]]:
    layer_fanouts = case.get("layer_fanouts") or base.get("fanouts") or [10, 25]
    layers = base.get("layers", 2)
    for axis in SENSITIVITY_AXES:
        for value in case["vary"].get(axis, ()):
            if axis == "aggr":
                change = {"model": "gat", "aggr": None} if value == "gat" else {"model": "sage", "aggr": value}
            elif axis == "layers":
                if value > len(layer_fanouts):
                    raise ConfigError(f"layers {value} needs {value} fanouts, but layer_fanouts is {layer_fanouts}")
                change = {"layers": value, "fanouts": list(layer_fanouts[:value])}
            elif axis == "hidden":
                change = {"hidden": value}
            else:
                change = {"fanouts": [value] * layers}
            for system, k in _system_ks(case["systems"]):
                yield f"sensitivity/{axis}", {**change, "system": system, "microbatches": k}


def _ablation(case: dict) -> Iterator[tuple[str, dict]]:
    for k in case["microbatches"]:
        for options in [{}] + [dict(v) for v in case["variants"]]:
            yield "ablation", {"system": "cherry", "microbatches": k, "options": options}


def _case_runs(experiment: str, case: dict, base: dict) -> Iterator[tuple[str, dict]]:
    if experiment == "memory_wall":
        return _memory_wall(case)
    if experiment == "sensitivity":
        return _sensitivity(case, base)
    if experiment == "ablation":
        return _ablation(case)
    return _grid(experiment)(case)


def _build_spec(fields: dict, where: str, root: Optional[str]):
    from cherry.bench.spec import SpecError, spec_from_dict

    problem = _k_error(fields["system"], fields["microbatches"])
    if problem:
        raise ConfigError(f"invalid config: {where}: {problem}")
    if root is not None:
        fields = {**fields, "root": root}
    try:
        return spec_from_dict(fields)
    except SpecError as exc:
        raise ConfigError(f"invalid config: {where}: {_one_line(exc).replace('invalid run spec: ', '')}") from None


def expand_experiments(config: Mapping[str, Any]) -> list[dict]:
    """Every run of ``config`` as a complete run-spec dict (see the module docstring).

    Raises `ConfigError` (one line naming the experiment, case and problem) for a config that does
    not match the schema or yields a run that could not run (bad K for a system, K above the batch
    size, unknown dataset, "auto" without a budget ...).
    """
    from cherry.bench.spec import spec_id

    if not isinstance(config, Mapping):
        raise TypeError(f"config has type {type(config).__name__}: expected a mapping")
    config = copy.deepcopy(dict(config))
    validate_config(config)
    root = (config.get("data") or {}).get("root")
    defaults = dict(config.get("run") or {})
    seen: dict[str, dict] = {}
    for experiment in EXPERIMENTS:
        for index, case in enumerate(config["experiments"].get(experiment) or ()):
            base = {**defaults, **(case.get("run") or {})}
            repeats = case.get("repeats", config.get("repeats", 1))
            seeds = case.get("seeds") or [base.get("seed", 0)]
            for tag, fields in _case_runs(experiment, case, base):
                for seed in seeds:
                    for repeat in range(repeats):
                        merged = {**base, **fields, "dataset": case["dataset"], "tag": tag, "seed": seed,
                                  "repeat": repeat}
                        spec = _build_spec(merged, f"experiments/{experiment}/{index}", root)
                        seen.setdefault(spec_id(spec), spec.to_dict())
    return list(seen.values())


def plan_runs(config: Mapping[str, Any]) -> dict[str, dict]:
    """``{run id: spec dict}`` for every run of ``config``, in `expand_experiments` order."""
    from cherry.bench.spec import spec_from_dict, spec_id

    return {spec_id(spec_from_dict(spec)): spec for spec in expand_experiments(config)}


def verify_checks(config: Mapping[str, Any]) -> dict[str, dict]:
    """``{check name: check}`` of the config's ``verify`` list (ConfigError on a repeated name)."""
    checks: dict[str, dict] = {}
    for check in config.get("verify") or ():
        if check["name"] in checks:
            raise ConfigError(f"invalid config: key verify: check name {check['name']!r} is used twice")
        checks[check["name"]] = dict(check)
    return checks


def verify_arguments(check: Mapping[str, Any], root: Optional[str] = None) -> list[str]:
    """The `cherry verify` arguments of one check (its keys map to the command's options)."""
    args = ["--dataset", check["dataset"], "--microbatches", str(check["microbatches"])]
    for key in ("model", "aggr", "layers", "hidden", "batch_size", "device", "seed", "tolerance"):
        if check.get(key) is not None:
            args += [f"--{key.replace('_', '-')}", str(check[key])]
    if check.get("fanouts"):
        args += ["--fanouts", ",".join(str(f) for f in check["fanouts"])]
    if root is not None:
        args += ["--root", str(root)]
    return args


def needs_ordering(spec: Mapping[str, Any]) -> Optional[str]:
    """The seed ordering a run computes before training (cherry with K != 1), or None."""
    if spec["system"] != "cherry" or spec["microbatches"] == 1:
        return None
    ordering = (spec.get("options") or {}).get("ordering", "metis")
    return None if ordering == "none" else ordering


def datasets_used(config: Mapping[str, Any]) -> list[str]:
    """Every dataset the runs and checks of ``config`` read, sorted."""
    names = {spec["dataset"] for spec in expand_experiments(config)}
    names.update(check["dataset"] for check in verify_checks(config).values())
    return sorted(names)
