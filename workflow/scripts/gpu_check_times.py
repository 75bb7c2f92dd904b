"""Seconds per section of ``gpu_check.sh --on-cpu``, over repeated runs, as the table of docs/gpu.md.

    python workflow/scripts/gpu_check_times.py [--repeats 3]

Runs the check ``--repeats`` times one after the other (each in its own output folder), reads each
run's summary.txt and prints, per section: its budget, the median seconds [min, max] over the runs, and
the headroom (budget less the slowest run: what is left there for the CUDA context and the GPU work).
Exits 1, printing the failed run's summary, if a run did not pass.
"""
from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

SCRIPT = Path(__file__).resolve().parent / "gpu_check.sh"
_LINE = re.compile(r"^(?P<name>[a-z0-9-]+) +(?P<status>\S+) +(?P<seconds>\d+)s +(?P<budget>\d+)s$")


def section_seconds(summary: str) -> dict[str, tuple[str, int, int]]:
    """``section -> (status, seconds, budget)`` from a summary.txt's section lines."""
    found = {}
    for line in summary.splitlines():
        match = _LINE.match(line.rstrip())
        if match:
            found[match["name"]] = (match["status"], int(match["seconds"]), int(match["budget"]))
    return found


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args(argv)
    if args.repeats < 1:
        p.error(f"--repeats must be a positive integer, got {args.repeats}")
    runs = []
    for _ in range(args.repeats):
        with tempfile.TemporaryDirectory() as out:
            proc = subprocess.run(["bash", str(SCRIPT), "--on-cpu"], env={**os.environ, "OUT": out},
                                  capture_output=True, text=True)
            summary = (Path(out) / "summary.txt").read_text()
        if proc.returncode != 0:
            print(summary)
            return 1
        runs.append((summary.splitlines()[0], section_seconds(summary)))
    print("\n".join(first for first, _ in runs))
    print("| section | budget s | `--on-cpu` s, median [min, max] | headroom s |\n| --- | ---: | --- | ---: |")
    for name, (_, _, budget) in runs[0][1].items():
        seconds = [sections[name][1] for _, sections in runs]
        print(f"| `{name}` | {budget} | {statistics.median(seconds):g} [{min(seconds)}, {max(seconds)}] "
              f"| {budget - max(seconds)} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
