"""The CLI is the run schema: a walk over workflow/schemas/run.schema.yaml and the parsers of `cherry
train` and `cherry verify` fails on any difference (a key with no option, an option with no key, a
default or a choice list that differs), so a key added to the schema (an ``options.*`` key included)
needs no other edit to become an option, and one whose option is missing fails here."""
from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from cherry.cli import build_parser
from cherry.cli.options import (_NOT_OPTIONS, OneLineParser, _text, add_cherry_options, cherry_option_properties,
                                spec_from_args, spec_properties)

ROOT = Path(__file__).resolve().parents[2]
# Each command's own options (not run-spec keys); a new one is added here on purpose, not by accident.
OWN = {"train": {"-h", "--help", "--no-eval", "--json", "--save", "--resume", "--overwrite", "--quiet"},
       "verify": {"-h", "--help", "--tolerance", "--json"}}
COMMANDS = tuple(OWN)
_DEFAULT = re.compile(r"\(default(?P<here> here)?: (?P<value>[^()]*)\)$")


@pytest.fixture(scope="module")
def parsers() -> dict[str, argparse.ArgumentParser]:
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return {name: sub.choices[name] for name in COMMANDS}


def schema_keys() -> dict[str, dict]:
    """``{flag: property}`` of every run-spec key and cherry option the CLI must offer."""
    keys = {**spec_properties(), **cherry_option_properties()}
    return {"--" + key.replace("_", "-"): prop for key, prop in keys.items()}


def _choices(action: argparse.Action) -> list | None:
    """The values an option lists: argparse's choices, else a ``a|b|c`` metavar (None if neither)."""
    if action.choices is not None:
        return list(action.choices)
    metavar = action.metavar or ""
    return metavar.split("|") if "|" in metavar else None


def _schema_choices(prop: dict, refused) -> list | None:
    if "enum" in prop:
        return [str(v) for v in prop["enum"] if v is not None and v != refused]
    if prop.get("type") == "boolean":
        return ["true", "false"]
    consts = [b["const"] for b in prop.get("oneOf", []) if "const" in b and b["const"] != refused]
    return ["K", *consts] if consts else None


def test_the_identity_keys_alone_are_not_options():
    """Only the run's identity and bookkeeping are left out (the command names its system)."""
    top = set(spec_properties()) | set(_NOT_OPTIONS)
    assert set(_NOT_OPTIONS) == {"system", "repeat", "experiment", "axis", "options"} and "dataset" in top


@pytest.mark.parametrize("command", COMMANDS)
def test_every_key_is_an_option_and_every_option_a_key(command, parsers):
    parser = parsers[command]
    flags = {flag: action for action in parser._actions for flag in action.option_strings}
    wanted = schema_keys()
    missing = sorted(set(wanted) - set(flags))
    assert not missing, f"cherry {command}: run-schema keys without an option: {missing}"
    keyed = {a.dest for flag, a in flags.items() if flag in wanted}
    strays = sorted(f for f, a in flags.items() if a.dest not in keyed and f not in OWN[command])
    assert not strays, f"cherry {command}: options that are no run-schema key: {strays}"


@pytest.mark.parametrize("command", COMMANDS)
def test_defaults_and_choices_are_the_schemas(command, parsers):
    parser = parsers[command]
    own = parser.get_default("_spec_defaults") or {}
    refused = parser.get_default("_spec_refused") or {}
    for flag, prop in schema_keys().items():
        action = next(a for a in parser._actions if flag in a.option_strings)
        key = action.dest
        assert action.default is argparse.SUPPRESS, (command, flag)  # the spec, not argparse, applies defaults
        value = own.get(key, prop.get("default"))
        if key in refused and value == refused[key][0]:
            value = None
        found = _DEFAULT.search(action.help or "")
        if value is None:
            assert found is None, (command, flag, action.help)
        else:
            assert found and found["value"] == _text(value) and bool(found["here"]) == (key in own), \
                (command, flag, action.help)
        assert _choices(action) == _schema_choices(prop, refused.get(key, (object(),))[0]), (command, flag)
        assert action.help.startswith((prop.get("description") or "").replace("%", "%%")), (command, flag)


@pytest.mark.parametrize("command", COMMANDS)
def test_the_defaults_shown_are_accepted(command, parsers):
    """What `--help` shows as the default runs: the command with only ``--dataset`` makes a spec."""
    parser = parsers[command]
    args = parser.parse_args(["--dataset", "synth-tiny"])
    spec = spec_from_args(args, parser)
    assert spec.options["ordering"] == cherry_option_properties()["ordering"]["default"]


def test_a_refused_value_is_one_line(parsers):
    parser = parsers["verify"]
    with pytest.raises(ValueError, match=r"^--microbatches: 'auto' does not apply here \(cherry verify"):
        spec_from_args(parser.parse_args(["--dataset", "synth-tiny", "--microbatches", "auto"]), parser)


@pytest.mark.parametrize("argv, key, value", [
    (["--recompute", "on"], "recompute", "on"), (["--balance", "count"], "balance", "count"),
    (["--pipeline", "false"], "pipeline", False), (["--safety", "0.25"], "safety", 0.25),
    (["--exactness-check", "every:3"], "exactness_check", "every:3"), (["--ordering", "bfs"], "ordering", "bfs"),
])
@pytest.mark.parametrize("command", COMMANDS)
def test_an_option_reaches_the_spec(command, argv, key, value, parsers):
    parser = parsers[command]
    spec = spec_from_args(parser.parse_args(["--dataset", "synth-tiny", *argv]), parser)
    assert spec.options[key] == value


@pytest.mark.parametrize("argv, says", [
    (["--safety", "1.5"], "--safety"), (["--pipeline", "maybe"], "--pipeline: expected true or false"),
    (["--exactness-check", "sometimes"], "--exactness-check"),
])
def test_a_bad_option_value_names_its_flag(argv, says, parsers):
    parser = parsers["train"]
    with pytest.raises(ValueError) as caught:
        spec_from_args(parser.parse_args(["--dataset", "synth-tiny", *argv]), parser)
    assert str(caught.value).startswith(says) and "\n" not in str(caught.value), str(caught.value)


def test_a_new_option_key_needs_nothing_else(monkeypatch):
    """A key added to ``$defs/cherry_options`` is an option with its schema's help and default."""
    from cherry.cli import options

    real = options.cherry_option_properties()
    toy = {**real, "toy_switch": {"enum": ["a", "b"], "default": "b", "description": "a toy"}}
    monkeypatch.setattr(options, "cherry_option_properties", lambda: toy)
    p = OneLineParser(prog="t")
    add_cherry_options(p)
    action = next(a for a in p._actions if "--toy-switch" in a.option_strings)
    assert action.choices == ["a", "b"] and action.help.endswith("(default: b)")


def test_the_docs_list_the_parsers_choices(parsers):
    """A ``--flag a|b|c`` written in the README or docs/ lists what the parser accepts."""
    flags = {flag: _choices(a) for p in parsers.values() for a in p._actions for flag in a.option_strings}
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    checked, wrong = 0, []
    for page in pages:
        for flag, listed in re.findall(r"`(--[a-z-]+) ([a-z0-9-]+(?:\\?\|[a-zA-Z0-9-]+)+)`", page.read_text()):
            if flags.get(flag) is not None:
                checked += 1
                if sorted(listed.replace("\\|", "|").split("|")) != sorted(map(str, flags[flag])):
                    wrong.append(f"{page.name}: {flag} {listed}")
    assert checked and not wrong, wrong
