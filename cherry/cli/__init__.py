"""The ``cherry`` command: one sub-command module per verb group (data, train, verify, bench).

Each module in `COMMANDS` exposes ``register(subparsers)``, which adds its parser and sets
``func`` (taking the parsed namespace, returning an exit code). Bad input surfaces as a one-line
``cherry: error: ...`` message and exit status 2, never a traceback or a usage block; environment
faults and a diverged training are one line too (`cherry.errors.run_boundary`, exit 1 and 4).
Every output a command declares (`cherry.outputs.add_output`) is checked before its work runs.
"""
from __future__ import annotations

import importlib
import sys

from cherry.cli.options import OneLineParser, join_negative_values
from cherry.errors import run_boundary
from cherry.outputs import check_outputs

COMMANDS = ("data", "train", "verify", "bench")


def build_parser() -> OneLineParser:
    parser = OneLineParser(prog="cherry", description="Exact micro-batched GNN training under a memory budget.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=OneLineParser)
    for name in COMMANDS:
        importlib.import_module(f"cherry.cli.{name}").register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(join_negative_values(list(sys.argv[1:] if argv is None else argv)))
    return run_boundary("cherry", lambda: _dispatch(args))


def _dispatch(args) -> int:
    check_outputs(args)  # every declared output, before the command's work (`cherry.outputs`)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
