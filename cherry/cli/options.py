"""Options shared by `cherry train`, `cherry verify` and the benchmarks, and their validation.

Every parser here turns a bad value into ``argparse``'s one-line usage error naming the value and what
was expected, before any work runs.
"""
from __future__ import annotations

import argparse

from cherry.memory import parse_size

MODEL_CHOICES = ("sage", "gcn", "gat", "mlp")
AGGR_CHOICES = ("mean", "pool", "lstm")


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def fanout_list(text: str) -> tuple[int, ...]:
    """``"10,25"`` -> (10, 25); each a positive int or -1 (all neighbours)."""
    try:
        values = tuple(int(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"fanouts must be comma-separated integers like 10,25, got {text!r}") from None
    if not values or any(v < 1 and v != -1 for v in values):
        raise argparse.ArgumentTypeError(f"each fanout must be a positive integer or -1, got {text!r}")
    return values


def microbatches(text: str) -> int | None:
    """``auto`` -> None (choose from the budget), else a positive int."""
    if text == "auto":
        return None
    try:
        return positive_int(text)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(f"expected 'auto' or a positive integer, got {text!r}") from None


def size_bytes(text: str) -> int:
    try:
        value = parse_size(text)
    except (ValueError, TypeError) as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive size like 512MiB or 2GiB, got {text!r}")
    return value


def add_model_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dataset", required=True, help="dataset name (see `cherry data info`)")
    p.add_argument("--root", default=None, help="data directory (default: $CHERRY_DATA or ./data)")
    p.add_argument("--model", choices=MODEL_CHOICES, default="sage")
    p.add_argument("--aggr", choices=AGGR_CHOICES, default=None, help="GraphSAGE aggregator (default mean)")
    p.add_argument("--layers", type=positive_int, default=2)
    p.add_argument("--hidden", type=positive_int, default=256)
    p.add_argument("--heads", type=positive_int, default=4, help="attention heads (gat)")
    p.add_argument("--dropout", type=float, default=0.0)
    p.add_argument("--fanouts", type=fanout_list, default=(10, 25),
                   help="per layer, input layer first, e.g. 10,25 (-1 = all neighbours)")
    p.add_argument("--batch-size", type=positive_int, default=1024)
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--seed", type=int, default=0)


def add_memory_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--microbatches", type=microbatches, default=None, metavar="K|auto",
                   help="number of micro-batches, or auto (default) to choose it from the budget")
    p.add_argument("--budget", type=size_bytes, default=None, metavar="SIZE",
                   help="memory budget for one micro-batch's training, e.g. 800MiB "
                        "(default: device memory minus a reserve)")
    p.add_argument("--device-memory", type=size_bytes, default=None, metavar="SIZE",
                   help="device capacity: emulated on a CPU (a tracker raises out-of-memory above it), "
                        "an allocator cap on a GPU")


def resolve_budget(args: argparse.Namespace) -> int | None:
    """The budget: ``--budget``, else the capacity minus a 10% reserve (allocator slack, fragmentation)."""
    if args.budget is not None:
        if args.device_memory is not None and args.budget > args.device_memory:
            raise ValueError(f"--budget {args.budget} B exceeds --device-memory {args.device_memory} B")
        return args.budget
    capacity = args.device_memory
    if capacity is None and args.device == "cuda":
        import torch

        capacity = torch.cuda.get_device_properties(0).total_memory
    if capacity is None:
        return None
    return capacity - capacity // 10
