"""The "redundancy per degree law" figure, drawn from `cherry bench planner --json` output alone.

    python -m cherry.report.planner_figure planner.json --png OUT.png [--pdf OUT.pdf]

One panel per (batch size, graph): input-layer redundancy against K (log2 axis), one line per
planner (cherry, contiguous, random, Betty, Buffalo); the legend of the first panel carries each
planner's median planning time over the whole file. Files are written atomically (Agg backend).
"""
from __future__ import annotations

import argparse
import statistics
import sys
from typing import Optional

from cherry.report.plotting import log2_axis as _log2_axis
from cherry.report.plotting import pyplot as _plt
from cherry.report.plotting import parse_figure_args, save_figure, system_style

EXTRA_STYLES = {"contiguous": ("#e59866", "x"), "random": ("#7f8c8d", "v")}
REQUIRED = ("graph", "batch_size", "k", "system", "redundancy_input", "plan_ms")


def _style(system: str) -> dict:
    style = system_style(system)
    color, marker = EXTRA_STYLES.get(system, (style["color"], style["marker"]))
    return {"color": color, "marker": marker}


def check_rows(rows: object) -> list[dict]:
    """Raise unless ``rows`` is a non-empty list of planner rows with every `REQUIRED` key."""
    if not isinstance(rows, list) or not rows:
        raise ValueError("planner rows must be a non-empty list of dicts (the 'rows' of bench planner --json)")
    for i, row in enumerate(rows):
        missing = [k for k in REQUIRED if not isinstance(row, dict) or k not in row]
        if missing:
            raise ValueError(f"planner row {i} lacks {', '.join(missing)}")
    return rows


def draw_redundancy_per_degree_law(rows: list[dict]):
    """The figure (a matplotlib Figure) of `check_rows`-valid ``rows``."""
    rows = check_rows(rows)
    graphs = list(dict.fromkeys(r["graph"] for r in rows))
    batches = sorted({int(r["batch_size"]) for r in rows})
    systems = list(dict.fromkeys(r["system"] for r in rows))
    plt = _plt()
    fig, axes = plt.subplots(len(batches), len(graphs), figsize=(3.6 * len(graphs), 3.0 * len(batches)),
                             squeeze=False, sharex=True)
    for i, batch in enumerate(batches):
        for j, graph in enumerate(graphs):
            ax = axes[i][j]
            cell = [r for r in rows if r["graph"] == graph and int(r["batch_size"]) == batch]
            for system in systems:
                pts = sorted((int(r["k"]), float(r["redundancy_input"])) for r in cell if r["system"] == system)
                if not pts:
                    continue
                ms = statistics.median(float(r["plan_ms"]) for r in rows if r["system"] == system)
                ax.plot([p[0] for p in pts], [p[1] for p in pts], label=f"{system} ({ms:.0f} ms)", **_style(system))
            if cell:
                _log2_axis(ax, [r["k"] for r in cell])
            ax.set_title(f"{graph}, batch {batch}", fontsize=9)
            ax.grid(alpha=0.3)
            if j == 0:
                ax.set_ylabel("input redundancy")
            if i == len(batches) - 1:
                ax.set_xlabel("micro-batches K")
    axes[0][0].legend(fontsize=7, title="median planning time", title_fontsize=7)
    fig.tight_layout()
    return fig


def render(rows: list[dict], png: Optional[str] = None, pdf: Optional[str] = None) -> None:
    """Draw the figure of ``rows`` and write it atomically as PNG and/or PDF."""
    if not png and not pdf:
        raise ValueError("give a png and/or a pdf path")
    save_figure(draw_redundancy_per_degree_law(rows), png, pdf)


def main(argv: Optional[list[str]] = None) -> int:
    from cherry.io import read_json

    parser = argparse.ArgumentParser(prog="python -m cherry.report.planner_figure", description=__doc__.splitlines()[0])
    parser.add_argument("json", help="output of cherry bench planner --json")
    args = parse_figure_args(parser, argv)
    try:
        data = read_json(args.json, "planner benchmark output")
        render(data.get("rows") if isinstance(data, dict) else data, args.png, args.pdf)
    except ValueError as exc:
        print(f"cherry.report.planner_figure: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    from cherry.errors import run_boundary

    sys.exit(run_boundary("cherry.report.planner_figure", main))
