"""The README's headline claims about the memory wall, generated from a run's search records.

    python -m cherry.report.headline --readme README.md results/records/searches/*.json

Rewrites the region of the README between `BEGIN` and `END` with the memory-wall verdicts of
``results/summary.md`` (`cherry.report.summary.wall_verdicts`): per case, who stopped because one
seed did not fit, who went on with recomputation, who reached the training set, whose search is a
lower bound. Nothing outside the region changes; a README without exactly one region is refused.
"""
from __future__ import annotations

import argparse
import sys
from typing import Optional

import pandas as pd

BEGIN = ("<!-- generated from records: python -m cherry.report.headline --readme README.md "
         "results/records/searches/*.json -->")
END = "<!-- /generated -->"
LEAD = ("Under each memory-wall case of the last `make run` (each system at its own K; numbers are "
        "the largest batch trained):")


def headline(searches: pd.DataFrame) -> str:
    """The region's Markdown for ``searches`` (`cherry.report.tables.load_searches`), without markers."""
    from cherry.report.summary import wall_verdicts

    verdicts = [line for line in wall_verdicts(searches) if line]
    if not verdicts:
        raise ValueError("the search records hold no memory-wall case to report")
    return "\n".join([LEAD, "", *verdicts])


def region(text: str) -> str:
    """The text between the one `BEGIN` and `END` of ``text`` (ValueError if not exactly one region)."""
    if text.count(BEGIN) != 1 or text.count(END) != 1 or text.index(BEGIN) > text.index(END):
        raise ValueError(f"expected exactly one region from {BEGIN!r} to {END!r}")
    return text[text.index(BEGIN) + len(BEGIN):text.index(END)].strip("\n")


def replace_region(text: str, body: str) -> str:
    """``text`` with its one region's content replaced by ``body``."""
    region(text)  # checks the markers
    return text[:text.index(BEGIN) + len(BEGIN)] + "\n" + body + "\n" + text[text.index(END):]


def main(argv: Optional[list[str]] = None) -> int:
    from cherry.io import write_bytes_atomic
    from cherry.report.tables import load_searches

    parser = argparse.ArgumentParser(prog="python -m cherry.report.headline", description=__doc__.splitlines()[0])
    parser.add_argument("--readme", required=True, help="the Markdown file whose generated region is rewritten")
    parser.add_argument("searches", nargs="+", help="memory-wall search records (cherry.bench.capacity_run)")
    args = parser.parse_args(argv)
    try:
        with open(args.readme) as f:
            text = f.read()
        updated = replace_region(text, headline(load_searches(args.searches)))
    except (OSError, ValueError) as exc:
        print(f"cherry.report.headline: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2
    write_bytes_atomic(args.readme, updated.encode())
    return 0


if __name__ == "__main__":
    from cherry.errors import run_boundary

    sys.exit(run_boundary("cherry.report.headline", main))
