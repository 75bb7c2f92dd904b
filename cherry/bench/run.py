"""``python -m cherry.bench.run --spec SPEC.json --out RECORD.json``: one benchmark run, one process.

Order:
- validate the spec (a bad spec prints one line and exits 2, writing nothing);
- apply process-wide switches (``CHERRY_NO_EXT`` for cherry's ``native_ops: false``) before any op
  loads; seed; load the dataset; run the system's once-per-dataset preprocessing;
- enter the device memory (emulated capacity on a CPU, allocator cap on a GPU, plus NVML sampling on
  a GPU); build the system;
- run ``warmup + steps`` optimizer steps on consecutive mini-batches of shuffled training seeds (or
  ``epochs`` whole epochs, evaluating after each); evaluate; write the record.

With ``--fit FIT.json`` (a record of `cherry.bench.fit_setting`) the spec's searched setting is
replaced by the one that fitted before anything runs; the record holds the spec that ran.

Outcomes (the record is written in every case but a bad spec):
- exit 0: ok; oom (torch.OutOfMemoryError or a budget too small for one seed); timeout
  (``timeout_s`` since dataset loading, checked between steps and by SIGALRM inside a step); skipped
  (`SystemUnavailable`, no CUDA, "auto" K for a system that cannot choose it); diverged (a step's
  loss became NaN or infinite; the reason names the step).
- exit 1: an environment fault (`cherry.errors.fault_line`: disk full, permission, host memory) gives
  status error with its one line. Any other exception gives status error with a one-line reason and
  the traceback on stderr.

A record that cannot be written after the run is kept elsewhere, and one line says where (exit 1).
"""
from __future__ import annotations

import argparse
import os
import sys
from typing import Optional

from cherry.bench.runner import EXIT_BAD_SPEC, apply_process_switches, execute
from cherry.errors import run_boundary
from cherry.outputs import add_output, check_outputs
from cherry.spec import SpecError, load_spec


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m cherry.bench.run", description=__doc__.splitlines()[0])
    parser.add_argument("--spec", required=True, help="run spec (JSON, see workflow/schemas/run.schema.yaml)")
    add_output(parser, "--out", required=True, help="where to write the record (JSON)")
    parser.add_argument("--fit", default=None, help="fit record (cherry.bench.fit_setting) whose setting replaces the spec's")
    parser.add_argument("--quiet", action="store_true", help="no per-step progress on stderr")
    args = parser.parse_args(argv)
    return run_boundary("cherry.bench.run", lambda: _run(args))


def _fitted(spec, path: str):
    """``spec`` with the setting of fit record ``path`` (SpecError or ValueError naming the file)."""
    from cherry.bench.fit_setting import apply_fit
    from cherry.io import read_json
    from cherry.spec import spec_from_dict

    fit = read_json(path, "fit record")
    if not isinstance(fit, dict) or "settings" not in fit:
        raise ValueError(f"--fit {path!r} is not a fit record of cherry.bench.fit_setting")
    return spec_from_dict(apply_fit(spec.to_dict(), fit))


def _run(args: argparse.Namespace) -> int:
    try:
        spec = load_spec(args.spec)
        if args.fit is not None:
            spec = _fitted(spec, args.fit)
        if os.path.realpath(args.out) == os.path.realpath(args.spec):
            raise SpecError(f"--out {args.out!r} is the spec itself: expected another file for the record")
        check_outputs(args)  # before the run, so its result is not lost at the end
    except (SpecError, ValueError) as exc:
        print(f"cherry.bench.run: {' '.join(str(exc).split())}", file=sys.stderr)
        return EXIT_BAD_SPEC
    apply_process_switches(spec)

    def log(line: str) -> None:
        if not args.quiet:
            print(line, file=sys.stderr, flush=True)

    return execute(spec, args.out, log)


if __name__ == "__main__":
    sys.exit(main())
