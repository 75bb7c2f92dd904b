"""Do two workflow runs agree on their verdicts?

    python -m cherry.report.compare_verdicts A/summary.json B/summary.json

Reads the ratio files that ``python -m cherry.report.summary --json`` writes (``results/summary.json``
in the workflow) and prints, per timed ratio (matched by its key), the ratio with its interval and
verdict in each run and whether the verdicts agree, then one line counting them. A ratio present in
only one file is listed as missing there and counts as a disagreement. Exit status: 0 if every
verdict agrees, 1 otherwise, 2 for an unreadable file.
"""
from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from typing import Optional


@dataclass(frozen=True)
class Comparison:
    """One ratio in two runs (None where a run lacks it)."""

    key: str
    first: Optional[dict]
    second: Optional[dict]

    @property
    def agree(self) -> bool:
        return self.first is not None and self.second is not None and self.first["verdict"] == self.second["verdict"]


def load_ratios(path: str) -> dict[str, dict]:
    """``{key: ratio}`` of one summary JSON (ValueError with one line if it is not one)."""
    from cherry.io import read_json

    data = read_json(path, "summary ratios")
    ratios = data.get("ratios") if isinstance(data, dict) else None
    if not isinstance(ratios, list):
        raise ValueError(f"{path!r} has no 'ratios' list: expected the --json output of cherry.report.summary")
    out: dict[str, dict] = {}
    for i, ratio in enumerate(ratios):
        if not isinstance(ratio, dict) or not {"key", "value", "low", "high", "verdict"} <= set(ratio):
            raise ValueError(f"{path!r}: ratios[{i}] lacks key, value, low, high or verdict")
        if ratio["key"] in out:
            raise ValueError(f"{path!r}: ratio {ratio['key']!r} appears twice: expected each key once")
        out[ratio["key"]] = ratio
    return out


def compare(first: dict[str, dict], second: dict[str, dict]) -> list[Comparison]:
    """Every key of either run, in the first run's order, then the second's new keys."""
    keys = list(first) + [k for k in second if k not in first]
    return [Comparison(k, first.get(k), second.get(k)) for k in keys]


def _cell(ratio: Optional[dict]) -> str:
    if ratio is None:
        return "missing"
    return f"{ratio['value']:.3g} [{ratio['low']:.3g}, {ratio['high']:.3g}] {ratio['verdict']}"


def render(comparisons: list[Comparison], names: tuple[str, str]) -> str:
    lines = [f"| ratio | {names[0]} | {names[1]} | agree |", "|---|---|---|---|"]
    lines += [f"| {c.key} | {_cell(c.first)} | {_cell(c.second)} | {'yes' if c.agree else 'NO'} |"
              for c in comparisons]
    agreed = sum(c.agree for c in comparisons)
    lines.append(f"{agreed} of {len(comparisons)} verdicts agree")
    return "\n".join(lines) + "\n"


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m cherry.report.compare_verdicts",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("first", help="summary.json of one workflow run")
    parser.add_argument("second", help="summary.json of another")
    args = parser.parse_args(argv)
    try:
        comparisons = compare(load_ratios(args.first), load_ratios(args.second))
    except ValueError as exc:
        print(f"cherry.report.compare_verdicts: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2
    sys.stdout.write(render(comparisons, (args.first, args.second)))
    return 0 if all(c.agree for c in comparisons) else 1


if __name__ == "__main__":
    from cherry.errors import run_boundary

    sys.exit(run_boundary("cherry.report.compare_verdicts", main))
