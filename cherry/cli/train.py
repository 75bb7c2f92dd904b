"""`cherry train`: train a model with automatic micro-batching under a (possibly emulated) memory budget."""
from __future__ import annotations

import argparse
import json
import sys

from cherry.cli.options import add_memory_options, add_model_options, resolve_budget
from cherry.memory import format_size


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("train", help="train with exact micro-batching under a memory budget")
    add_model_options(p)
    add_memory_options(p)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--max-steps", type=int, default=None, help="cap on steps per epoch (for quick runs)")
    p.add_argument("--no-eval", action="store_true", help="skip layer-wise evaluation after each epoch")
    p.add_argument("--ordering", choices=("metis", "none", "random"), default="metis")
    p.add_argument("--json", default=None, metavar="OUT", help="write a JSON summary here")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from cherry.io import write_json_atomic
    from cherry.session import TrainingSession

    if args.epochs < 1:
        raise ValueError(f"--epochs must be >= 1, got {args.epochs}")
    budget = resolve_budget(args)
    session = TrainingSession.from_args(args, budget)
    summary = session.run(progress=not args.quiet, echo=lambda line: print(line, flush=True))
    if args.json:
        write_json_atomic(args.json, summary)
    if summary["status"] == "oom":
        print(f"cherry: out of memory: {summary['reason']}", file=sys.stderr)
        return 3
    last = summary["epochs"][-1]
    print(f"done: K={last['max_microbatches']} peak={format_size(last['measured_peak_bytes'] or 0)} "
          f"valid_acc={last['valid_acc']:.4f} test_acc={last['test_acc']:.4f}")
    return 0
