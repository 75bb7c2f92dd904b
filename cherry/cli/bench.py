"""`cherry bench ops|engine|systems`: side-by-side benchmarks that print ratios measured in one run.

Each benchmark lives in `cherry.bench.benchmarks.<name>` and exposes ``register(subparsers)``.
"""
from __future__ import annotations

import argparse
import importlib

BENCHMARKS = ("ops", "engine", "systems", "planner")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("bench", help="benchmarks: native ops, engine overheads, systems side by side")
    inner = p.add_subparsers(dest="benchmark", required=True)
    for name in BENCHMARKS:
        importlib.import_module(f"cherry.bench.benchmarks.{name}").register(inner)
