"""The figures of the device capacity: the memory wall (from its searches) and time per epoch.

`draw_memory_wall(searches)` draws, per case, each system's probes of the largest-batch search
(`cherry.bench.capacity_run`). Peak tensor memory is drawn against batch size for the batches that
fit (a ring where the probe trained with recomputation). Each batch that did not fit is a cross on
the capacity line (a star where one seed per micro-batch did not fit, so no K could). The K chosen at
the largest fitting batch is shown, and a bar per system with the largest batch found and what
stopped it.
`draw_epoch_time(frame, sizes)` draws, per case, the seconds per epoch (median step seconds x ceil(training-set size / batch size), 10-90 % whiskers over
the measured steps) against the emulated capacity, each system at its own K; an out-of-memory run is a
cross at the bottom of its capacity's column. Both are read by `cherry.report.figures`.
"""
from __future__ import annotations

import pandas as pd

from cherry.report import tables as t
from cherry.report.plotting import empty_figure as _empty
from cherry.report.plotting import errorbar as _errorbar
from cherry.report.plotting import grid as _grid
from cherry.report.plotting import log2_axis as _log2_axis
from cherry.report.plotting import system_style as _style


def draw_memory_wall(searches: pd.DataFrame):
    if searches.empty:
        return _empty("Memory wall", "no memory-wall searches")
    cases = list(dict.fromkeys(searches["case"]))
    fig, axes = _grid(len(cases), 2, width=5.4)
    for i, case in enumerate(cases):
        group, ax, bar_ax = searches[searches["case"] == case], axes[i][0], axes[i][1]
        capacity = group["device_memory_bytes"].dropna()
        cap_mib = float(capacity.iloc[0]) / t.MIB if len(capacity) else None
        batches = []
        for r in group.itertuples():
            style, label = _style(r.system), t.system_label(r.system, r.k, display=True)
            fitted = sorted((p["batch_size"], p["peak_tracked_bytes"] / t.MIB) for p in r.probes
                            if p["status"] == "ok" and p["peak_tracked_bytes"] is not None)
            failed = [p["batch_size"] for p in r.probes if p["status"] == "oom" and not p.get("oom_single_seed")]
            single = [p["batch_size"] for p in r.probes if p["status"] == "oom" and p.get("oom_single_seed")]
            recomputed = [(b, m) for b, m in fitted if any(p["batch_size"] == b and p.get("recompute_steps")
                                                           for p in r.probes)]
            batches += [p["batch_size"] for p in r.probes]
            # a system with no fitting probe still gets its legend entry (its crosses and stars are drawn)
            ax.plot([b for b, _ in fitted], [m for _, m in fitted], label=label, **style)
            if recomputed:  # hollow rings: these probes trained with recomputation
                ax.scatter([b for b, _ in recomputed], [m for _, m in recomputed], marker="o", s=90,
                           facecolors="none", edgecolors=style["color"], zorder=6)
            if failed and cap_mib is not None:
                ax.scatter(failed, [cap_mib] * len(failed), marker="x", s=60, color=style["color"], zorder=5)
            if single and cap_mib is not None:  # no K fits these batches: one seed alone is too large
                ax.scatter(single, [cap_mib] * len(single), marker="*", s=110, color=style["color"], zorder=5)
            if r.k_at_largest is not None and not pd.isna(r.k_at_largest) and r.peak_at_largest_bytes:
                ax.annotate(f"K={int(r.k_at_largest)}", (r.largest_fit_batch, r.peak_at_largest_bytes / t.MIB),
                            textcoords="offset points", xytext=(4, -12), fontsize=7, color=style["color"])
        if cap_mib is not None:
            ax.axhline(cap_mib, ls="--", color="#555555", lw=1,
                       label=f"capacity {cap_mib:.0f} MiB (x: out of memory; *: one seed does not fit)")
        if group["recompute_at_largest"].any():
            ax.scatter([], [], marker="o", s=90, facecolors="none", edgecolors="#555555", label="with recomputation")
        if batches:
            ax.set_xscale("log", base=2)
        ax.set_xlabel("logical batch size (seeds), every probe of the search")
        ax.set_ylabel("peak tensor memory (MiB)")
        ax.set_title(case, fontsize=9)
        ax.legend(fontsize=7)
        labels = [t.system_label(s, k, display=True) for s, k in zip(group["system"], group["k"])]
        values = [0 if v is None or pd.isna(v) else int(v) for v in group["largest_fit_batch"]]
        bars = bar_ax.barh(labels, values, color=[_style(s)["color"] for s in group["system"]])
        for bar, r in zip(bars, group.itertuples()):
            k = "" if r.k_at_largest is None or pd.isna(r.k_at_largest) else f" K={int(r.k_at_largest)}"
            note = {"training_set": " (training set)", "single_seed": " (stopped: one seed does not fit)",
                    "capacity": "", "stopped": f" ({r.status})"}.get(r.wall_reason, "")
            note += ", recomputation" if r.recompute_at_largest else ""
            bar_ax.text(bar.get_width(), bar.get_y() + bar.get_height() / 2, f" {int(bar.get_width())}{k}{note}",
                        va="center", fontsize=7)
        sizes = group["training_set_size"].dropna()
        if len(sizes):
            bar_ax.axvline(float(sizes.iloc[0]), ls=":", color="#555555", lw=1)
        bar_ax.set_xlabel("largest trainable batch (dotted: the training set)")
        bar_ax.set_title("largest batch found by search, each system at its own K", fontsize=9)
        bar_ax.invert_yaxis()
    return fig


def draw_epoch_time(frame: pd.DataFrame, sizes: dict[str, int]):
    rows = t.rows_of_figure(frame, "epoch_time")
    if rows.empty:
        return _empty("Time per epoch vs capacity", "no epoch_time runs in the table")
    cases = list(dict.fromkeys(rows["case"]))
    fig, axes = _grid(len(cases), 1, width=6.4)
    for i, case in enumerate(cases):
        group, ax = rows[rows["case"] == case], axes[i][0]
        size = sizes.get(str(group["dataset"].iloc[0]))
        if size is None:
            ax.text(0.5, 0.5, f"no training-set size for {group['dataset'].iloc[0]}", ha="center", transform=ax.transAxes)
            continue
        capacities = sorted(int(c) for c in group["device_memory_bytes"].dropna().unique())
        for (system, k), series in group.groupby(["system", "k"], sort=False):
            style = _style(system)
            stats = [t.epoch_time_stats(series[series["device_memory_bytes"] == c], size) for c in capacities]
            xs = [c / t.MIB for c in capacities]
            _errorbar(ax, xs, stats, label=t.system_label(system, k, display=True), **style)
            for x, c in zip(xs, capacities):
                sub = series[series["device_memory_bytes"] == c]
                if t.statuses(sub) == "oom":
                    ax.scatter([x], [0], marker="x", s=60, color=style["color"], zorder=5, clip_on=False)
                ks = t.column_stats(sub, "num_microbatches_max")
                stat = t.epoch_time_stats(sub, size)
                if ks and stat:
                    ax.annotate(f"K={int(ks[0])}", (x, stat[0]), textcoords="offset points", xytext=(4, 4),
                                fontsize=7, color=style["color"])
        _log2_axis(ax, [c / t.MIB for c in capacities])
        ax.set_ylim(bottom=0)
        ax.set_xlabel("emulated device capacity (MiB)")
        ax.set_ylabel("seconds per epoch (median step x steps)")
        ax.set_title(f"{case}; x: out of memory", fontsize=9)
        ax.legend(fontsize=7)
    return fig
