"""The workflow's JSON schemas (``workflow/schemas/*.schema.yaml``), loaded once, and one way to
turn a schema violation into the one-line error every input of Cherry promises.

Schemas may refer to each other by file name (``$ref: run.schema.yaml#/...``); references resolve
inside ``workflow/schemas``. Validation is Cherry's own (`cherry.schema_validator`, the keywords these
schemas use, with jsonschema's messages): the ``jsonschema`` package is not needed at run time.

One rule holds for every schema, whatever its keys (`number_problem`): every number is finite and every
integer fits a signed 64-bit integer. JSON Schema bounds cannot say it (``minimum`` is false for NaN and
true for infinity), while Python's ``json`` and YAML read ``NaN``, ``Infinity``, ``.nan`` and ``.inf``;
so a key added to a schema later gets the rule without saying so.
"""
from __future__ import annotations

import functools
import math
from typing import Any

from cherry.paths import SCHEMA_DIR, schema_path
from cherry.schema_validator import Validator, Violation, best_match


def one_line(text: Any) -> str:
    """``text`` with every run of whitespace (newlines included) folded into one space."""
    return " ".join(str(text).split())


INT64_MAX = 2**63 - 1
_VALUE_CHARS = 60  # of a bad value echoed in a message (a 50 MB value must not make a 50 MB line)


def short_repr(value: Any, limit: int = _VALUE_CHARS) -> str:
    """``repr(value)`` cut to about ``limit`` characters, saying how many were left out."""
    if isinstance(value, int) and abs(value) >= 10**limit:  # str() of a huge int is slow, or refused
        return f"<an integer of about {int(value.bit_length() * 0.30103) + 1} digits>"
    text = repr(value)
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... ({len(text) - limit} more characters)"


def number_problem(data: Any) -> str | None:
    """The key path and value of the first number in ``data`` (nested dicts and lists) that is not
    finite, or an integer beyond a signed 64-bit one, as ``"<path>: <why>"``; None if there is none.

    Iterative, so a deeply nested input cannot overflow the stack here."""
    stack: list[tuple[tuple, Any]] = [((), data)]
    while stack:
        path, value = stack.pop()
        if isinstance(value, bool):
            continue
        if isinstance(value, float) and not math.isfinite(value):
            where = "/".join(map(str, path)) or "(top level)"
            return f"{where}: {value!r} is not a finite number (expected a finite number)"
        if isinstance(value, int) and not -INT64_MAX - 1 <= value <= INT64_MAX:
            where = "/".join(map(str, path)) or "(top level)"
            return f"{where}: {short_repr(value)} does not fit a 64-bit integer (expected at most {INT64_MAX})"
        if isinstance(value, dict):
            stack.extend(((*path, k), v) for k, v in reversed(list(value.items())))
        elif isinstance(value, (list, tuple)):
            stack.extend(((*path, i), v) for i, v in reversed(list(enumerate(value))))
    return None


@functools.lru_cache(maxsize=None)
def load_schema(name: str) -> dict:
    """The parsed schema ``workflow/schemas/<name>.schema.yaml``."""
    import yaml

    with open(schema_path(name), encoding="utf-8") as f:
        return yaml.safe_load(f)


def _retrieve(name: str) -> dict:
    """The schema a cross-file reference names (``run.schema.yaml``)."""
    return load_schema(name.removesuffix(".schema.yaml"))


@functools.lru_cache(maxsize=None)
def _validator(name: str) -> Validator:
    return Validator(load_schema(name), retrieve=_retrieve)


def schema_violations(data: Any, schema: dict) -> list[Violation]:
    """Every violation of ``schema`` by ``data`` (references resolve in ``workflow/schemas``), by
    `cherry.schema_validator`: no ``jsonschema`` package needed."""
    return Validator(schema, retrieve=_retrieve).violations(data)


def schema_problem(data: Any, name: str, what: str, schema: dict | None = None) -> str | None:
    """One line naming the most relevant violation of schema ``name`` by ``data`` (None if valid).

    ``what`` names the input in the message ("run spec", "config", "record"); the key path comes
    next, then the schema's message, then what was expected where the schema says it. ``schema``,
    if given, is used in place of the file's content (a schema completed at run time, such as the
    config schema's experiment keys); references still resolve in ``workflow/schemas``.
    """
    numbers = number_problem(data)
    if numbers is not None:
        return one_line(f"invalid {what}: key {numbers}")
    errors = (_validator(name) if schema is None else Validator(schema, retrieve=_retrieve)).violations(data)
    if not errors:
        return None
    best = best_match(errors)
    where = "/".join(str(p) for p in best.absolute_path) or "(top level)"
    message = best.message
    if len(message) > 4 * _VALUE_CHARS:  # the schema's message echoes the value, however long
        message = f"{message[:4 * _VALUE_CHARS]}... ({len(message) - 4 * _VALUE_CHARS} more characters)"
    if best.keyword == "additionalProperties":
        allowed = sorted(best.schema.get("properties", {}))
        message += f" (allowed keys: {', '.join(allowed)})"
    elif best.keyword in ("oneOf", "anyOf") and best.schema.get("description"):
        message += f" (expected: {best.schema['description']})"  # alone it says nothing useful
    return one_line(f"invalid {what}: key {where}: {message}")


def check_schema(data: Any, name: str, what: str, error: type[Exception] = ValueError) -> None:
    """Raise ``error`` with `schema_problem`'s line unless ``data`` matches schema ``name``."""
    problem = schema_problem(data, name, what)
    if problem is not None:
        raise error(problem)


def load_yaml_strict(path: str, what: str = "config") -> Any:
    """Parse the YAML file at ``path`` like ``yaml.safe_load``, but a mapping that repeats a key (which
    YAML loaders resolve silently, the last one winning) raises ValueError with one line naming the file,
    the key and its line."""
    import yaml

    class StrictLoader(yaml.SafeLoader):
        pass

    def mapping(loader, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            key = loader.construct_object(key_node, deep=deep)
            if key in seen:
                raise ValueError(f"{what} {str(path)!r} repeats the key {key!r} (line {key_node.start_mark.line + 1}): "
                                 "expected each key once")
            seen.add(key)
        return loader.construct_mapping(node, deep=deep)

    StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, mapping)
    with open(path, encoding="utf-8") as f:
        return yaml.load(f, Loader=StrictLoader)  # noqa: S506 - a SafeLoader subclass
