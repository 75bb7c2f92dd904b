"""Accuracy under a fixed device: the figure of the ``accuracy_cap`` phase and the
numbers of its summary table (`cherry.report.summary`).

Each run trains for a few epochs under one emulated capacity and evaluates after each. Its curve is
the best-validation test accuracy: after epoch ``e``, the test accuracy of the epoch up to ``e``
with the highest validation accuracy (a user keeps that checkpoint). Its wall time after epoch ``e``
is the sum of its step times up to there (evaluation excluded; every epoch has the same steps).
A setting (system, axis, batch, fanouts, K) pools its seeds: the mean, and the min-max spread over
seeds. A verdict against the subject (cherry at its own K) is given only with `MIN_SEEDS` seeds a
side and disjoint spreads; otherwise the table says "within seed spread" or "too few seeds".
"""
from __future__ import annotations

from typing import Optional

import numpy as np
import pandas as pd

from cherry.report import tables as t
from cherry.systems.table import subject_system

MIN_SEEDS = 2
AXIS_TEXT = {"largest_batch": "largest batch that fits", "largest_fanouts": "largest fanouts that fit",
             "own_k": "own K"}


def best_valid_curve(row) -> list[tuple[float, float]]:
    """``[(wall seconds, best-validation test accuracy)]`` after each evaluated epoch of one run."""
    valid, test = list(row["epoch_valid_acc"]), list(row["epoch_test_acc"])
    steps = [float(s) for s in row["step_times_s"] if s is not None]
    epochs = min(len(valid), len(test))
    out, best, chosen = [], -np.inf, np.nan
    for e in range(epochs):
        if valid[e] is not None and valid[e] > best:
            best, chosen = valid[e], test[e]
        out.append((sum(steps[:len(steps) * (e + 1) // max(epochs, 1)]), float(chosen)))
    return out


def _group_label(row) -> str:
    """The case of a row without its batch and fanouts (a fitted run changes them) plus its capacity."""
    cap = row["device_memory_bytes"]
    cap_text = f"cap {float(cap) / t.MIB:.3g} MiB" if cap is not None and not pd.isna(cap) else "no cap"
    return f"{t.case_label(row, ('dataset', 'model', 'aggr', 'num_layers', 'hidden'))} {cap_text}"


def _setting_label(rows: pd.DataFrame) -> str:
    """"dgl, largest batch that fits: batch 312, fanouts 10,25" (K chosen for an own-K system)."""
    first = rows.iloc[0]
    label = f"{t.system_label(first['system'], first['k'], display=True)}, {AXIS_TEXT.get(first['axis'], first['axis'])}"
    ks = [int(k) for k in t.ok_rows(rows)["num_microbatches_max"].dropna()] if "num_microbatches_max" in rows else []
    chosen = f" (K={min(ks)}{'-' + str(max(ks)) if max(ks) != min(ks) else ''})" if ks and first["k"] != "1" else ""
    setting = f"batch {t._text(first['batch_size'])}, fanouts {t._text(first['fanouts'])}"
    if first["axis"] != "own_k" and (rows["status"] == "oom").all():  # the search found nothing that fits
        setting = f"none fits ({setting} out of memory)"
    return f"{label}: {setting}{chosen}"


def settings(frame: pd.DataFrame) -> list[tuple[str, str, pd.DataFrame]]:
    """``[(case, setting label, rows)]`` of the phase's runs, in the table's order (a setting's rows
    are its seeds and repeats)."""
    rows = t.rows_of_figure(frame, "accuracy_cap")
    if rows.empty:
        return []
    rows = rows.assign(group=[_group_label(r) for _, r in rows.iterrows()])
    out = []
    for (case, _, _, _), group in rows.groupby(["group", "system", "axis", "k"], sort=False):
        for _, sub in group.groupby(["batch_size", "fanouts"], sort=False):
            out.append((case, _setting_label(sub), sub))
    return out


def seed_curves(rows: pd.DataFrame) -> list[list[tuple[float, float]]]:
    """The best-validation curve of each ok run of ``rows`` that evaluated."""
    return [c for c in (best_valid_curve(r) for _, r in t.ok_rows(rows).iterrows()) if c]


def final_stats(rows: pd.DataFrame) -> Optional[tuple[float, float, float, int]]:
    """(mean, min, max, seeds) of the final best-validation test accuracy over the ok runs."""
    finals = [c[-1][1] for c in seed_curves(rows) if not np.isnan(c[-1][1])]
    if not finals:
        return None
    return float(np.mean(finals)), min(finals), max(finals), len(finals)


def verdict(stats: Optional[tuple], subject: Optional[tuple]) -> str:
    """The subject's accuracy against a setting's, only where the seeds' spreads are disjoint."""
    if stats is None or subject is None:
        return "-"
    if min(stats[3], subject[3]) < MIN_SEEDS:
        return "too few seeds"
    if subject[1] > stats[2]:
        return f"{subject_system()} higher"
    if subject[2] < stats[1]:
        return f"{subject_system()} lower"
    return "within seed spread"


def wall_mean(rows: pd.DataFrame) -> Optional[float]:
    walls = [c[-1][0] for c in seed_curves(rows)]
    return float(np.mean(walls)) if walls else None


def _plot_setting(axes, label: str, rows: pd.DataFrame) -> None:
    from cherry.report.plotting import system_style

    curves = seed_curves(rows)
    if not curves:
        return
    n = min(len(c) for c in curves)
    acc = np.array([[c[e][1] for e in range(n)] for c in curves], dtype=float)
    wall = np.array([[c[e][0] for e in range(n)] for c in curves], dtype=float)
    style = {**system_style(rows.iloc[0]["system"]), "markersize": 4, "alpha": 0.85}
    style["linestyle"] = {"largest_batch": "--", "largest_fanouts": ":"}.get(rows.iloc[0]["axis"], "-")
    mean, low, high = np.nanmean(acc, 0), np.nanmin(acc, 0), np.nanmax(acc, 0)
    for ax, xs in ((axes[0], np.nanmean(wall, 0)), (axes[1], np.arange(1, n + 1))):
        line = ax.plot(xs, mean, label=label, **style)[0]
        if len(curves) > 1:
            ax.fill_between(xs, low, high, color=line.get_color(), alpha=0.15, linewidth=0)


def draw_accuracy_cap(frame: pd.DataFrame):
    """Per case, best-validation test accuracy against training seconds and against epochs: one line
    per setting (mean over seeds), its min-max band over seeds."""
    from cherry.report.plotting import empty_figure, grid, label_row

    found = settings(frame)
    if not found:
        return empty_figure("Accuracy under a fixed device", "no accuracy_cap runs in the table")
    cases = list(dict.fromkeys(case for case, _, _ in found))
    fig, axes = grid(len(cases), 2, width=5.6)
    for i, case in enumerate(cases):
        for _, label, rows in (f for f in found if f[0] == case):
            _plot_setting(axes[i], label, rows)
        label_row(axes[i], case, ("training seconds (step times summed)", "epoch"), "test acc at best validation",
                  legend_fontsize=6)
    return fig
