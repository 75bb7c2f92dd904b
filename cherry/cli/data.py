"""``cherry data``: prepare a dataset (generate or convert once into the cache), describe and verify it.

``cherry data prepare NAME [--root DIR] [--scale X] [--force]`` prints progress lines on stderr and
the cache directory on stdout; a SIGTERM (or Ctrl-C) while it runs removes its temporary directory
before exiting (a SIGKILL cannot be caught: the next prepare deletes what it left). ``cherry data info
NAME [--root DIR] [--scale X]`` prints a JSON summary on stdout (preparing the dataset first if
needed) after checking every cache file's size and sha256 against the manifest. ``cherry data verify
NAME`` checks an existing cache in full (checksums, then graph, finite features, labels, splits) and
prints what it checked as JSON. Any fault is a one-line error naming the file or value.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import signal
import sys
import threading
import time

from cherry.data import DATASET_NAMES, dataset_info, prepare_dataset, verify_dataset

_MIN_INTERVAL_S = 1.0  # between two progress lines of the same stage


class _ProgressLines:
    """Prints '[  12.3s] stage  45%' on stderr: at each new stage, at its end, and at most once a second."""

    def __init__(self, stream=None):
        self.stream = stream  # None: sys.stderr as it is at print time
        self.start_s = time.perf_counter()
        self.stage = None
        self.last_print_s = 0.0

    def elapsed_s(self) -> float:
        return time.perf_counter() - self.start_s

    def __call__(self, stage: str, fraction: float) -> None:
        now_s = self.elapsed_s()
        if stage == self.stage and fraction < 1.0 and now_s - self.last_print_s < _MIN_INTERVAL_S:
            return
        self.stage, self.last_print_s = stage, now_s
        print(f"[{now_s:7.1f}s] {stage} {fraction:4.0%}", file=self.stream or sys.stderr, flush=True)


class Terminated(SystemExit):
    """Raised in the main thread on SIGTERM, so ``finally`` clauses (temporary-directory cleanup) run."""


@contextlib.contextmanager
def _terminate_cleanly():
    """While inside, SIGTERM raises `Terminated` (exit status 143, as the default action reports)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        raise Terminated(128 + signum)

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _peak_rss_bytes() -> int:
    """This process's peak resident set size so far (prepare reports its memory high-water mark, so a
    bounded conversion can be checked against a host's limit).

    Linux's ``VmHWM`` first: ``getrusage``'s ``ru_maxrss`` survives ``execve`` and so includes the RSS of
    the parent that forked this process (a large test runner's, for example), which is not ours."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024  # kB
    except OSError:
        pass
    import resource

    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024  # KiB on Linux


def _refuse_what_does_not_apply(args: argparse.Namespace) -> None:
    """``--root`` and ``--scale`` place and size the built-in datasets only: a directory or a
    registered name given them is refused in one line, not silently read as it is."""
    from cherry.data.sources import dataset_kind

    kind = dataset_kind(args.name)
    # an npz file's converted cache lives under the data root, so --root applies to it (not --scale)
    given = [flag for flag, value, applies in (("--root", args.root, kind in ("builtin", "npz")),
                                               ("--scale", args.scale, kind == "builtin"))
             if value is not None and not applies]
    if given:
        what = {"path": "a dataset directory", "npz": "an npz file"}.get(kind, "a registered dataset")
        raise ValueError(f"{' and '.join(given)}: do{'es' if len(given) == 1 else ''} not apply to {args.name!r}, "
                         f"{what} (read where it is, at its own size); leave {'it' if len(given) == 1 else 'them'} out")


def _name(args: argparse.Namespace) -> str:
    """The dataset name, an npz file's ``--split`` folded in (`cherry.data.gnn_benchmark.with_split`)."""
    from cherry.data.gnn_benchmark import with_split

    return with_split(args.name, args.split)


def _prepare(args: argparse.Namespace) -> int:
    _refuse_what_does_not_apply(args)
    progress = _ProgressLines()
    with _terminate_cleanly():
        cache_dir = prepare_dataset(_name(args), root=args.root, scale=args.scale, force=args.force,
                                    progress=progress)
    print(f"[{progress.elapsed_s():7.1f}s] {args.name} ready (peak resident memory "
          f"{_peak_rss_bytes() / 2**20:.0f} MiB)", file=sys.stderr, flush=True)
    print(cache_dir)
    return 0


def _info(args: argparse.Namespace) -> int:
    _refuse_what_does_not_apply(args)
    info = dataset_info(_name(args), root=args.root, scale=args.scale)
    print(json.dumps(info, indent=2, sort_keys=True))
    return 0


def _verify(args: argparse.Namespace) -> int:
    _refuse_what_does_not_apply(args)
    print(json.dumps(verify_dataset(_name(args), root=args.root, scale=args.scale), indent=2, sort_keys=True))
    return 0


def _add_common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", metavar="NAME|PATH", help="one of: " + ", ".join(DATASET_NAMES)
                        + "; a registered name; a directory in OGB's node-property layout; or an .npz file "
                          "in gnn-benchmark's layout")
    parser.add_argument("--root", default=None,
                        help="datasets directory (default: $CHERRY_DATA, else <repository>/data)")
    parser.add_argument("--scale", type=float, default=None,
                        help="generated datasets only: size relative to the real graph, in (0, 1] "
                             "(synth-products defaults to 0.1, synth-papers to 0.001)")
    parser.add_argument("--split", default=None, metavar="random:TRAIN,VALID[@SEED]",
                        help=".npz datasets only: the seeded split, per-class counts (random:20,30, the "
                             "default) or fractions of the labelled nodes (random:0.1,0.1); recorded in the "
                             "manifest (the same as NAME?split=...)")


def register(subparsers) -> None:
    """Add ``cherry data {prepare,info,verify}``."""
    parser = subparsers.add_parser("data", help="prepare and describe datasets")
    verbs = parser.add_subparsers(dest="data_command", required=True)
    prepare = verbs.add_parser("prepare", help="generate or convert a dataset into the checksummed cache")
    _add_common(prepare)
    prepare.add_argument("--force", action="store_true", help="rebuild even if a current cache exists")
    prepare.set_defaults(func=_prepare)
    info = verbs.add_parser("info", help="print a JSON summary of a dataset (checksums verified)")
    _add_common(info)
    info.set_defaults(func=_info)
    verify = verbs.add_parser("verify", help="check a prepared cache in full: checksums and contents")
    _add_common(verify)
    verify.set_defaults(func=_verify)
