"""Read the workflow's run table and reduce it to what figures and the summary show.

`load_table` reads ``runs.csv`` (`cherry.bench.aggregate`) and adds derived columns: ``k``
(requested K as text: "1", "8" or "auto"), ``variant`` (the options that differ from the system's
defaults, as "all on" or "key=value, ...") and ``case`` (one line naming dataset, model and sizes). Statistics follow the records' contract: step times are recomputed
from the raw per-step times with the warm-up steps excluded, pooled over repeats; only rows with
status ok count for time and memory.
"""
from __future__ import annotations

import json
import math
import os
import statistics
from typing import Iterable, Optional

import numpy as np
import pandas as pd

from cherry.probe import TIMED_PHASES as PHASES

CASE_COLUMNS = ("dataset", "model", "aggr", "num_layers", "hidden", "fanouts", "batch_size")
MIB = 2.0**20


def _text(value) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def model_label(row) -> str:
    """"sage-lstm" for GraphSAGE with an aggregator, else the model's name."""
    aggr = _text(row["aggr"])
    return f"{row['model']}-{aggr}" if aggr else str(row["model"])


def case_label(row, columns: Iterable[str] = CASE_COLUMNS) -> str:
    """One line naming the setting of a row (the given columns only)."""
    parts = []
    for column in columns:
        value = row[column]
        if column == "dataset":
            parts.append(str(value))
        elif column in ("model", "aggr"):
            if column == "model":
                parts.append(model_label(row))
        elif column == "fanouts":
            parts.append(f"fanouts {_text(value)}")
        else:
            short = {"num_layers": "L", "hidden": "H", "batch_size": "batch "}[column]
            parts.append(f"{short}{_text(value)}")
    return " ".join(parts)


def variant_label(options_json: str, system: Optional[str] = None) -> str:
    """"all on" when every option has the system's default (systems table), else "key=value, ..." of
    those that differ (booleans lower-case, as in the config)."""
    from cherry.systems.table import system_entry, system_names

    options = json.loads(options_json) if isinstance(options_json, str) and options_json else {}
    defaults = system_entry(system).option_defaults if system in system_names() else {}
    options = {k: v for k, v in options.items() if defaults.get(k, object()) != v}
    if not options:
        return "all on"
    return ", ".join(f"{k}={json.dumps(v) if isinstance(v, bool) else v}" for k, v in sorted(options.items()))


def load_table(path: str | os.PathLike) -> pd.DataFrame:
    """The run table with the derived columns of the module docstring (ValueError if unreadable)."""
    from cherry.bench.aggregate import read_runs_csv

    if not os.path.exists(path):
        raise ValueError(f"run table {str(path)!r} does not exist: run the workflow's aggregate_records rule first")
    frame = read_runs_csv(path)
    frame["experiment"] = frame["experiment"].fillna("").astype(str)
    frame["axis"] = frame["axis"].fillna("").astype(str)
    frame["k"] = frame["num_microbatches_requested"].map(_text)
    frame["variant"] = [variant_label(o, s) for o, s in zip(frame["options_json"], frame["system"])]
    frame["case"] = [case_label(row) for _, row in frame.iterrows()] if len(frame) else []
    return frame


def rows_of_figure(frame: pd.DataFrame, figure: str) -> pd.DataFrame:
    """The rows of the experiment phases that draw figure ``figure`` (the experiment table,
    `cherry.bench.phases`), in the table's order of rows."""
    from cherry.bench.phases import phases_of_figure

    return frame[frame["experiment"].isin(phases_of_figure(figure))]


def rows_of_section(frame: pd.DataFrame, section: str) -> pd.DataFrame:
    """The rows of the experiment phases that feed summary section ``section`` (`cherry.bench.phases`)."""
    from cherry.bench.phases import phases_of_section

    return frame[frame["experiment"].isin(phases_of_section(section))]


def ok_rows(rows: pd.DataFrame) -> pd.DataFrame:
    return rows[rows["status"] == "ok"]


def measured_step_times(rows: pd.DataFrame, column: str = "step_times_s") -> list[float]:
    """Per-step seconds of the ok rows, warm-up excluded, pooled over the rows."""
    values: list[float] = []
    for _, row in ok_rows(rows).iterrows():
        times = list(row[column])[int(row["warmup_steps"]):]
        values.extend(float(t) for t in times if t is not None)
    return values


def measured_step_times_by_run(rows: pd.DataFrame, column: str = "step_times_s") -> list[list[float]]:
    """Per-step seconds of each ok row (one list per run and repeat), warm-up excluded."""
    runs = []
    for _, row in ok_rows(rows).iterrows():
        times = [float(t) for t in list(row[column])[int(row["warmup_steps"]):] if t is not None]
        if times:
            runs.append(times)
    return runs


def spread(values: list[float]) -> Optional[tuple[float, float, float]]:
    """(median, 10th percentile, 90th percentile), or None without values."""
    if not values:
        return None
    array = np.asarray(values, dtype=float)
    return float(np.median(array)), float(np.percentile(array, 10)), float(np.percentile(array, 90))


def step_time_stats(rows: pd.DataFrame) -> Optional[tuple[float, float, float]]:
    """Median and 10-90 % spread of the measured step seconds of ``rows``."""
    return spread(measured_step_times(rows))


def phase_medians(rows: pd.DataFrame) -> dict[str, float]:
    """Median exclusive seconds per phase over the measured steps of ``rows`` (0 for a missing phase)."""
    out = {}
    for phase in PHASES:
        stats = spread(measured_step_times(rows, f"phase_{phase}_times_s"))
        out[phase] = stats[0] if stats else 0.0
    return out


def column_stats(rows: pd.DataFrame, column: str) -> Optional[tuple[float, float, float]]:
    """(median, min, max) of a scalar column over the ok rows with a value."""
    values = [float(v) for v in ok_rows(rows)[column] if v is not None and not pd.isna(v)]
    if not values:
        return None
    return statistics.median(values), min(values), max(values)


def statuses(rows: pd.DataFrame) -> str:
    """The outcome of a group of repeats: "ok" if all are ok, else the first other status."""
    values = list(rows["status"])
    return next((s for s in values if s != "ok"), "ok") if values else "missing"


SEARCH_COLUMNS = ["case", "system", "k", "status", "reason", "largest_fit_batch", "smallest_oom_batch",
                  "capped_at_training_set", "training_set_size", "device_memory_bytes", "k_at_largest",
                  "peak_at_largest_bytes", "wall_reason", "recompute_at_largest", "num_probes", "search_wall_s",
                  "probes", "git_sha", "device_name"]


def load_searches(paths: Iterable[str | os.PathLike]) -> pd.DataFrame:
    """One row per memory-wall search record (`cherry.bench.capacity_run`), columns `SEARCH_COLUMNS`
    (``k`` the requested K as text, ``case`` the setting without batch size, ``wall_reason`` what stopped
    the search, `cherry.bench.capacity.wall_reason`, recomputed from the probes; ValueError if unreadable)."""
    from cherry.bench.capacity import wall_reason
    from cherry.io import read_json

    out = []
    for path in paths:
        record = read_json(path, "search record")
        if not isinstance(record, dict) or "probes" not in record or "spec" not in record:
            raise ValueError(f"{str(path)!r} is not a search record of cherry.bench.capacity_run")
        spec = dict(record["spec"])
        spec["fanouts"] = ",".join(str(f) for f in spec["fanouts"])
        largest = record["largest_fit_batch"]
        at = next((p for p in record["probes"] if p["batch_size"] == largest and p["status"] == "ok"), {})
        out.append({"case": case_label(spec, CASE_COLUMNS[:-1]), "system": record["system"],
                    "k": _text(record["num_microbatches_requested"]), "status": record["status"],
                    "reason": record["reason"], "largest_fit_batch": largest,
                    "smallest_oom_batch": record["smallest_oom_batch"],
                    "capped_at_training_set": bool(record["capped_at_training_set"]),
                    "training_set_size": record["training_set_size"],
                    "device_memory_bytes": record["device_memory_bytes"],
                    "k_at_largest": at.get("num_microbatches_max"), "peak_at_largest_bytes": at.get("peak_tracked_bytes"),
                    "wall_reason": wall_reason(record["status"], largest, record["smallest_oom_batch"],
                                               record["training_set_size"], record["probes"]),
                    "recompute_at_largest": bool(at.get("recompute_steps")),
                    "num_probes": len(record["probes"]), "search_wall_s": record.get("search_wall_s"),
                    "probes": record["probes"], "git_sha": record.get("git_sha"),
                    "device_name": record.get("device_name")})
    return pd.DataFrame(out, columns=SEARCH_COLUMNS)


def steps_per_epoch(info_paths: Iterable[str | os.PathLike]) -> dict[str, int]:
    """``{dataset: training-set size}`` from `cherry data info` outputs (ValueError if unreadable)."""
    from cherry.io import read_json

    sizes = {}
    for path in info_paths:
        info = read_json(path, "dataset info")
        try:
            sizes[str(info["name"])] = int(info["split_sizes"]["train"])
        except (KeyError, TypeError, ValueError):
            raise ValueError(f"{str(path)!r} has no name and split_sizes.train: expected `cherry data info` output") from None
    return sizes


def add_report_inputs(parser) -> None:
    """The options every report command reads its inputs from: ``--table``, ``--searches``, ``--data-info``."""
    parser.add_argument("--table", required=True, help="results/records/runs.csv")
    parser.add_argument("--searches", nargs="*", default=[], help="memory-wall search records")
    parser.add_argument("--data-info", nargs="*", default=[], help="`cherry data info` outputs (steps per epoch)")


def read_report_inputs(args) -> tuple[pd.DataFrame, pd.DataFrame, dict[str, int]]:
    """(run table, memory-wall searches, steps per epoch) from `add_report_inputs`' options; a bad file
    is a ValueError naming it, which the command prints as its one line (exit 2)."""
    return load_table(args.table), load_searches(args.searches), steps_per_epoch(args.data_info)


def epoch_time_stats(rows: pd.DataFrame, train_size: int) -> Optional[tuple[float, float, float]]:
    """(median, 10th, 90th percentile) seconds per epoch of ``rows`` (one batch size): per-step seconds
    times the steps of one epoch, ceil(training-set size / batch size)."""
    stats = step_time_stats(rows)
    if stats is None or rows.empty:
        return None
    steps = math.ceil(train_size / int(rows["batch_size"].iloc[0]))
    return tuple(v * steps for v in stats)


def estimator_rows(frame: pd.DataFrame) -> pd.DataFrame:
    """Ok runs of the subject (the systems table's, cherry) with an estimated and a measured peak,
    training only: a run that evaluates peaks during layer-wise inference, which the training estimate
    does not model."""
    from cherry.systems.table import subject_system

    rows = ok_rows(frame[(frame["system"] == subject_system()) & ~frame["evaluate"].astype(bool)])
    return rows[rows["estimated_peak_bytes"].notna() & rows["peak_tracked_bytes"].notna()]


def display_label(system: str) -> str:
    """The systems table's display label of ``system`` ("Betty", "full batch"); an unknown name as is."""
    from cherry.systems.table import system_entry, system_names

    return system_entry(system).label if system in system_names() else system


def system_label(system: str, k: str, display: bool = False) -> str:
    """"cherry (K=auto)" for micro-batching systems, the bare name for K=1 systems; with ``display``
    the table's label in place of the name ("Cherry (K=auto)", "full batch"), as figures show it."""
    name = display_label(system) if display else system
    return name if is_whole_batch_system(system) else f"{name} (K={k})"


def is_whole_batch_system(system: str) -> bool:
    """True for a system of the systems table that trains the whole batch (unknown names: False)."""
    from cherry.systems.table import is_whole_batch, system_names

    return system in system_names() and is_whole_batch(system)
