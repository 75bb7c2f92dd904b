"""`RunSpec`: the one description of a run, built by one function from a dict, CLI options or Python.

`cherry train`, `cherry verify`, the benchmark runner, the workflow and every system receive a
`RunSpec`. It is validated against ``workflow/schemas/run.schema.yaml`` (whose defaults are the only
defaults), then across fields; every failure is a `SpecError` whose message is one line naming the
bad key and value. The same names are used in every layer; sizes are bytes in Python
(``budget_bytes``, ``device_memory_bytes``) and may be size strings ("512MiB") only at the edges
(JSON, YAML, CLI).

    spec = make_spec(system="cherry", dataset="synth-arxiv", aggr="lstm", budget_bytes="1GiB")
    spec.num_microbatches        # None: "auto", the smallest K under the budget
    resolve_budget_bytes(spec)   # the budget every engine uses (the one rule, see below)

`run_id` names a run readably (experiment, system, dataset, batch, K, repeat) plus a short hash of
everything else but ``root``, so the same experiment gets the same file name on every machine.
"""
from __future__ import annotations

import copy
import hashlib
import json
import os
from dataclasses import dataclass, fields
from types import MappingProxyType
from typing import Any, Mapping, Optional

from cherry.io import read_json
from cherry.schema_validator import best_match
from cherry.schemas import check_schema, load_schema, one_line, schema_violations, short_repr

# Of the device's capacity, kept out of the budget for what the memory model does not price
# (allocator slack and fragmentation, the CUDA context, the framework's workspaces).
BUDGET_RESERVE_FRACTION = 0.1


class SpecError(ValueError):
    """A run spec that cannot run; the message is one line naming the bad key and value."""


@dataclass(frozen=True)
class RunSpec:
    """One run (see ``run.schema.yaml`` for every key's meaning and default).

    Invariants after `spec_from_dict`: sizes are int bytes or None; ``fanouts`` is a tuple with one
    entry per layer (the features-only ``mlp`` ignores it); ``num_microbatches`` is an int >= 1 or
    None ("auto"), 1 for a whole-batch system; ``options`` is a read-only mapping with every option
    of the system, defaults filled in.
    """

    system: str
    dataset: str
    root: Optional[str]
    model: str
    aggr: Optional[str]
    lstm_impl: str
    num_layers: int
    hidden: int
    heads: int
    dropout: float
    fanouts: tuple[int, ...]
    batch_size: int
    num_microbatches: Optional[int]
    budget_bytes: Optional[int]
    device_memory_bytes: Optional[int]
    device: str
    nproc: int
    seed: int
    repeat: int
    steps: int
    warmup: int
    epochs: int
    max_steps_per_epoch: Optional[int]
    evaluate: bool
    lr: float
    optimizer: str
    weight_decay: float
    momentum: float
    input_dropout: float
    timeout_s: Optional[float]
    options: Mapping[str, Any]
    experiment: str
    axis: Optional[str]

    def to_dict(self) -> dict:
        """The spec as plain JSON-able values (``spec_from_dict(spec.to_dict()) == spec``)."""
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["fanouts"] = list(self.fanouts)
        out["options"] = copy.deepcopy(dict(self.options))
        out["num_microbatches"] = "auto" if self.num_microbatches is None else self.num_microbatches
        return out

    def replace(self, **changes: Any) -> "RunSpec":
        """A copy with ``changes``, validated again like any spec."""
        data = self.to_dict()
        data.update(changes)
        return spec_from_dict(data)

    def model_spec(self, dataset):
        """The `cherry.models.ModelSpec` this run trains on ``dataset`` (its widths and classes)."""
        from cherry.models import ModelSpec

        return ModelSpec(self.model, dataset.feature_dim, self.hidden, dataset.num_classes, self.num_layers,
                         aggr=self.aggr, heads=self.heads, dropout=self.dropout, lstm_impl=self.lstm_impl,
                         input_dropout=self.input_dropout)

    @property
    def ordering(self) -> str:
        """Cherry's seed ordering ("none" for systems without one)."""
        return self.options.get("ordering", "none")


def schema_defaults() -> dict[str, Any]:
    """Every run-spec key's default, from the run schema (the only defaults)."""
    return _defaults()


def _defaults() -> dict[str, Any]:
    schema = load_schema("run")
    props = {**schema["$defs"]["settings"]["properties"], **schema["properties"]}
    return {name: copy.deepcopy(prop.get("default")) for name, prop in props.items()}


def _integer_keys() -> tuple[str, ...]:
    schema = load_schema("run")
    props = {**schema["$defs"]["settings"]["properties"], **schema["properties"]}
    return tuple(k for k, p in props.items() if "integer" in (p.get("type") if isinstance(p.get("type"), list)
                                                              else [p.get("type")]))


def _size(key: str, value: Any) -> Optional[int]:
    from cherry.memory.sizes import parse_size

    if value is None:
        return None
    try:
        size = parse_size(value)
    except (TypeError, ValueError) as exc:
        raise SpecError(f"invalid run spec: key {key}: {one_line(exc)}") from None
    if size <= 0:
        raise SpecError(f"invalid run spec: key {key}: {value!r} is not a positive size")
    return size


def _jsonable_input(data: Mapping[str, Any]) -> dict:
    """Python values a caller may pass (tuples, paths, None for "auto") as their JSON form."""
    out = copy.deepcopy(dict(data))
    if isinstance(out.get("root"), os.PathLike):
        out["root"] = os.fspath(out["root"])
    if isinstance(out.get("fanouts"), tuple):
        out["fanouts"] = list(out["fanouts"])
    if "num_microbatches" in out and out["num_microbatches"] is None:
        out["num_microbatches"] = "auto"
    if isinstance(out.get("options"), Mapping):
        out["options"] = dict(out["options"])
    return out


def spec_from_dict(data: Mapping[str, Any]) -> RunSpec:
    """Validate ``data`` (a parsed JSON object, or keyword values) and return the `RunSpec`."""
    from cherry.systems.table import system_entry, system_names

    if not isinstance(data, Mapping):
        raise SpecError(f"invalid run spec: expected a JSON object, got {type(data).__name__}")
    data = _jsonable_input(data)
    check_schema(data, "run", "run spec", SpecError)
    for key in _integer_keys() + ("num_microbatches",):  # JSON Schema calls 16.0 an integer
        if isinstance(data.get(key), float):
            raise SpecError(f"invalid run spec: key {key}: {data[key]!r} is not an integer")
    for i, fanout in enumerate(data.get("fanouts") or ()):
        if isinstance(fanout, float):
            raise SpecError(f"invalid run spec: key fanouts/{i}: {fanout!r} is not an integer")
    if data["system"] not in system_names():
        raise SpecError(f"invalid run spec: key system: unknown system {data['system']!r}; "
                        f"known systems: {', '.join(system_names())}")
    from cherry.data.sources import dataset_kind

    try:  # a built-in or registered name, or a directory in OGB's layout (cherry.data.sources)
        dataset_kind(data["dataset"])
    except ValueError as exc:
        raise SpecError(f"invalid run spec: key dataset: {one_line(exc)}") from None
    entry = system_entry(data["system"])
    options = data.get("options") or {}
    _check_options(entry, options)
    values = _defaults()
    values.update(data)
    values["options"] = MappingProxyType({**entry.option_defaults, **copy.deepcopy(options)})
    values["fanouts"] = tuple(values["fanouts"])
    values["budget_bytes"] = _size("budget_bytes", values["budget_bytes"])
    values["device_memory_bytes"] = _size("device_memory_bytes", values["device_memory_bytes"])
    values["num_microbatches"] = None if values["num_microbatches"] == "auto" else values["num_microbatches"]
    values["dropout"] = float(values["dropout"])
    for key in ("lr", "weight_decay", "momentum", "input_dropout"):
        values[key] = float(values[key])
    if values["timeout_s"] is not None:
        values["timeout_s"] = float(values["timeout_s"])
    if entry.whole_batch and values["num_microbatches"] is None:
        values["num_microbatches"] = 1  # "auto" for a system that never splits
    spec = RunSpec(**values)
    _cross_check(spec, entry)
    return spec


def _check_options(entry, options: Mapping[str, Any]) -> None:
    errors = schema_violations(dict(options), entry.options_schema())
    if errors:
        best = best_match(errors)
        where = "/".join(["options", *map(str, best.absolute_path)])
        allowed = ", ".join(entry.options) or "none"
        raise SpecError(one_line(f"invalid run spec: key {where}: {best.message} "
                            f"(options of {entry.name}: {allowed})"))


def _cross_check(s: RunSpec, entry) -> None:
    def fail(key: str, message: str) -> None:
        raise SpecError(f"invalid run spec: key {key}: {message}")

    if s.model != "mlp" and len(s.fanouts) != s.num_layers:
        fail("fanouts", f"{list(s.fanouts)} has {len(s.fanouts)} values for num_layers={s.num_layers}; "
                        "give one per layer")
    from cherry.models.registry import known_models

    if s.model not in known_models():
        fail("model", f"unknown model {short_repr(s.model)}; expected one of {', '.join(known_models())} "
                      "(or register yours with cherry.models.register_model)")
    if s.aggr is not None and s.model != "sage":
        fail("aggr", f"{s.aggr!r} is for model 'sage' only, got model {s.model!r}")
    if s.budget_bytes is not None and s.device_memory_bytes is not None and s.budget_bytes > s.device_memory_bytes:
        fail("budget_bytes", f"{s.budget_bytes} bytes exceeds device_memory_bytes {s.device_memory_bytes} bytes")
    if entry.whole_batch and s.num_microbatches != 1:
        fail("num_microbatches", f"system {s.system} trains the whole batch: K must be 1 or 'auto', "
                                 f"got {s.num_microbatches}")
    if s.nproc > 1 and s.system != "cherry":
        fail("nproc", f"data-parallel ranks are for system cherry only, got nproc={s.nproc} for {s.system}")
    if s.nproc > s.batch_size:
        fail("nproc", f"{s.nproc} ranks exceed batch_size {s.batch_size}: every rank needs a seed")
    if s.num_microbatches is not None and s.num_microbatches > s.batch_size:
        fail("num_microbatches", f"{s.num_microbatches} exceeds batch_size {s.batch_size}")


def make_spec(**fields_: Any) -> RunSpec:
    """The Python API's way to a spec: keyword values as in the JSON spec (sizes may be ints or
    strings, ``fanouts`` a tuple, ``num_microbatches=None`` for "auto"); ``system`` defaults to cherry."""
    fields_.setdefault("system", "cherry")
    return spec_from_dict(fields_)


def load_spec(path: str | os.PathLike) -> RunSpec:
    """Read and validate the JSON run spec at ``path`` (`SpecError` on any problem)."""
    return spec_from_dict(read_json(path, "run spec", SpecError))


def resolve_budget_bytes(spec: RunSpec) -> Optional[int]:
    """The memory budget of a run, by the one rule every engine uses.

    ``budget_bytes`` when given; else the capacity (``device_memory_bytes``, or on a GPU the device's
    total memory) less `BUDGET_RESERVE_FRACTION`; else None (a CPU without an emulated capacity:
    nothing to fit, so "auto" means K = 1).
    """
    if spec.budget_bytes is not None:
        return spec.budget_bytes
    capacity = spec.device_memory_bytes
    if capacity is None and spec.device == "cuda":
        import torch

        if torch.cuda.is_available():
            capacity = int(torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory)
    if capacity is None:
        return None
    return max(capacity - int(capacity * BUDGET_RESERVE_FRACTION), 1)


# keys added after runs were first named (see `run_id`)
_LATER_KEYS = ("optimizer", "weight_decay", "momentum", "input_dropout")


def _slug(text: str) -> str:
    return "".join(c if c.isalnum() or c in "._-" else "_" for c in text)


def run_id(spec: RunSpec) -> str:
    """A readable, unique, stable name: ``<experiment>[.<axis>]-<system>-<dataset>-b<batch>[-n<ranks>]-k<K>-r<repeat>-<hash>``.

    The six-digit hash covers every key but ``root`` (where the data lives does not change the run),
    so two runs differing in anything else (a model, an option, a seed) get different names.
    """
    if not isinstance(spec, RunSpec):
        raise TypeError(f"spec has type {type(spec).__name__}: expected a RunSpec")
    data = spec.to_dict()
    data.pop("root")
    if data["nproc"] == 1:  # added after runs were named: a one-process run keeps its old name
        data.pop("nproc")
    defaults = _defaults()
    for key in _LATER_KEYS:  # likewise: at their defaults they leave earlier runs' names unchanged
        if data[key] == defaults[key]:
            data.pop(key)
    digest = hashlib.sha256(json.dumps(data, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:6]
    experiment = spec.experiment or "run"
    if spec.axis:
        experiment += f".{spec.axis}"
    k = "auto" if spec.num_microbatches is None else spec.num_microbatches
    ranks = f"-n{spec.nproc}" if spec.nproc > 1 else ""
    return (f"{experiment}-{spec.system}-{_slug(spec.dataset)}-b{spec.batch_size}{ranks}-k{k}-r{spec.repeat}-{digest}")


__all__ = ["BUDGET_RESERVE_FRACTION", "RunSpec", "SpecError", "load_spec", "make_spec", "resolve_budget_bytes",
           "run_id", "spec_from_dict"]
