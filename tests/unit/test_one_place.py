"""One place per decision: the run schema (workflow/schemas/run.schema.yaml) holds every run-spec
default and description; the CLI's help and the `cherry bench` options are generated from it; no
module of cherry/ writes a spec default's literal again."""
from __future__ import annotations

import argparse
import ast
from pathlib import Path

import pytest

from cherry.cli import bench as bench_cli
from cherry.cli.options import OneLineParser, add_spec_arguments, add_spec_options, spec_properties
from cherry.spec import schema_defaults
from cherry.systems import system_entry

ROOT = Path(__file__).resolve().parents[2]
SOURCES = sorted((ROOT / "cherry").rglob("*.py"))
# torch.optim.Adam is built in these places until the optimizer factory takes them over;
# a new one must go through that factory, not here.
ADAM_BUILDERS_AT_MOST = 2


def _defaults() -> dict:
    """Run-spec defaults and the cherry system's option defaults: what no other literal may repeat."""
    options = {k: v["default"] for k, v in system_entry("cherry").options.items() if "default" in v}
    return {**schema_defaults(), **options}


def test_every_spec_key_is_described():
    missing = [key for key, prop in spec_properties().items() if not prop.get("description")]
    assert not missing, f"run.schema.yaml keys without a description: {missing}"


def test_cli_help_is_generated_from_the_schema():
    p = OneLineParser(prog="t")
    add_spec_options(p)
    helps = {a.dest: a.help for a in p._actions}
    for key, prop in spec_properties().items():
        default = prop.get("default")
        assert helps[key].startswith(prop["description"].replace("%", "%%")), key
        if default is not None:
            text = ",".join(map(str, default)) if isinstance(default, list) else str(default).lower() \
                if isinstance(default, bool) else str(default)
            assert helps[key].endswith(f"(default: {text})"), (key, helps[key])


def test_a_new_schema_key_needs_nothing_else(monkeypatch):
    """Adding a key to the schema is all it takes: it becomes a typed, described option."""
    from cherry.cli import options

    real = options.spec_properties()
    toy = {**real, "weight_decay": {"type": "number", "minimum": 0, "default": 0.25, "description": "L2 penalty"}}
    monkeypatch.setattr(options, "spec_properties", lambda: toy)
    p = argparse.ArgumentParser()
    add_spec_arguments(p, ("weight_decay",))
    assert p.parse_args([]).weight_decay == 0.25 and p.parse_args(["--weight-decay", "0.5"]).weight_decay == 0.5
    assert "L2 penalty (default: 0.25)" in p.format_help()


def test_bench_options_take_the_schema_defaults():
    parser = OneLineParser(prog="cherry")
    bench_cli.register(parser.add_subparsers(dest="command"))
    defaults = schema_defaults()
    for name, own in bench_cli._OWN_DEFAULTS.items():
        args = parser.parse_args(["bench", name])
        if "fanouts" in vars(args):  # (bench budget sweeps its own graphs and fanouts)
            assert tuple(args.fanouts) == tuple(defaults["fanouts"])
        for key, value in own.items():
            assert getattr(args, key) == value and value != defaults[key], (name, key)


def _literal(node):
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return None


def _decision(value) -> bool:
    """A default worth one place: a number other than 0 or 1, or a list. Strings ("cpu", "auto") and
    0/1/None/False are idioms a library function may use as its own parameter default."""
    if isinstance(value, list):
        return bool(value)
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value not in (0, 1)


def _shadow_defaults(tree: ast.AST, defaults: dict):
    """(line, what) of each parameter or argparse option named after a default's key whose own
    default is that default's value, and of each list/tuple literal equal to a list default."""
    lists = [tuple(v) for v in defaults.values() if isinstance(v, list) and v]
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            a = node.args
            pos = a.posonlyargs + a.args
            pairs = list(zip(pos[len(pos) - len(a.defaults):], a.defaults)) + \
                [(k, d) for k, d in zip(a.kwonlyargs, a.kw_defaults) if d is not None]
            for arg, default in pairs:
                if arg.arg in defaults and _literal(default) == defaults[arg.arg] and _decision(defaults[arg.arg]):
                    yield node.lineno, f"parameter {arg.arg}={defaults[arg.arg]!r}"
        if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "add_argument" and node.args:
            key = str(_literal(node.args[0]) or "").lstrip("-").replace("-", "_")
            for kw in node.keywords:
                if kw.arg == "default" and key in defaults and _literal(kw.value) == defaults[key] \
                        and _decision(defaults[key]):
                    yield node.lineno, f"option --{key} default {defaults[key]!r}"
        if isinstance(node, (ast.List, ast.Tuple)):
            value = _literal(node)
            if value is not None and tuple(value) in lists:
                yield node.lineno, f"literal {list(value)}"
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and \
                node.value in {",".join(map(str, v)) for v in lists}:
            yield node.lineno, f"literal {node.value!r}"


def test_no_spec_default_is_written_twice():
    defaults = _defaults()
    found = [f"{path.relative_to(ROOT)}:{line}: {what}"
             for path in SOURCES for line, what in _shadow_defaults(ast.parse(path.read_text()), defaults)]
    assert not found, "defaults live in run.schema.yaml (and the systems table's options) only: " + "; ".join(found)


def test_the_shadow_check_can_fail():
    tree = ast.parse("def f(hidden=256, safety=0.1):\n    p.add_argument('--lr', default=0.003)\n    g([10, 25])\n")
    found = [what for _, what in _shadow_defaults(tree, _defaults())]
    assert found == ["parameter hidden=256", "parameter safety=0.1", "option --lr default 0.003", "literal [10, 25]"] or \
        sorted(found) == sorted(["parameter hidden=256", "parameter safety=0.1", "option --lr default 0.003",
                                 "literal [10, 25]"])


def test_adam_is_not_built_in_new_places():
    builders = [f"{p.relative_to(ROOT)}:{n.lineno}" for p in SOURCES for n in ast.walk(ast.parse(p.read_text()))
                if isinstance(n, ast.Attribute) and n.attr == "Adam"]
    assert len(builders) <= ADAM_BUILDERS_AT_MOST, f"build optimizers through one factory, not again: {builders}"


@pytest.mark.parametrize("path", ["cherry/cli/options.py", "cherry/systems/table.py"])
def test_one_list_of_orderings(path):
    """The orderings are named once, in cherry.planning.ordering.ORDERINGS."""
    tree = ast.parse((ROOT / path).read_text())
    lists = [_literal(n) for n in ast.walk(tree) if isinstance(n, (ast.List, ast.Tuple))]
    assert not [v for v in lists if v is not None and {"metis", "random"} <= set(map(str, v))]
