"""Shared figure helpers: headless pyplot, panel grids, a system's colour and marker, whiskers, log axes,
a row's labels (`label_row`) and the atomic way out (`save_figure`). `cherry.report.figures`, `cherry.report.wall_figures` and
`cherry.report.planner_figure` draw with these; this module imports no figure module.
"""
from __future__ import annotations

import io
from typing import Optional

import numpy as np


def pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def grid(nrows: int, ncols: int, width: float = 4.6, height: float = 3.4):
    plt = pyplot()
    fig, axes = plt.subplots(max(nrows, 1), ncols, figsize=(width * ncols, height * max(nrows, 1)), squeeze=False)
    return fig, axes


def empty_figure(title: str, why: str):
    fig, axes = grid(1, 1)
    axes[0][0].axis("off")
    axes[0][0].text(0.5, 0.5, f"{title}\n\n{why}", ha="center", va="center")
    return fig


def label_row(row, case: str, xlabels, ylabels, legend_fontsize: int = 7) -> None:
    """Label one row of panels (one case): each panel's x and y label (a string: every panel's; else
    one per panel), the case as every panel's title, and the first panel's legend."""
    xs = [xlabels] * len(row) if isinstance(xlabels, str) else list(xlabels)
    ys = [ylabels] * len(row) if isinstance(ylabels, str) else list(ylabels)
    for ax, xlabel, ylabel in zip(row, xs, ys, strict=True):
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.set_title(case, fontsize=9)
    row[0].legend(fontsize=legend_fontsize)


def system_style(system: str) -> dict:
    from cherry.systems.table import system_entry, system_names

    if system not in system_names():
        return {"color": "#8e44ad", "marker": "o"}
    entry = system_entry(system)
    return {"color": entry.colour, "marker": entry.marker}


def errorbar(ax, xs, stats, **kwargs) -> None:
    pts = [(x, s) for x, s in zip(xs, stats) if s is not None]
    if not pts:
        return
    x = [p[0] for p in pts]
    y = np.array([p[1][0] for p in pts])
    err = np.array([[p[1][0] - p[1][1] for p in pts], [p[1][2] - p[1][0] for p in pts]])
    ax.errorbar(x, y, yerr=np.clip(err, 0, None), capsize=3, **kwargs)


def plain_log_labels(ax) -> None:
    from matplotlib.ticker import FormatStrFormatter, NullFormatter

    ax.yaxis.set_major_formatter(FormatStrFormatter("%g"))
    ax.yaxis.set_minor_formatter(NullFormatter())


def log2_axis(ax, values) -> None:
    ax.set_xscale("log", base=2)
    ticks = sorted(set(int(v) for v in values))
    ax.set_xticks(ticks)
    ax.set_xticklabels([str(v) for v in ticks])
    ax.minorticks_off()


def parse_figure_args(parser, argv):
    """Add ``--png``/``--pdf`` to ``parser``, parse ``argv`` and insist on at least one of them."""
    from cherry.outputs import add_output, parse_checked

    add_output(parser, "--png", default=None)
    add_output(parser, "--pdf", default=None)
    args = parse_checked(parser, argv)
    if not args.png and not args.pdf:
        parser.error("give --png and/or --pdf")
    return args


def save_figure(fig, png: Optional[str], pdf: Optional[str]) -> None:
    """Write ``fig`` atomically as PNG and/or PDF (130 dpi) and close it: every figure's way out."""
    from cherry.io import write_bytes_atomic

    for path, fmt in ((png, "png"), (pdf, "pdf")):
        if path:
            buffer = io.BytesIO()
            fig.savefig(buffer, format=fmt, dpi=130)
            write_bytes_atomic(path, buffer.getvalue())
    pyplot().close(fig)
