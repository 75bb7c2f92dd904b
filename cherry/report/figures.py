"""The benchmark's figures, drawn from the run table (``results/records/runs.csv``) alone.

    python -m cherry.report.figures NAME --table runs.csv --png OUT.png --pdf OUT.pdf

NAME is one of `FIGURES`; ``--searches`` (the memory wall's search records) and ``--data-info``
(`cherry data info` outputs, for steps per epoch) feed the capacity figures (`cherry.report.wall_figures`). Every figure has one row of panels per setting ("case") found in the
table; points are medians over repeats with 10-90 % whiskers over the pooled measured steps (time)
or min-max over repeats (memory); out-of-memory runs are drawn as crosses, never as values. A
figure whose experiment has no rows says so in the picture instead of failing. Files are written
atomically; matplotlib runs headless (Agg).
"""
from __future__ import annotations

import argparse
import sys
from typing import Callable, Optional

import numpy as np
import pandas as pd

from cherry.bench.phases import SENSITIVITY_AXES
from cherry.report import tables as t
from cherry.report.plotting import empty_figure as _empty
from cherry.report.plotting import errorbar as _errorbar
from cherry.report.plotting import grid as _grid
from cherry.report.plotting import label_row as _label_row
from cherry.report.plotting import log2_axis as _log2_axis
from cherry.report.plotting import parse_figure_args
from cherry.report.plotting import plain_log_labels as _plain_log_labels
from cherry.report.plotting import pyplot as _plt
from cherry.report.plotting import save_figure
from cherry.report.plotting import system_style as _style
from cherry.systems.table import subject_system


def _series(rows: pd.DataFrame):
    """(system, k, label, rows) per system and K, in the table's order; the label is the systems
    table's display label."""
    for (system, k), group in rows.groupby(["system", "k"], sort=False):
        yield system, k, t.system_label(system, k, display=True), group


def _mib(stats):
    return None if stats is None else tuple(v / t.MIB for v in stats)


def _by_case(rows: pd.DataFrame):
    for case in dict.fromkeys(rows["case"]):
        yield case, rows[rows["case"] == case]


def _no_runs(title: str, figure: str):
    """The picture of a figure whose phases have no runs in the table."""
    from cherry.bench.phases import phases_of_figure

    return _empty(title, f"no {' or '.join(phases_of_figure(figure)) or figure} runs in the table")


def _k_lines(frame: pd.DataFrame, figure: str, title: str, ylabel: str,
             value: Callable[[pd.DataFrame], Optional[tuple]], reference_line: bool, yline: Optional[float] = None):
    rows = t.rows_of_figure(frame, figure)
    if rows.empty:
        return _no_runs(title, figure)
    cases = list(_by_case(rows))
    fig, axes = _grid(len(cases), 1, width=6.4)
    for i, (case, group) in enumerate(cases):
        ax = axes[i][0]
        ks = [int(k) for k in group["k"] if k.isdigit()]
        for system, series in group.groupby("system", sort=False):
            series = series[series["k"].str.isdigit()]
            if series.empty:
                continue
            if t.is_whole_batch_system(system):
                stats = value(series)
                if reference_line and stats is not None:
                    color = _style(system)["color"]
                    ax.axhline(stats[0], color=color, lw=1.2, label=f"{t.display_label(system)} (K=1)")
                    ax.axhspan(stats[1], stats[2], color=color, alpha=0.1)
                continue
            xs = sorted(set(int(v) for v in series["k"]))
            _errorbar(ax, xs, [value(series[series["k"] == str(x)]) for x in xs], label=t.display_label(system),
                      **_style(system))
        if yline is not None:
            ax.axhline(yline, color="#999999", lw=0.8, ls=":")
        if ks:
            _log2_axis(ax, ks)
        _label_row(axes[i], case, "micro-batches K", ylabel, legend_fontsize=8)
    return fig


def draw_microbatch_cost(frame: pd.DataFrame):
    return _k_lines(frame, "microbatch_cost", "Cost of micro-batching", "step time (s)", t.step_time_stats, True)


def draw_redundancy(frame: pd.DataFrame):
    return _k_lines(frame, "redundancy", "Redundancy", "input-layer redundancy",
                    lambda rows: t.column_stats(rows, "redundancy_input"), False, yline=1.0)


def draw_breakdown(frame: pd.DataFrame):
    rows = t.rows_of_figure(frame, "breakdown")
    if rows.empty:
        return _no_runs("Time breakdown", "breakdown")
    cases = list(_by_case(rows))
    fig, axes = _grid(len(cases), 1, width=7.0)
    colors = _plt().get_cmap("tab10")
    for i, (case, group) in enumerate(cases):
        ax = axes[i][0]
        labels, medians = [], []
        for system, k, label, series in _series(group):
            if t.statuses(series) == "ok":
                labels.append(label)
                medians.append(t.phase_medians(series))
        bottom = np.zeros(len(labels))
        for j, phase in enumerate(t.PHASES):
            heights = np.array([m[phase] for m in medians])
            ax.bar(labels, heights, bottom=bottom, label=phase, color=colors(j))
            bottom += heights
        ax.set_ylabel("median seconds per step")
        ax.set_title(case, fontsize=9)
        ax.legend(fontsize=7, ncol=2)
        ax.tick_params(axis="x", labelrotation=20, labelsize=8)
    return fig


def _epoch_curve(series: pd.DataFrame, column: str) -> list[float]:
    curves = [list(v) for v in t.ok_rows(series)[column] if len(v)]
    if not curves:
        return []
    n = min(len(c) for c in curves)
    return [float(np.median([c[e] for c in curves if c[e] is not None] or [np.nan])) for e in range(n)]


def draw_convergence(frame: pd.DataFrame):
    rows = t.rows_of_figure(frame, "convergence")
    if rows.empty:
        return _no_runs("Convergence", "convergence")
    cases = list(_by_case(rows))
    fig, axes = _grid(len(cases), 2, width=5.2)
    for i, (case, group) in enumerate(cases):
        for system, k, label, series in _series(group):
            style = {**_style(system), "markersize": 4, "alpha": 0.85}
            for ax, column in ((axes[i][0], "epoch_valid_acc"), (axes[i][1], "epoch_losses")):
                curve = _epoch_curve(series, column)
                if curve:
                    ax.plot(range(1, len(curve) + 1), curve, label=label, **style)
        _label_row(axes[i], case, "epoch", ("validation accuracy", "training loss (epoch mean)"))
    return fig


def _axis_value(row, axis: str):
    return {"aggr": t.model_label(row), "layers": int(row["num_layers"]), "hidden": int(row["hidden"]),
            "fanout": str(row["fanouts"])}[axis]


def draw_sensitivity(frame: pd.DataFrame):
    rows = t.rows_of_figure(frame, "sensitivity")
    if rows.empty:
        return _no_runs("Sensitivity", "sensitivity")
    axes_names = [a for a in SENSITIVITY_AXES if a in set(rows["axis"])]
    datasets = list(dict.fromkeys(rows["dataset"]))
    fig, axes = _grid(2 * len(datasets), len(axes_names), width=4.0)
    for d, dataset in enumerate(datasets):
        for j, axis in enumerate(axes_names):
            group = rows[(rows["dataset"] == dataset) & (rows["axis"] == axis)]
            group = group.assign(value=[_axis_value(r, axis) for _, r in group.iterrows()])
            values = list(dict.fromkeys(group["value"]))
            time_ax, mem_ax = axes[2 * d][j], axes[2 * d + 1][j]
            for system, k, label, series in _series(group):
                xs = list(range(len(values)))
                subs = [series[series["value"] == v] for v in values]
                _errorbar(time_ax, xs, [t.step_time_stats(s) for s in subs], label=label, **_style(system))
                _errorbar(mem_ax, xs, [_mib(t.column_stats(s, "peak_tracked_bytes")) for s in subs], label=label,
                          **_style(system))
                for x, s in zip(xs, subs):
                    if t.statuses(s) == "oom":
                        time_ax.scatter([x], [0], marker="x", color=_style(system)["color"])
            budget = group[group["system"] == subject_system()]["budget_bytes"].dropna()
            if len(budget):
                mem_ax.axhline(float(budget.iloc[0]) / t.MIB, ls="--", color="#555555", lw=1,
                               label=f"{t.display_label(subject_system())} budget")
            for ax in (time_ax, mem_ax):
                ax.set_xticks(range(len(values)))
                ax.set_xticklabels([str(v) for v in values])
                ax.set_xlabel(axis)
            time_ax.set_title(f"{dataset}: {axis}", fontsize=9)
            time_ax.set_ylabel("step time (s)")
            mem_ax.set_ylabel("peak tensor memory (MiB)")
            mem_ax.set_yscale("log")
            _plain_log_labels(mem_ax)
        axes[2 * d][0].legend(fontsize=7)
        axes[2 * d + 1][0].legend(fontsize=7)
    return fig


def draw_ablation(frame: pd.DataFrame):
    from matplotlib.colors import to_rgba

    rows = t.rows_of_figure(frame, "ablation")
    if rows.empty:
        return _no_runs("Ablation", "ablation")
    rows = rows.assign(case=[f"{c} K={k}" for c, k in zip(rows["case"], rows["k"])])
    cases = list(_by_case(rows))
    colour = _style(subject_system())["color"]  # the ablation varies the subject's own options
    fig, axes = _grid(len(cases), 3, width=4.6, height=3.8)
    panels = (("step time (s)", t.step_time_stats), ("peak tensor memory (MiB)",
              lambda s: _mib(t.column_stats(s, "peak_tracked_bytes"))),
              ("input-layer redundancy", lambda s: t.column_stats(s, "redundancy_input")))
    for i, (case, group) in enumerate(cases):
        variants = list(dict.fromkeys(group["variant"]))
        for j, (ylabel, value) in enumerate(panels):
            ax = axes[i][j]
            stats = [value(group[group["variant"] == v]) for v in variants]
            heights = [s[0] if s else 0.0 for s in stats]
            err = np.array([[s[0] - s[1] if s else 0 for s in stats], [s[2] - s[0] if s else 0 for s in stats]])
            colors = [to_rgba(colour, 1.0 if v == "all on" else 0.4) for v in variants]  # the subject's colour
            ax.bar(range(len(variants)), heights, yerr=np.clip(err, 0, None), capsize=3, color=colors)
            ax.set_xticks(range(len(variants)))
            ax.set_xticklabels(variants, rotation=35, ha="right", fontsize=7)
            ax.set_ylabel(ylabel)
            ax.set_title(case, fontsize=8)
    fig.tight_layout()
    return fig


def draw_estimator(frame: pd.DataFrame):
    rows = t.estimator_rows(frame)
    if rows.empty:
        return _empty("Memory estimator",
                      f"no {subject_system()} training-only runs with an estimated and a measured peak")
    fig, axes = _grid(1, 1, width=5.6, height=4.8)
    ax = axes[0][0]
    colors = _plt().get_cmap("tab10")
    for j, (experiment, group) in enumerate(rows.groupby("experiment", sort=False)):
        ax.scatter(group["peak_tracked_bytes"] / t.MIB, group["estimated_peak_bytes"] / t.MIB, s=18,
                   color=colors(j), label=experiment, alpha=0.8)
    lo = float(min(rows["peak_tracked_bytes"].min(), rows["estimated_peak_bytes"].min())) / t.MIB
    hi = float(max(rows["peak_tracked_bytes"].max(), rows["estimated_peak_bytes"].max())) / t.MIB
    ax.plot([lo / 1.5, hi * 1.5], [lo / 1.5, hi * 1.5], ls="--", color="#555555", lw=1, label="y = x")
    # per step (estimate of the step's plan vs that step's peak), measured steps only: see the summary
    rel = rows["estimator_step_rel_error"].median() if "estimator_step_rel_error" in rows else float("nan")
    ax.set_xscale("log")
    ax.set_yscale("log")
    _plain_log_labels(ax)
    ax.set_xlabel("measured peak tensor memory of the run (MiB)")
    ax.set_ylabel("estimated peak of the largest micro-batch (MiB)")
    ax.set_title(f"{len(rows)} {subject_system()} runs (no evaluation); median per-step |estimated - measured| / "
                 f"measured = {rel:.2f}", fontsize=9)
    ax.legend(fontsize=7)
    return fig


def _memory_wall(frame, searches, sizes):
    from cherry.report.wall_figures import draw_memory_wall

    return draw_memory_wall(searches)


def _epoch_time(frame, searches, sizes):
    from cherry.report.wall_figures import draw_epoch_time

    return draw_epoch_time(frame, sizes)


def _accuracy_cap(frame, searches, sizes):
    from cherry.report.accuracy_cap import draw_accuracy_cap

    return draw_accuracy_cap(frame)


def _table_only(draw: Callable[[pd.DataFrame], object]):
    return lambda frame, searches, sizes: draw(frame)


# name -> draw(run table, memory-wall searches, {dataset: training-set size}). Which runs each figure
# reads is the experiment table (cherry.bench.phases: a phase's `figures`); a draw function takes its
# rows with `tables.rows_of_figure(frame, name)`.
Draw = Callable[[pd.DataFrame, pd.DataFrame, dict], object]
FIGURES: dict[str, Draw] = {
    "memory_wall": _memory_wall, "microbatch_cost": _table_only(draw_microbatch_cost),
    "redundancy": _table_only(draw_redundancy), "breakdown": _table_only(draw_breakdown),
    "convergence": _table_only(draw_convergence), "sensitivity": _table_only(draw_sensitivity),
    "ablation": _table_only(draw_ablation), "estimator": _table_only(draw_estimator), "epoch_time": _epoch_time,
    "accuracy_cap": _accuracy_cap,
}


def register_figure(name: str, draw: Callable[[pd.DataFrame], object], *, searches_and_sizes: bool = False) -> None:
    """Add figure ``name`` (the name a phase's ``figures`` lists): ``draw(frame)`` returns a matplotlib
    figure, or ``draw(frame, searches, sizes)`` with ``searches_and_sizes``. ValueError if the name is
    taken, TypeError if ``draw`` is not callable."""
    from cherry.bench.phases import check_new_entry

    check_new_entry("figure", name, FIGURES, draw)
    FIGURES[name] = draw if searches_and_sizes else _table_only(draw)


def render(name: str, frame: pd.DataFrame, png: Optional[str], pdf: Optional[str],
           searches: Optional[pd.DataFrame] = None, sizes: Optional[dict] = None) -> None:
    """Draw figure ``name`` from ``frame`` (and the memory wall's ``searches``, the datasets' training-set
    ``sizes``) and write it (atomically) as PNG and/or PDF."""
    if name not in FIGURES:
        raise ValueError(f"unknown figure {name!r}; expected one of: {', '.join(FIGURES)}")
    searches = t.load_searches([]) if searches is None else searches
    fig = FIGURES[name](frame, searches, sizes or {})
    if not fig.get_tight_layout():
        fig.tight_layout()
    save_figure(fig, png, pdf)


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m cherry.report.figures", description="draw one figure")
    parser.add_argument("name", choices=sorted(FIGURES))
    t.add_report_inputs(parser)
    args = parse_figure_args(parser, argv)
    try:
        frame, searches, sizes = t.read_report_inputs(args)
    except ValueError as exc:
        print(f"cherry.report.figures: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2
    render(args.name, frame, args.png, args.pdf, searches, sizes)
    return 0


if __name__ == "__main__":
    from cherry.errors import run_boundary

    sys.exit(run_boundary("cherry.report.figures", main))
