"""The workflow's JSON schemas (``workflow/schemas/*.schema.yaml``), loaded once, and one way to
turn a schema violation into the one-line error every input of Cherry promises.

Schemas may refer to each other by file name (``$ref: run.schema.yaml#/...``); references resolve
inside ``workflow/schemas``.
"""
from __future__ import annotations

import functools
from typing import Any

from cherry.paths import SCHEMA_DIR, schema_path


def one_line(text: Any) -> str:
    """``text`` with every run of whitespace (newlines included) folded into one space."""
    return " ".join(str(text).split())


@functools.lru_cache(maxsize=None)
def load_schema(name: str) -> dict:
    """The parsed schema ``workflow/schemas/<name>.schema.yaml``."""
    import yaml

    with open(schema_path(name), encoding="utf-8") as f:
        return yaml.safe_load(f)


@functools.lru_cache(maxsize=None)
def _registry():
    from referencing import Registry, Resource
    from referencing.jsonschema import DRAFT202012

    def retrieve(uri: str) -> Resource:
        return Resource.from_contents(load_schema(uri.removesuffix(".schema.yaml")), DRAFT202012)

    return Registry(retrieve=retrieve)


@functools.lru_cache(maxsize=None)
def _validator(name: str):
    import jsonschema

    return jsonschema.Draft202012Validator(load_schema(name), registry=_registry())


def schema_problem(data: Any, name: str, what: str, schema: dict | None = None) -> str | None:
    """One line naming the most relevant violation of schema ``name`` by ``data`` (None if valid).

    ``what`` names the input in the message ("run spec", "config", "record"); the key path comes
    next, then the schema's message, then what was expected where the schema says it. ``schema``,
    if given, is used in place of the file's content (a schema completed at run time, such as the
    config schema's experiment keys); references still resolve in ``workflow/schemas``.
    """
    import jsonschema

    if schema is None:
        validator = _validator(name)
    else:
        validator = jsonschema.Draft202012Validator(schema, registry=_registry())
    errors = list(validator.iter_errors(data))
    if not errors:
        return None
    best = jsonschema.exceptions.best_match(errors)
    where = "/".join(str(p) for p in best.absolute_path) or "(top level)"
    message = best.message
    if best.validator == "additionalProperties":
        allowed = sorted(best.schema.get("properties", {}))
        message += f" (allowed keys: {', '.join(allowed)})"
    elif best.validator in ("oneOf", "anyOf") and best.schema.get("description"):
        message += f" (expected: {best.schema['description']})"  # alone it says nothing useful
    return one_line(f"invalid {what}: key {where}: {message}")


def check_schema(data: Any, name: str, what: str, error: type[Exception] = ValueError) -> None:
    """Raise ``error`` with `schema_problem`'s line unless ``data`` matches schema ``name``."""
    problem = schema_problem(data, name, what)
    if problem is not None:
        raise error(problem)
