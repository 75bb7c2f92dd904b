"""The run-spec options every command shares, and the one way from parsed options to a `RunSpec`.

Each spec setting ``key`` is an option ``--key`` with dashes (``--num-layers``, ``--budget-bytes``),
and the common ones also go by a short human name (``--layers``, ``--microbatches K|auto``,
``--budget 800MiB``, ``--device-memory 2GiB``). Options left out take the run schema's defaults
(argparse defaults are never used for spec keys, so ``cherry train``, a run spec and the Python API
built with the same settings give equal specs). A bad value is reported by `spec_from_args` as one
line naming the option and what was expected, before any work runs.
"""
from __future__ import annotations

import argparse
import math
import re
from typing import Any, Mapping, Optional

from cherry.spec import RunSpec, SpecError, spec_from_dict

# Everything about a spec key's option comes from the run schema (its description, default and
# type); only these short names are added here, beside ``--key-with-dashes``.
_ALIASES = {"num_layers": "--layers", "num_microbatches": "--microbatches", "budget_bytes": "--budget",
            "device_memory_bytes": "--device-memory", "max_steps_per_epoch": "--max-steps"}
_NOT_OPTIONS = ("system", "repeat", "experiment", "axis", "options")  # identity, bookkeeping, system switches
_NULL_WORDS = ("", "none", "null", "None")
_FANOUTS = re.compile(r"^-?\d+(,-?\d+)*$")


def _schema() -> dict:
    from cherry.schemas import load_schema

    return load_schema("run")


def _resolve(prop: dict, defs: dict) -> dict:
    """``prop`` with a top-level ``$ref`` into ``$defs`` merged in (the property's own keys win)."""
    ref = prop.get("$ref", "")
    if ref.startswith("#/$defs/"):
        return {**defs[ref.removeprefix("#/$defs/")], **{k: v for k, v in prop.items() if k != "$ref"}}
    return prop


def spec_properties() -> dict[str, dict]:
    """``{key: schema property}`` of every run-spec key that is a command-line option, in schema order."""
    schema = _schema()
    defs = schema["$defs"]
    props = {**schema["properties"], **defs["settings"]["properties"]}
    return {k: _resolve(p, defs) for k, p in props.items() if k not in _NOT_OPTIONS}


def _types(prop: dict) -> set:
    """The JSON types a property allows at its top level (``oneOf`` branches included), plus
    "null" where it allows null and "enum" where it lists values."""
    kinds = prop.get("type", [])
    out = set(kinds if isinstance(kinds, list) else [kinds])
    if "enum" in prop:
        out.add("enum")
        if None in prop["enum"]:
            out.add("null")
    for branch in prop.get("oneOf", []) + prop.get("anyOf", []):
        if branch.get("type") == "null":
            out.add("null")
        if "const" in branch:
            out.add("const")
    return out


def _kind(prop: dict) -> str:
    """How a command-line string becomes the key's JSON value: integer, number, boolean, integers (a
    comma-separated list), choice-or-integer ("auto" or K), or text (the spec parses it, e.g. sizes)."""
    types = _types(prop)
    if "array" in types:
        return "integers"
    for kind in ("integer", "number", "boolean"):
        if kind in types:
            return kind
    if "const" in types and any(b.get("type") == "integer" for b in prop.get("oneOf", [])):
        return "choice-or-integer"
    return "text"


def _metavar(key: str, prop: dict) -> str:
    kind = _kind(prop)
    if "enum" in prop:
        return "|".join(str(v) for v in prop["enum"] if v is not None)
    if kind == "choice-or-integer":
        return "K|" + "|".join(b["const"] for b in prop["oneOf"] if "const" in b)
    if "oneOf" in prop and kind == "text":
        return "SIZE"
    return {"integers": "F,F", "integer": "N", "number": "X", "boolean": "true|false"}.get(kind, key.upper())


def _help(prop: dict, default: Any = None, here: bool = False) -> str:
    """The property's description and its default, as argparse help (``%`` escaped)."""
    text = prop.get("description") or ""
    if default is not None:
        text += f" (default{' here' if here else ''}: {_text(default)})"
    return text.replace("%", "%%")


class OneLineParser(argparse.ArgumentParser):
    """An argument error is one line (``cherry: error: ...``, exit 2), without the usage block."""

    def error(self, message: str):  # noqa: D102 - argparse's hook
        self.exit(2, f"cherry: error: {message} (see `{self.prog} --help`)\n")


def add_spec_options(p: argparse.ArgumentParser, keys: Optional[tuple[str, ...]] = None,
                     defaults: Optional[Mapping[str, Any]] = None) -> None:
    """Add the options of spec ``keys`` (default: all of them) to ``p``, their help generated from
    the run schema.

    ``defaults`` are a command's own settings where it differs from the run schema (a benchmark's
    sizes, say); they are shown in the help and applied by `spec_from_args` unless given.
    """
    defaults = dict(defaults or {})
    props = spec_properties()
    for key in keys or tuple(props):
        prop = props[key]
        names = [n for n in (_ALIASES.get(key), "--" + key.replace("_", "-")) if n]
        here = key in defaults
        text = _help(prop, defaults[key] if here else prop.get("default"), here)
        p.add_argument(*names, dest=key, metavar=_metavar(key, prop), default=argparse.SUPPRESS, help=text,
                       required=key == "dataset" and "dataset" not in defaults)
    p.set_defaults(_spec_defaults=defaults)


def add_spec_arguments(p: argparse.ArgumentParser, keys: tuple[str, ...],
                       defaults: Optional[Mapping[str, Any]] = None) -> None:
    """Add spec ``keys`` to ``p`` as typed options with defaults (for commands such as `cherry bench`
    that read ``args.<key>`` directly rather than building a `RunSpec`): the value is the key's JSON
    value (a list as a tuple), checked against the run schema; the default is the command's own
    (``defaults``) where it differs, else the schema's."""
    defaults = dict(defaults or {})
    props = spec_properties()
    for key in keys:
        prop = props[key]
        here = key in defaults
        default = defaults[key] if here else prop.get("default")
        if isinstance(default, list):
            default = tuple(default)
        p.add_argument(*[n for n in (_ALIASES.get(key), "--" + key.replace("_", "-")) if n], dest=key,
                       metavar=_metavar(key, prop), type=_typed(key, prop), default=default,
                       help=_help(prop, default, here))


def _typed(key: str, prop: dict):
    """An argparse type: `_convert`, then the key's schema (one message naming what was expected)."""
    from cherry.schemas import load_schema, schema_violations

    schema = {**prop, "$defs": load_schema("run")["$defs"]}

    def convert(text: str):
        try:
            value = _convert(key, text)
        except SpecError as exc:
            raise argparse.ArgumentTypeError(str(exc).removeprefix(f"key {key}: ")) from None
        errors = schema_violations(value, schema)
        if errors:
            raise argparse.ArgumentTypeError(f"{text!r} is not {prop.get('description') or 'valid'}")
        return tuple(value) if isinstance(value, list) else value

    convert.__name__ = key  # argparse names the type in its messages
    return convert


def add_ordering_option(p: argparse.ArgumentParser) -> None:
    """``--ordering``: cherry's seed ordering option (``options.ordering`` of the spec)."""
    from cherry.planning.ordering import ORDERINGS

    p.add_argument("--ordering", dest="ordering", choices=ORDERINGS, default=argparse.SUPPRESS,
                   help="seed ordering for locality (default: the cherry system's option)")


def add_feature_cache_option(p: argparse.ArgumentParser) -> None:
    """``--feature-cache``: cherry's feature residency option (``options.feature_cache`` of the spec)."""
    from cherry.planning.residency import RESIDENCY_MODES

    p.add_argument("--feature-cache", dest="feature_cache", choices=RESIDENCY_MODES, default=argparse.SUPPRESS,
                   help="input features on the device (options.feature_cache): auto (a cache of the hottest rows "
                        "sized with K, all rows when they fit), none, all (default: the cherry system's option)")


def add_cherry_option(p: argparse.ArgumentParser, key: str) -> None:
    """``--<key>``: one of cherry's ``options.*`` keys, its choices, help and default from the systems
    table's schema of the option (the one place it is declared)."""
    from cherry.systems.table import system_entry

    schema = system_entry("cherry").options[key]
    choices = schema.get("enum")
    p.add_argument("--" + key.replace("_", "-"), dest=key, choices=choices, default=argparse.SUPPRESS,
                   help=f"{schema.get('description', key)} (options.{key}; default: {schema.get('default')})")


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    return ",".join(map(str, value)) if isinstance(value, (list, tuple)) else str(value)


def _flag(parser_actions, key: str) -> str:
    for action in parser_actions:
        if action.dest == key and action.option_strings:
            return action.option_strings[0]
    return key


def _convert(key: str, text: Any) -> Any:
    """A command-line string as the spec's JSON value, by the key's kind in the run schema (the spec
    then checks ranges and kinds)."""
    if not isinstance(text, str):
        return text
    prop = spec_properties()[key]
    if "null" in _types(prop) and text in _NULL_WORDS:
        return None
    kind = _kind(prop)
    if kind == "integer":
        try:
            return int(text)
        except ValueError:
            raise SpecError(f"key {key}: expected an integer, got {text!r}") from None
    if kind == "number":
        try:
            value = float(text)
        except ValueError:
            raise SpecError(f"key {key}: expected a number, got {text!r}") from None
        if not math.isfinite(value):  # "1e400" reads as inf: name the text as typed
            raise SpecError(f"key {key}: {text!r} is not a finite number (expected a finite number)")
        return value
    if kind == "integers":
        if not _FANOUTS.match(text.strip()):
            raise SpecError(f"key {key}: expected comma-separated integers like 10,25 (-1 = all), got {text!r}")
        return [int(v) for v in text.split(",")]
    if kind == "choice-or-integer":
        choices = [b["const"] for b in prop["oneOf"] if "const" in b]
        if text in choices:
            return text
        try:
            return int(text)
        except ValueError:
            words = " or ".join(repr(c) for c in choices)
            raise SpecError(f"key {key}: expected {words} or a positive integer, got {text!r}") from None
    if kind == "boolean":
        if text.lower() in ("true", "1", "yes"):
            return True
        if text.lower() in ("false", "0", "no"):
            return False
        raise SpecError(f"key {key}: expected true or false, got {text!r}")
    return text


_CHERRY_FLAGS = ("ordering", "feature_cache", "recompute", "stream_inputs", "exactness_check")


def spec_from_args(args: argparse.Namespace, parser: Optional[argparse.ArgumentParser] = None,
                   **fixed: Any) -> RunSpec:
    """The `RunSpec` of parsed options: given options over the command's ``defaults`` over the run
    schema's; ``fixed`` values (e.g. ``system="cherry"``) win. A bad value raises ValueError whose one
    line names the option (as typed on the command line) and what was expected."""
    given = vars(args)
    data: dict[str, Any] = {"system": "cherry"}
    data.update(given.get("_spec_defaults") or {})
    actions = parser._actions if parser is not None else []
    try:
        for key in spec_properties():
            if key in given:
                data[key] = _convert(key, given[key])
        for option in _CHERRY_FLAGS:  # cherry's options with their own flags
            if option in given:
                data["options"] = {**data.get("options", {}), option: given[option]}
        data.update(fixed)
        return spec_from_dict(data)
    except SpecError as exc:
        message = str(exc).replace("invalid run spec: ", "")
        match = re.match(r"key ([a-z_]+)", message)
        if match:
            key = match.group(1)
            flag = _option_flag(message, actions) if key == "options" else _flag(actions, key)
            message = flag + message[match.end():]
        raise ValueError(message) from None


def _option_flag(message: str, actions) -> str:
    """The flag of the ``options.*`` key an error message names (``--ordering`` when it names none)."""
    for option in _CHERRY_FLAGS:
        if f"options.{option}" in message or f"'{option}'" in message:
            return _flag(actions, option)
    return "--ordering"


def join_negative_values(argv: list[str]) -> list[str]:
    """``--fanouts -1,-1`` as ``--fanouts=-1,-1``: argparse would read a value that starts with a dash
    (and is not a plain negative number) as an option."""
    out: list[str] = []
    i = 0
    while i < len(argv):
        a = argv[i]
        if a.startswith("--") and "=" not in a and i + 1 < len(argv) and argv[i + 1].startswith("-") \
                and _FANOUTS.match(argv[i + 1]):
            out.append(f"{a}={argv[i + 1]}")
            i += 2
            continue
        out.append(a)
        i += 1
    return out


# argparse types of the benchmarks' own options (not spec keys)
def _int_at_least(low: int, expected: str):
    """An argparse type: an integer ``>= low``; anything else is one line naming the text."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}")
        return value

    parse.__name__ = f"int_at_least_{low}"
    return parse


non_negative_int = _int_at_least(0, "an integer >= 0")  # options whose 0 means "none" (--search-every 0)
positive_int = _int_at_least(1, "a positive integer")


def fanout_list(text: str) -> tuple[int, ...]:
    """``"10,25"`` -> (10, 25); each a positive int or -1 (all neighbours)."""
    if not _FANOUTS.match(text.strip()):
        raise argparse.ArgumentTypeError(f"fanouts must be comma-separated integers like 10,25, got {text!r}")
    values = tuple(int(v) for v in text.split(","))
    if any(v < 1 and v != -1 for v in values):
        raise argparse.ArgumentTypeError(f"each fanout must be a positive integer or -1, got {text!r}")
    return values


def size_bytes(text: str) -> int:
    from cherry.memory import parse_size

    try:
        value = parse_size(text)
    except (ValueError, TypeError) as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive size like 512MiB or 2GiB, got {text!r}")
    return value
