"""`RunSpec`: what one benchmark run does, loaded from JSON and validated before anything runs.

The JSON is checked against ``workflow/schemas/run.schema.yaml`` (``additionalProperties: false``),
then across fields (one fanout per layer, ``aggr`` only for sage, "auto" needs a budget ...). Every
failure is a `SpecError` whose message is one line naming the bad key and value. Defaults come from
the schema, so the schema is the single place that documents a key.

`spec_id` hashes everything but ``root`` (where the data lives does not change the experiment), so the
same experiment gets the same short id, and so the same file name, on every machine.
"""
from __future__ import annotations

import copy
import functools
import hashlib
import json
import os
from dataclasses import dataclass, fields
from pathlib import Path
from types import MappingProxyType
from typing import Any, Mapping, Optional, Union

from cherry.io import read_json

SCHEMA_PATH = Path(__file__).resolve().parents[2] / "workflow" / "schemas" / "run.schema.yaml"


class SpecError(ValueError):
    """A run spec that cannot run; the message is one line naming the bad key and value."""


@dataclass(frozen=True)
class RunSpec:
    """One run (see ``run.schema.yaml`` for every key's meaning and default).

    Invariants after construction through `spec_from_dict`: sizes are int bytes or None; ``fanouts``
    is a tuple with one entry per layer (except for the features-only ``mlp``); ``options`` is a
    read-only mapping; ``microbatches`` is an int >= 1 or the string ``"auto"``.
    """

    system: str
    dataset: str
    root: Optional[str]
    model: str
    aggr: Optional[str]
    layers: int
    hidden: int
    heads: int
    dropout: float
    fanouts: tuple[int, ...]
    batch_size: int
    microbatches: Union[int, str]
    budget: Optional[int]
    device_memory: Optional[int]
    device: str
    seed: int
    repeat: int
    steps: int
    warmup: int
    epochs: int
    evaluate: bool
    lr: float
    timeout_s: Optional[float]
    options: Mapping[str, Any]
    tag: str

    def to_dict(self) -> dict:
        """The spec as plain JSON-able values (``spec_from_dict(spec.to_dict()) == spec``)."""
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["fanouts"] = list(self.fanouts)
        out["options"] = copy.deepcopy(dict(self.options))
        return out

    @property
    def num_microbatches(self) -> Optional[int]:
        """The fixed K, or None when the system chooses it from the budget."""
        return None if self.microbatches == "auto" else int(self.microbatches)


@functools.lru_cache(maxsize=None)
def _schema(path: str = str(SCHEMA_PATH)) -> dict:
    import yaml

    with open(path, encoding="utf-8") as f:
        return yaml.safe_load(f)


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def _where(error) -> str:
    parts = [str(p) for p in error.absolute_path]
    return "/".join(parts) if parts else "(top level)"


def _schema_check(data: Any, schema: dict, what: str) -> None:
    import jsonschema

    validator = jsonschema.Draft202012Validator(schema)
    errors = list(validator.iter_errors(data))
    if not errors:
        return
    best = jsonschema.exceptions.best_match(errors)
    message = f"invalid {what}: key {_where(best)}: {best.message}"
    path = list(best.absolute_path)
    prop = schema.get("properties", {}).get(path[0], {}) if path else {}
    if "not valid under any" in best.message and prop.get("description"):
        message += f" (expected: {prop['description']})"  # a oneOf failure says nothing useful alone
    raise SpecError(_one_line(message))


def _size(key: str, value: Any) -> Optional[int]:
    from cherry.memory.sizes import parse_size

    if value is None:
        return None
    try:
        size = parse_size(value)
    except (TypeError, ValueError) as exc:
        raise SpecError(f"invalid run spec: key {key}: {_one_line(exc)}") from None
    if size <= 0:
        raise SpecError(f"invalid run spec: key {key}: {value!r} is not a positive size")
    return size


def spec_from_dict(data: Mapping[str, Any], known_systems: Optional[tuple[str, ...]] = None) -> RunSpec:
    """Validate ``data`` (a parsed JSON object) and return the `RunSpec`, defaults filled in.

    ``known_systems``: names accepted for ``system`` (default: `cherry.bench.systems.SYSTEM_NAMES`).
    """
    if not isinstance(data, Mapping):
        raise SpecError(f"invalid run spec: expected a JSON object, got {type(data).__name__}")
    schema = _schema()
    _schema_check(dict(data), schema, "run spec")
    if known_systems is None:
        from cherry.bench.systems import SYSTEM_NAMES as known_systems
    if data["system"] not in known_systems:
        raise SpecError(f"invalid run spec: key system: unknown system {data['system']!r}; "
                        f"known systems: {', '.join(known_systems)}")
    from cherry.data.registry import DATASET_NAMES

    if data["dataset"] not in DATASET_NAMES:
        raise SpecError(f"invalid run spec: key dataset: unknown dataset {data['dataset']!r}; "
                        f"known datasets: {', '.join(DATASET_NAMES)}")
    values = {name: copy.deepcopy(prop.get("default")) for name, prop in schema["properties"].items()}
    values.update(copy.deepcopy(dict(data)))
    values["fanouts"] = tuple(values["fanouts"])
    values["budget"] = _size("budget", values["budget"])
    values["device_memory"] = _size("device_memory", values["device_memory"])
    values["dropout"] = float(values["dropout"])
    values["lr"] = float(values["lr"])
    if values["timeout_s"] is not None:
        values["timeout_s"] = float(values["timeout_s"])
    values["options"] = MappingProxyType(values["options"])
    spec = RunSpec(**values)
    _cross_check(spec)
    return spec


def _cross_check(s: RunSpec) -> None:
    def fail(key: str, message: str) -> None:
        raise SpecError(f"invalid run spec: key {key}: {message}")

    if s.model != "mlp" and len(s.fanouts) != s.layers:
        fail("fanouts", f"{list(s.fanouts)} has {len(s.fanouts)} values for layers={s.layers}; give one per layer")
    if s.aggr is not None and s.model != "sage":
        fail("aggr", f"{s.aggr!r} is for model 'sage' only, got model {s.model!r}")
    if s.budget is not None and s.device_memory is not None and s.budget > s.device_memory:
        fail("budget", f"{s.budget} bytes exceeds device_memory {s.device_memory} bytes")
    if s.microbatches == "auto" and s.budget is None and s.device_memory is None and s.device == "cpu":
        fail("microbatches", "'auto' chooses K from a budget: set budget or device_memory (or run on cuda)")
    if isinstance(s.microbatches, int) and s.microbatches > s.batch_size:
        fail("microbatches", f"{s.microbatches} exceeds batch_size {s.batch_size}")


def load_spec(path: str | os.PathLike) -> RunSpec:
    """Read and validate the JSON run spec at ``path`` (`SpecError` on any problem)."""
    return spec_from_dict(read_json(path, "run spec", SpecError))


def spec_id(spec: RunSpec) -> str:
    """A stable 12-hex-digit hash of the experiment (every key but ``root``)."""
    if not isinstance(spec, RunSpec):
        raise TypeError(f"spec has type {type(spec).__name__}: expected a RunSpec")
    data = spec.to_dict()
    data.pop("root")
    text = json.dumps(data, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:12]
