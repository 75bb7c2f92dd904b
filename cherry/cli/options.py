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

# spec key -> (extra human option name or None, metavar, help); types are checked by the spec.
_SPEC_OPTIONS: dict[str, tuple[Optional[str], Optional[str], str]] = {
    "dataset": (None, "NAME|PATH", "dataset name (see `cherry data info`), a registered name, or a directory "
                                   "in OGB's layout"),
    "root": (None, "DIR", "data directory (default: $CHERRY_DATA, else <repository>/data)"),
    "model": (None, "NAME", "sage, gcn, gat, mlp or a registered model (default sage)"),
    "aggr": (None, "mean|pool|lstm", "GraphSAGE aggregator (default mean)"),
    "lstm_impl": (None, "auto|packed|bucketed|steps", "LSTM aggregator implementation (default auto)"),
    "num_layers": ("--layers", "L", "number of layers (default 2)"),
    "hidden": (None, "H", "hidden width (default 256)"),
    "heads": (None, "N", "attention heads of gat (default 4)"),
    "dropout": (None, "P", "dropout probability in [0, 1) (default 0)"),
    "fanouts": (None, "F,F", "per layer, input layer first, e.g. 10,25; -1 = all neighbours (default 10,25)"),
    "batch_size": (None, "B", "seeds per logical mini-batch (default 1024)"),
    "num_microbatches": ("--microbatches", "K|auto",
                         "micro-batches per step, or auto (default): the smallest K that fits the budget"),
    "budget_bytes": ("--budget", "SIZE", "memory budget for training, e.g. 800MiB "
                                         "(default: the device memory less a 10%% reserve)"),
    "device_memory_bytes": ("--device-memory", "SIZE", "device capacity: emulated on a CPU (a tracker raises "
                                                       "out-of-memory above it), an allocator cap on a GPU"),
    "device": (None, "cpu|cuda", "device (default cpu)"),
    "nproc": (None, "N", "data-parallel ranks, one process each (default 1; under torchrun/srun: theirs)"),
    "seed": (None, "S", "random seed (default 0)"),
    "epochs": (None, "E", "epochs (default 1)"),
    "max_steps_per_epoch": ("--max-steps", "N", "cap on steps per epoch (for quick runs)"),
    "lr": (None, "LR", "learning rate (default 0.003)"),
    "optimizer": (None, "adam|adamw|sgd", "optimizer (default adam)"),
    "weight_decay": (None, "WD", "weight decay (default 0)"),
    "momentum": (None, "M", "momentum of sgd (default 0.9)"),
    "input_dropout": (None, "P", "dropout on the input features, exact across micro-batches (default 0)"),
    "steps": (None, "N", "measured steps of a benchmark run (epochs 0; default 10)"),
    "warmup": (None, "N", "warm-up steps of a benchmark run (default 2)"),
    "evaluate": (None, "true|false", "layer-wise evaluation after each epoch (default true)"),
    "timeout_s": (None, "S", "wall-clock limit of a benchmark run (default 3600)"),
}
SPEC_OPTION_KEYS = tuple(_SPEC_OPTIONS)
_INTEGER_KEYS = ("num_layers", "hidden", "heads", "batch_size", "nproc", "seed", "epochs", "max_steps_per_epoch", "steps",
                 "warmup")
_NUMBER_KEYS = ("dropout", "lr", "timeout_s", "weight_decay", "momentum", "input_dropout")
_FANOUTS = re.compile(r"^-?\d+(,-?\d+)*$")


class OneLineParser(argparse.ArgumentParser):
    """An argument error is one line (``cherry: error: ...``, exit 2), without the usage block."""

    def error(self, message: str):  # noqa: D102 - argparse's hook
        self.exit(2, f"cherry: error: {message} (see `{self.prog} --help`)\n")


def add_spec_options(p: argparse.ArgumentParser, keys: Optional[tuple[str, ...]] = None,
                     defaults: Optional[Mapping[str, Any]] = None) -> None:
    """Add the options of spec ``keys`` (default: all of them) to ``p``.

    ``defaults`` are a command's own settings where it differs from the run schema (a benchmark's
    sizes, say); they are shown in the help and applied by `spec_from_args` unless given.
    """
    defaults = dict(defaults or {})
    for key in keys or SPEC_OPTION_KEYS:
        human, metavar, text = _SPEC_OPTIONS[key]
        names = [n for n in (human, "--" + key.replace("_", "-")) if n]
        if key in defaults:
            text = re.sub(r"\(default[^)]*\)", "", text).strip() + f" (default here: {_text(defaults[key])})"
        p.add_argument(*names, dest=key, metavar=metavar, default=argparse.SUPPRESS, help=text,
                       required=key == "dataset" and "dataset" not in defaults)
    p.set_defaults(_spec_defaults=defaults)


def add_ordering_option(p: argparse.ArgumentParser) -> None:
    """``--ordering``: cherry's seed ordering option (``options.ordering`` of the spec)."""
    p.add_argument("--ordering", dest="ordering", choices=("metis", "random", "none"), default=argparse.SUPPRESS,
                   help="seed ordering for locality (default metis)")


def _text(value: Any) -> str:
    return ",".join(map(str, value)) if isinstance(value, (list, tuple)) else str(value)


def _flag(parser_actions, key: str) -> str:
    for action in parser_actions:
        if action.dest == key and action.option_strings:
            return action.option_strings[0]
    return key


def _convert(key: str, text: Any) -> Any:
    """A command-line string as the spec's JSON value (the spec then checks ranges and kinds)."""
    if not isinstance(text, str):
        return text
    if key in ("aggr", "timeout_s", "max_steps_per_epoch") and text in ("", "none", "null", "None"):
        return None
    if key in _INTEGER_KEYS:
        try:
            return int(text)
        except ValueError:
            raise SpecError(f"key {key}: expected an integer, got {text!r}") from None
    if key in _NUMBER_KEYS:
        try:
            value = float(text)
        except ValueError:
            raise SpecError(f"key {key}: expected a number, got {text!r}") from None
        if not math.isfinite(value):  # "1e400" reads as inf: name the text as typed
            raise SpecError(f"key {key}: {text!r} is not a finite number (expected a finite number)")
        return value
    if key == "fanouts":
        if not _FANOUTS.match(text.strip()):
            raise SpecError(f"key fanouts: expected comma-separated integers like 10,25 (-1 = all), got {text!r}")
        return [int(v) for v in text.split(",")]
    if key == "num_microbatches":
        if text == "auto":
            return "auto"
        try:
            return int(text)
        except ValueError:
            raise SpecError(f"key num_microbatches: expected 'auto' or a positive integer, got {text!r}") from None
    if key == "evaluate":
        if text.lower() in ("true", "1", "yes"):
            return True
        if text.lower() in ("false", "0", "no"):
            return False
        raise SpecError(f"key evaluate: expected true or false, got {text!r}")
    return text


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
        for key in _SPEC_OPTIONS:
            if key in given:
                data[key] = _convert(key, given[key])
        if "ordering" in given:
            data["options"] = {**data.get("options", {}), "ordering": given["ordering"]}
        data.update(fixed)
        return spec_from_dict(data)
    except SpecError as exc:
        message = str(exc).replace("invalid run spec: ", "")
        match = re.match(r"key ([a-z_]+)", message)
        if match:
            key = match.group(1)
            flag = "--ordering" if key == "options" else _flag(actions, key)
            message = flag + message[match.end():]
        raise ValueError(message) from None


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
