"""``python -m cherry.bench.capacity_run --spec SPEC.json --out SEARCH.json``: the memory wall's search.

The largest logical batch that one system (at the spec's K, e.g. "auto") trains under the spec's
device capacity, up to the whole training set: `cherry.bench.capacity.search_largest_batch` with
``fits(b)`` = a short run of the spec at batch size ``b`` (its own ``warmup + steps``, e.g. one step)
ends ``ok``; ``oom`` is "does not fit". The spec's batch size is the search's start. Each probe is an
ordinary run of `cherry.bench.runner.execute` (same batches, same measurement as every run): in this
process on a CPU, whose emulated capacity raises a clean out-of-memory, and in a fresh process on a
GPU, which does not reliably recover from one.

The search record (JSON, written atomically) holds the spec, the tolerances, the training-set size,
every probe (batch size, status, reason, K chosen, peak tracked bytes, median step seconds, wall
seconds, recomputation steps, whether an out-of-memory was of a single seed) and the result
(``largest_fit_batch``, ``smallest_oom_batch``, ``capped_at_training_set``, ``wall_reason``: what
stopped the search, `cherry.bench.capacity.WALL_REASONS`; ``recompute_at_largest``: the largest batch
trained with recomputation).
Its ``status`` is ``ok`` when the search ended by its rule; a probe that ends neither ok nor oom
(skipped, timeout, error) stops the search with that status and reason, keeping the probes made.
Exit status: 0 for every such outcome, 2 for a bad spec or option, 1 for a probe that errored.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from typing import Any, Callable, Optional

from cherry.bench.capacity import RATIO_TOLERANCE, SEED_TOLERANCE, check_tolerances, search_largest_batch, wall_reason

PROBE_KEYS = ("status", "reason", "num_microbatches_max", "peak_tracked_bytes", "estimated_peak_bytes",
              "step_time_median_s", "wall_s", "recompute_steps", "oom_single_seed")


class ProbeStopped(Exception):
    """A probe ended neither ok nor oom: the search stops with its status."""

    def __init__(self, status: str, reason: Optional[str]) -> None:
        super().__init__(f"{status}: {reason}")
        self.status, self.reason = status, reason


def _probe_in_process(spec, record_path: str) -> None:
    from cherry.bench.runner import execute

    execute(spec, record_path, lambda line: None)


def _probe_in_subprocess(spec, record_path: str) -> None:
    from cherry.io import write_json_atomic

    spec_path = record_path + ".spec.json"
    write_json_atomic(spec_path, spec.to_dict())
    subprocess.run([sys.executable, "-m", "cherry.bench.run", "--spec", spec_path, "--out", record_path, "--quiet"],
                   check=False)


def make_fits(spec_at: Callable[[int], Any], key: str, probe_run: Callable[[Any, str], None],
              log: Callable[[str], None]) -> tuple[Callable[[int], bool], list[dict[str, Any]], dict[str, Any]]:
    """``(fits, probes, first_record)`` for `search_largest_batch`: ``fits(v)`` runs ``spec_at(v)`` as one
    probe (``probe_run``), appends ``{key: v, ...PROBE_KEYS}`` to ``probes``, keeps the first probe's record
    in ``first_record``, and raises `ProbeStopped` for a probe that ended neither ok nor oom."""
    from cherry.io import read_json

    probes: list[dict[str, Any]] = []
    first_record: dict[str, Any] = {}

    def fits(value: int) -> bool:
        probe_spec = spec_at(value)
        with tempfile.TemporaryDirectory(prefix="cherry-probe-") as tmp:
            path = os.path.join(tmp, "record.json")
            probe_run(probe_spec, path)
            record = read_json(path, "probe record")
        first_record.update(record if not first_record else {})
        probe = {key: value, **{k: record.get(k) for k in PROBE_KEYS}}
        probes.append(probe)
        log(f"[{probe_spec.system}] {key} {value}: {probe['status']} K={probe['num_microbatches_max']} "
            f"peak={probe['peak_tracked_bytes']}")
        if probe["status"] not in ("ok", "oom"):
            raise ProbeStopped(probe["status"], probe["reason"])
        return probe["status"] == "ok"

    return fits, probes, first_record


def search_spec(spec, ratio_tolerance: float = RATIO_TOLERANCE, seed_tolerance: int = SEED_TOLERANCE,
                limit: Optional[int] = None, probe_run: Optional[Callable[[Any, str], None]] = None,
                log: Callable[[str], None] = lambda line: None) -> dict[str, Any]:
    """Search the largest batch of ``spec`` (a `cherry.spec.RunSpec`) and return the search record.

    ``limit`` defaults to the dataset's training-set size; ``probe_run(spec, record_path)`` runs one
    probe and writes its run record (default: in this process on a CPU, a fresh one on a GPU).
    """
    from cherry.spec import RunSpec, run_id

    if not isinstance(spec, RunSpec):
        raise TypeError(f"spec has type {type(spec).__name__}: expected a cherry.spec.RunSpec")
    check_tolerances(ratio_tolerance, seed_tolerance)
    if limit is None:
        from cherry.data import load_dataset

        limit = int(load_dataset(spec.dataset, spec.root).train_idx.numel())
    if probe_run is None:
        probe_run = _probe_in_subprocess if spec.device == "cuda" else _probe_in_process
    started = time.monotonic()
    fits, probes, first_record = make_fits(lambda b: spec.replace(batch_size=b), "batch_size", probe_run, log)

    status, reason = "ok", None
    try:
        lowest = spec.num_microbatches or 1  # a fixed K needs a seed per micro-batch
        result = search_largest_batch(fits, spec.batch_size, limit, ratio_tolerance, seed_tolerance, lowest)
        largest, smallest_oom = result.largest_fit, result.smallest_oom
    except ProbeStopped as exc:
        status, reason = exc.status, exc.reason
        ok = [p["batch_size"] for p in probes if p["status"] == "ok"]
        largest, smallest_oom = (max(ok) if ok else None), None
    at_largest = next((p for p in probes if p["batch_size"] == largest and p["status"] == "ok"), {})
    return {
        "search_id": run_id(spec), "status": status, "reason": reason, "spec": spec.to_dict(),
        "system": spec.system, "dataset": spec.dataset, "experiment": spec.experiment,
        "num_microbatches_requested": str(spec.to_dict()["num_microbatches"]),
        "device_memory_bytes": spec.device_memory_bytes, "start_batch": spec.batch_size,
        "training_set_size": limit, "ratio_tolerance": ratio_tolerance, "seed_tolerance": seed_tolerance,
        "probes": probes, "largest_fit_batch": largest, "smallest_oom_batch": smallest_oom,
        "capped_at_training_set": largest == limit,
        "wall_reason": wall_reason(status, largest, smallest_oom, limit, probes),
        "recompute_at_largest": bool(at_largest.get("recompute_steps")), "search_wall_s": time.monotonic() - started,
        "git_sha": first_record.get("git_sha"), "device_name": first_record.get("device_name"),
    }


def add_search_options(parser: argparse.ArgumentParser, scope: str = "") -> None:
    """The options every search command shares: the search tolerances and ``--quiet``
    (``scope`` prefixes the tolerances' help, e.g. ``"batch: "`` where they apply to one knob)."""
    parser.add_argument("--ratio-tolerance", type=float, default=RATIO_TOLERANCE,
                        help=f"{scope}stop bisecting when smallest failing / largest fitting <= this "
                             f"(default {RATIO_TOLERANCE})")
    parser.add_argument("--seed-tolerance", type=int, default=SEED_TOLERANCE,
                        help=f"{scope}... or when they differ by at most this many seeds (default {SEED_TOLERANCE})")
    parser.add_argument("--quiet", action="store_true", help="no per-probe progress on stderr")


def stderr_log(quiet: bool) -> Callable[[str], None]:
    """A progress log writing each line to stderr at once, or nothing when ``quiet``."""
    def log(line: str) -> None:
        if not quiet:
            print(line, file=sys.stderr, flush=True)

    return log


def run_search_command(args: argparse.Namespace, prog: str, search: Callable[[Any, Callable[[str], None]], dict],
                       summary: Callable[[dict], str], check: Callable[[Any], None] = lambda spec: None) -> int:
    """A search command's body after parsing: load ``args.spec``, check it (``check(spec)``, the
    tolerances) and every output before any probe; then ``search(spec, log)``, write its record to
    ``args.out`` and log ``summary(record)``. Exit status: 2 for a bad spec or option (one line on
    stderr, nothing run), 1 when the record's status is ``error``, else 0."""
    from cherry.io import write_json_atomic
    from cherry.outputs import check_outputs
    from cherry.spec import SpecError, load_spec

    try:
        spec = load_spec(args.spec)
        check(spec)
        check_tolerances(args.ratio_tolerance, args.seed_tolerance)
        check_outputs(args)
    except (SpecError, ValueError, TypeError) as exc:
        print(f"{prog}: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2
    from cherry.bench.runner import apply_process_switches

    apply_process_switches(spec)
    log = stderr_log(args.quiet)
    record = search(spec, log)
    write_json_atomic(args.out, record)
    log(f"[{spec.system}] {summary(record)} -> {args.out}")
    return 1 if record["status"] == "error" else 0


def main(argv: Optional[list[str]] = None) -> int:
    from cherry.outputs import add_output

    parser = argparse.ArgumentParser(prog="python -m cherry.bench.capacity_run", description=__doc__.splitlines()[0])
    parser.add_argument("--spec", required=True, help="run spec whose batch_size is the search's start")
    add_output(parser, "--out", required=True, help="where to write the search record (JSON)")
    add_search_options(parser)
    args = parser.parse_args(argv)
    return run_search_command(
        args, "cherry.bench.capacity_run",
        lambda spec, log: search_spec(spec, args.ratio_tolerance, args.seed_tolerance, log=log),
        lambda record: f"largest batch {record['largest_fit_batch']} ({record['status']})")


if __name__ == "__main__":
    from cherry.errors import run_boundary

    sys.exit(run_boundary("cherry.bench.capacity_run", main))
