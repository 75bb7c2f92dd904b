"""The ``cherry`` command: one sub-command module per verb group (data, train, verify, bench).

Each module in `COMMANDS` exposes ``register(subparsers)``, which adds its parser and sets
``func`` (taking the parsed namespace, returning an exit code). Bad input surfaces as a one-line
``cherry: error: ...`` message and exit status 2, never a traceback or a usage block; environment
faults, a diverged training and any exception class are one line too (`cherry.errors.run_boundary`,
entered before torch is imported).
Every output a command declares (`cherry.outputs.add_output`) is checked before its work runs.
"""
from __future__ import annotations

import importlib
import sys

from cherry.errors import run_boundary  # standard library only: the boundary comes before torch

COMMANDS = ("data", "train", "verify", "bench")


def build_parser():
    """The ``cherry`` parser, every sub-command registered (this imports torch)."""
    from cherry.cli.options import OneLineParser

    parser = OneLineParser(prog="cherry", description="Exact micro-batched GNN training under a memory budget.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=OneLineParser)
    for name in COMMANDS:
        importlib.import_module(f"cherry.cli.{name}").register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run one ``cherry`` command; the error boundary is entered before anything heavy is imported,
    so an import that fails (host memory, a broken plugin) is one line too."""
    return run_boundary("cherry", lambda: _dispatch(list(sys.argv[1:] if argv is None else argv)))


def _dispatch(argv: list[str]) -> int:
    from cherry.cli.options import join_negative_values
    from cherry.outputs import check_outputs

    args = build_parser().parse_args(join_negative_values(argv))
    check_outputs(args)  # every declared output, before the command's work (`cherry.outputs`)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
