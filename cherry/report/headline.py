"""The README's headline claims, generated from a run's records into marked regions.

    python -m cherry.report.headline --readme README.md results/records/searches/*.json
    python -m cherry.report.headline --region real --readme README.md --table T S... --verify V...
    python -m cherry.report.headline --region budget --readme README.md results/bench/budget.json

Each region lies between its own opening marker, which names the command that writes it, and
`END`. The ``wall`` region holds the memory-wall verdicts of ``make run``'s ``results/summary.md``
(`cherry.report.summary.wall_verdicts`): per case, who stopped because one seed did not fit, who
went on with recomputation, who reached the training set, whose search is a lower bound. The
``real`` region holds the same for ``make run-real``, plus its accuracy-under-a-cap verdicts, the
cases whose Cherry steps streamed their input layer, and the largest gradient difference of its
`cherry verify` checks. The ``budget`` region holds the targets of `cherry bench budget` from
its ``--json`` record. Nothing outside the region changes; a page without exactly one such region
is refused.
"""
from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from typing import Callable, Optional

import pandas as pd

END = "<!-- /generated -->"
LEAD = ("Under each memory-wall case of the last `make run` (each system at its own K; numbers are "
        "the largest batch trained):")
REAL_LEAD = ("Under each real graph's capacity in the last `make run-real` (each system at its own K; numbers "
             "are the largest batch trained):")


@dataclass(frozen=True)
class RegionInputs:
    """What a region reads: the memory wall's searches, the run table (or None) and the paths of the
    `cherry verify --json` records."""

    searches: pd.DataFrame
    runs: Optional[pd.DataFrame]
    verify_paths: tuple[str, ...]


@dataclass(frozen=True)
class Region:
    """One generated region: ``begin`` is its opening marker (it names the command that rewrites it);
    ``write(args)`` returns its Markdown without markers from the command's parsed arguments;
    ``needs_table``: the run table is required."""

    begin: str
    write: Callable[[argparse.Namespace], str]
    needs_table: bool


def headline(searches: pd.DataFrame) -> str:
    """The ``wall`` region's Markdown for ``searches`` (`cherry.report.tables.load_searches`)."""
    return "\n".join([LEAD, "", *_verdicts(searches)])


def _verdicts(searches: pd.DataFrame) -> list[str]:
    from cherry.report.summary import wall_verdicts

    verdicts = [line for line in wall_verdicts(searches) if line]
    if not verdicts:
        raise ValueError("the search records hold no memory-wall case to report")
    return verdicts


def accuracy_verdicts(runs: pd.DataFrame) -> list[str]:
    """One line per accuracy-under-a-cap case: each setting's best-validation test accuracy, mean
    [min, max] over its ok seeds, and the verdict against the subject (`cherry.report.accuracy_cap`)."""
    from cherry.report.accuracy_cap import final_stats, settings, verdict
    from cherry.systems.table import subject_system

    found = settings(runs)
    subject = {case: final_stats(rows) for case, _, rows in found
               if rows.iloc[0]["system"] == subject_system() and rows.iloc[0]["axis"] == "own_k"}
    cases: dict[str, list[str]] = {}
    for case, label, rows in found:
        stats = final_stats(rows)
        acc = "no seed finished" if stats is None else (
            f"{stats[0]:.3f} [{stats[1]:.3f}, {stats[2]:.3f}] over {stats[3]} of {len(rows)} seeds")
        mine = rows.iloc[0]["system"] == subject_system() and rows.iloc[0]["axis"] == "own_k"
        said = "" if mine else verdict(stats, subject.get(case))
        cases.setdefault(case, []).append(f"{label}: {acc}" + (f" ({said})" if said not in ("", "-") else ""))
    return [f"- Accuracy under a fixed device, {case}: " + "; ".join(parts) + "." for case, parts in cases.items()]


def verify_verdict(paths: tuple[str, ...]) -> list[str]:
    """One line: the largest relative gradient difference over the `cherry verify` records, per check."""
    from pathlib import Path

    from cherry.bench.verify_record import read_verify_record

    found = []
    for path in paths:
        v = read_verify_record(path)
        found.append(f"{Path(path).stem} {v.max_rel_diff:.1e} at K = {v.num_microbatches}")
    return ["- `cherry verify`, largest relative gradient difference against the whole batch: "
            + ", ".join(found) + "."] if found else []


def real_headline(inputs: RegionInputs) -> str:
    """The ``real`` region's Markdown: wall verdicts, accuracy verdicts, streaming, gradient checks."""
    from cherry.report.summary import streamed_note

    runs = inputs.runs if inputs.runs is not None else pd.DataFrame()
    streamed = [line for line in streamed_note(runs) if line] if not runs.empty else []
    lines = [REAL_LEAD, "", *_verdicts(inputs.searches), *accuracy_verdicts(runs),
             *(f"- {line}" for line in streamed), *verify_verdict(inputs.verify_paths)]
    return "\n".join(lines)


def budget_headline(bench: dict) -> str:
    """The ``budget`` region's Markdown: the targets of `cherry bench budget` against its ``--json``
    record (``rows``, ``summary``), the rows of models the memory model does not know (``user_model``) apart."""
    rows, total = bench["rows"], bench["summary"]
    if not rows:
        raise ValueError("the budget record holds no row")
    mine = [r for r in rows if r.get("user_model")]  # priced by probes: models the memory model does not know

    def most(key, among):
        return max((r[key] for r in among if r[key] is not None), default=None)

    top = max(rows, key=lambda r: r["peak_over_budget"] or 0)
    jumps = [r for r in rows if r["k_unforced_jumps"]]
    user_peak = f"; users' models at most {most('peak_over_budget', mine):.3f}" if mine else ""
    user_k = f"; users' models at most {most('k_over_smallest_median', mine):.2f}" if mine else ""
    table = [
        "| target | result |", "| --- | --- |",
        f"| aborted / refused steps (0) | {total['aborted_steps']} / {total['refused_steps']} over {len(rows)} "
        f"configuration-capacity rows; recomputation on {_rows(total['recompute_rows'])} |",
        f"| largest peak over the budget (<= 1.0) | {top['peak_over_budget']:.3f} ({top['config']}, "
        f"{top['peak_over_capacity']:.3f} of the capacity){user_peak} |",
        f"| chosen K over the smallest fitting K, median (<= 1.25) | {total['k_over_smallest_median']:.2f} (largest "
        f"row median {most('k_over_smallest_median', rows):.2f}{user_k}) |",
        f"| K more than doubling without the batch forcing it (0) | {total['k_unforced_jumps']} steps on "
        f"{_rows(len(jumps))} |",
        f"| estimator error per micro-batch, median of rows | {total['estimator_error_median']:.3f} |",
    ]
    return "\n".join(table)


def _rows(count: int) -> str:
    return f"{count} row{'' if count == 1 else 's'}"


def _budget_record(args: argparse.Namespace) -> dict:
    import json

    if len(args.records) != 1:
        raise ValueError(f"--region budget reads one `cherry bench budget --json` record, got {len(args.records)}")
    with open(args.records[0]) as f:
        record = json.load(f)
    if not isinstance(record, dict) or not {"rows", "summary"} <= set(record):
        raise ValueError(f"{args.records[0]}: not a `cherry bench budget --json` record (expected rows and summary)")
    return record


def _inputs(args: argparse.Namespace) -> RegionInputs:
    from cherry.report.tables import load_searches, load_table

    return RegionInputs(load_searches(args.records), None if args.table is None else load_table(args.table),
                        tuple(args.verify))


REGIONS: dict[str, Region] = {
    "wall": Region("<!-- generated from records: python -m cherry.report.headline --readme README.md "
                   "results/records/searches/*.json -->", lambda a: headline(_inputs(a).searches), needs_table=False),
    "real": Region("<!-- generated from records: python -m cherry.report.headline --region real --readme README.md "
                   "--table results/real/results/records/runs.csv results/real/results/records/searches/*.json "
                   "--verify results/real/results/verify/*.json -->", lambda a: real_headline(_inputs(a)),
                   needs_table=True),
    "budget": Region("<!-- generated from records: python -m cherry.report.headline --region budget --readme README.md "
                     "results/bench/budget.json -->", lambda a: budget_headline(_budget_record(a)), needs_table=False),
}
BEGIN = REGIONS["wall"].begin


def region(text: str, begin: str = BEGIN) -> str:
    """The text between the one ``begin`` and the `END` after it (ValueError if not exactly one region)."""
    if text.count(begin) != 1 or text.find(END, text.find(begin)) < 0:
        raise ValueError(f"expected exactly one region from {begin!r} to {END!r}")
    start = text.index(begin) + len(begin)
    return text[start:text.index(END, start)].strip("\n")


def replace_region(text: str, body: str, begin: str = BEGIN) -> str:
    """``text`` with its one ``begin`` region's content replaced by ``body``."""
    region(text, begin)  # checks the markers
    start = text.index(begin) + len(begin)
    return text[:start] + "\n" + body + "\n" + text[text.index(END, start):]


def parser() -> argparse.ArgumentParser:
    """The command's arguments; each region's marker names them in an order this parser reads."""
    parser = argparse.ArgumentParser(prog="python -m cherry.report.headline", description=__doc__.splitlines()[0])
    parser.add_argument("--readme", required=True, help="the Markdown file whose generated region is rewritten")
    parser.add_argument("--region", choices=sorted(REGIONS), default="wall", help="which region to rewrite")
    parser.add_argument("--table", default=None, help="the run table (results/records/runs.csv); the real region's")
    parser.add_argument("--verify", nargs="*", default=[], help="`cherry verify --json` records (real region)")
    parser.add_argument("records", nargs="+", help="memory-wall search records (cherry.bench.capacity_run); for "
                        "--region budget, the `cherry bench budget --json` record")
    return parser


def main(argv: Optional[list[str]] = None) -> int:
    from cherry.io import write_bytes_atomic

    args = parser().parse_args(argv)
    chosen = REGIONS[args.region]
    if chosen.needs_table and args.table is None:
        parser().error(f"--region {args.region} needs --table (the run's results/records/runs.csv)")
    try:
        with open(args.readme) as f:
            text = f.read()
        updated = replace_region(text, chosen.write(args), chosen.begin)
    except (OSError, ValueError) as exc:
        print(f"cherry.report.headline: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2
    write_bytes_atomic(args.readme, updated.encode())
    return 0


if __name__ == "__main__":
    from cherry.errors import run_boundary

    sys.exit(run_boundary("cherry.report.headline", main))
