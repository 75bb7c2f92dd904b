"""One tidy record per run: identity, provenance, outcome, time, memory, redundancy, estimator, quality.

A record is a flat JSON object (units in column names; lists for per-step, per-layer and per-epoch
values), validated against ``workflow/schemas/record.schema.yaml`` before it is written atomically.
Every column is always present (null when it does not apply), so records of all systems and
outcomes stack into one table. Statistics are recomputable: ``step_times_s`` holds every step's time,
warm-up included, and the first ``warmup_steps`` of them are excluded from every statistic.
"""
from __future__ import annotations

import json
import math
import os
import platform
import socket
import statistics
import subprocess
from dataclasses import dataclass
from datetime import datetime, timezone
from importlib import metadata
from typing import Any, Optional, Sequence

from cherry.bench.measure import StepTiming, summarize
from cherry.systems.contract import StepOutcome
from cherry.paths import REPO_DIR
from cherry.probe import TIMED_PHASES
from cherry.schemas import load_schema, schema_problem
from cherry.spec import RunSpec, run_id

STATUSES = ("ok", "oom", "timeout", "skipped", "diverged", "error")


@dataclass(frozen=True)
class RunMeasurements:
    """Everything a run measured (the runner fills what it got to before the outcome)."""

    status: str
    reason: Optional[str] = None
    device: str = "cpu"
    budget_bytes: Optional[int] = None
    warmup_steps: int = 0
    step_timings: tuple[StepTiming, ...] = ()
    step_outcomes: tuple[StepOutcome, ...] = ()
    num_parameters: Optional[int] = None
    load_s: Optional[float] = None
    preprocess_s: Optional[float] = None
    build_s: Optional[float] = None
    wall_s: Optional[float] = None
    peak_tracked_bytes: Optional[int] = None
    peak_reserved_bytes: Optional[int] = None
    nvml_peak_bytes: Optional[int] = None
    nvml_baseline_bytes: Optional[int] = None
    process_peak_rss_bytes: Optional[int] = None
    estimator_errors: tuple[float, ...] = ()
    epoch_losses: tuple[float, ...] = ()
    epoch_train_acc: tuple[float, ...] = ()
    epoch_valid_acc: tuple[float, ...] = ()
    epoch_test_acc: tuple[float, ...] = ()
    epoch_eval_s: tuple[float, ...] = ()
    final_accuracy: Optional[dict] = None  # {"train", "valid", "test"} after the last evaluation
    construction: Optional[str] = None  # where micro-batches were built (a system that reports it)
    ordering: Optional[str] = None  # the seed ordering used (a system that reports it)
    feature_cache: Optional[dict] = None  # ResidencyPlan.as_dict() (a system that reports it)
    steps_per_epoch: Optional[int] = None  # the spec's steps in one epoch (for per-epoch traffic)
    oom_single_seed: Optional[bool] = None  # status oom: a micro-batch of one seed did not fit (no K fits)

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"status {self.status!r} is invalid: expected one of {STATUSES}")
        if len(self.step_outcomes) > len(self.step_timings):
            raise ValueError(f"{len(self.step_outcomes)} step outcomes for {len(self.step_timings)} timed steps")


def _num(value: Any) -> Optional[float]:
    """A finite float, or None (NaN and infinities are not JSON)."""
    if value is None:
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def _nums(values: Sequence[Any]) -> list:
    return [_num(v) for v in values]


def _version(dist: str) -> Optional[str]:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def _git(*args: str) -> Optional[str]:
    try:
        out = subprocess.run(["git", "-C", str(REPO_DIR), *args], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout if out.returncode == 0 else None


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _ram_bytes() -> Optional[int]:
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return None


def _extension_state() -> tuple[Optional[str], Optional[bool]]:
    """The native extension's status, without loading it when the run never did."""
    try:
        from cherry.ops import extension
    except ImportError as exc:
        return f"cherry.ops unavailable: {exc}", None
    state = getattr(extension, "_state", None)
    if isinstance(state, dict) and state.get("loaded") is None:
        return "not loaded (no native op used by this run)", False
    return extension.extension_status(), extension.extension_available()


def provenance(device: str = "cpu") -> dict[str, Any]:
    """Where and with what a run ran (never raises for a missing tool: the value is null)."""
    import torch

    sha = _git("rev-parse", "HEAD")
    status = _git("status", "--porcelain")
    if device == "cuda" and torch.cuda.is_available():
        props = torch.cuda.get_device_properties(torch.cuda.current_device())
        device_name, device_total = props.name, int(props.total_memory)
    else:
        device_name, device_total = _cpu_name(), _ram_bytes()
    ext_status, ext_used = _extension_state()
    return {
        "git_sha": sha.strip() if sha else None,
        "git_dirty": None if status is None else bool(status.strip()),
        "python_version": platform.python_version(),
        "torch_version": torch.__version__,
        "cuda_version": torch.version.cuda,
        "dgl_version": _version("dgl"),
        "pyg_version": _version("torch_geometric"),
        "ogb_version": _version("ogb"),
        "device_name": device_name,
        "device_total_bytes": device_total,
        "native_ext_status": ext_status,
        "native_ext_used": ext_used,
        "allocator_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF"),
        "torch_num_threads": torch.get_num_threads(),
        "hostname": socket.gethostname(),
        "timestamp_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }


def identity(spec: RunSpec, budget_bytes: Optional[int]) -> dict[str, Any]:
    return {
        "system": spec.system, "dataset": spec.dataset, "model": spec.model, "aggr": spec.aggr, "lstm_impl": spec.lstm_impl,
        "num_layers": spec.num_layers, "hidden": spec.hidden, "heads": spec.heads, "dropout": spec.dropout,
        "fanouts": ",".join(str(f) for f in spec.fanouts), "batch_size": spec.batch_size, "lr": spec.lr,
        "num_microbatches_requested": str(spec.to_dict()["num_microbatches"]), "budget_bytes": budget_bytes,
        "device_memory_bytes": spec.device_memory_bytes, "device": spec.device, "seed": spec.seed,
        "repeat": spec.repeat, "steps_requested": spec.steps, "warmup_requested": spec.warmup,
        "epochs": spec.epochs, "evaluate": spec.evaluate, "timeout_s": spec.timeout_s,
        "experiment": spec.experiment, "axis": spec.axis,
        "options_json": json.dumps(dict(spec.options), sort_keys=True), "run_id": run_id(spec),
    }


def _count(values) -> Optional[int]:
    """The sum of ``values`` (booleans count 1), or None when no step reported one."""
    known = [int(v) for v in values if v is not None]
    return sum(known) if known else None


def _per_layer_mean(outcomes: Sequence[StepOutcome]) -> list:
    rows = [o.redundancy for o in outcomes if o.redundancy]
    if not rows:
        return []
    depth = min(len(r) for r in rows)
    return [_num(sum(r[i] for r in rows) / len(rows)) for i in range(depth)]


def build_record(spec: RunSpec, m: RunMeasurements, prov: Optional[dict] = None) -> dict[str, Any]:
    """The flat record of ``spec`` and its measurements ``m`` (validated by `validate_record`)."""
    warmup = min(m.warmup_steps, len(m.step_timings))
    totals = [t.total_s for t in m.step_timings]
    stats = summarize(totals, warmup)
    measured = m.step_outcomes[warmup:] or m.step_outcomes
    ks = sorted(o.num_microbatches for o in measured)
    redundancy = _per_layer_mean(measured)
    # Estimates of the measured steps only: the warm-up's plans use the uncalibrated model. The first
    # measured step was planned ahead, during the warm-up, so it may be uncalibrated too: the per-step
    # median below is what to read, the largest estimate can still be that step's.
    estimates = [o.estimated_peak_bytes for o in measured if o.estimated_peak_bytes is not None]
    step_errors = [abs(o.estimated_peak_bytes - o.measured_peak_bytes) / o.measured_peak_bytes for o in measured
                   if o.estimated_peak_bytes is not None and o.measured_peak_bytes]
    errors = list(m.estimator_errors)
    acc = m.final_accuracy or {}
    record: dict[str, Any] = identity(spec, m.budget_bytes)
    record.update(prov if prov is not None else provenance(m.device))
    record.update({
        "status": m.status, "reason": m.reason, "steps_completed": len(m.step_timings),
        "num_parameters": m.num_parameters, "load_s": _num(m.load_s), "preprocess_s": _num(m.preprocess_s),
        "build_s": _num(m.build_s), "wall_s": _num(m.wall_s),
        "num_microbatches_median": _num(statistics.median(ks)) if ks else None,
        "num_microbatches_max": ks[-1] if ks else None,
        "num_microbatches_changes": sum(a.num_microbatches != b.num_microbatches
                                        for a, b in zip(measured, measured[1:])) if measured else None,
        "recompute_steps": _count(o.recompute for o in measured),
        "streamed_steps": _count(o.streamed for o in measured),
        "oom_recoveries": _count(o.oom_recoveries for o in measured),
        "oom_single_seed": m.oom_single_seed if m.status == "oom" else None,
        "warmup_steps": warmup,
        "step_time_median_s": stats["median"], "step_time_p10_s": stats["p10"],
        "step_time_p90_s": stats["p90"], "step_time_mean_s": stats["mean"],
        "step_times_s": _nums(totals),
    })
    for phase in TIMED_PHASES:
        values = [t.phases_s.get(phase, 0.0) for t in m.step_timings]
        record[f"phase_{phase}_median_s"] = summarize(values, warmup)["median"]
        record[f"phase_{phase}_times_s"] = _nums(values)
    record.update({
        "peak_tracked_bytes": m.peak_tracked_bytes, "peak_reserved_bytes": m.peak_reserved_bytes,
        "nvml_peak_bytes": m.nvml_peak_bytes, "nvml_baseline_bytes": m.nvml_baseline_bytes,
        "process_peak_rss_bytes": m.process_peak_rss_bytes,
        # one entry per rank; cherry.bench.ranks fills them from every rank's record for nproc > 1
        "nproc": spec.nproc, "rank_peak_tracked_bytes": [m.peak_tracked_bytes],
        "rank_peak_reserved_bytes": [m.peak_reserved_bytes], "rank_process_peak_rss_bytes": [m.process_peak_rss_bytes],
        "redundancy_per_layer": redundancy, "redundancy_input": redundancy[0] if redundancy else None,
        "estimated_peak_bytes": max(estimates) if estimates else None,
        "estimator_median_rel_error": _num(statistics.median(errors)) if errors else None,
        "estimator_step_rel_error": _num(statistics.median(step_errors)) if step_errors else None,
        "final_loss": _num(m.step_outcomes[-1].loss) if m.step_outcomes else None,
        "step_losses": _nums(o.loss for o in m.step_outcomes),
        "epoch_losses": _nums(m.epoch_losses), "epoch_train_acc": _nums(m.epoch_train_acc),
        "epoch_valid_acc": _nums(m.epoch_valid_acc), "epoch_test_acc": _nums(m.epoch_test_acc),
        "epoch_eval_s": _nums(m.epoch_eval_s),
        "train_acc": _num(acc.get("train")), "valid_acc": _num(acc.get("valid")), "test_acc": _num(acc.get("test")),
        "construction": m.construction, "ordering": m.ordering,
    })
    record.update(_traffic_columns(m, measured))
    return record


def _traffic_columns(m: RunMeasurements, measured: Sequence[StepOutcome]) -> dict[str, Any]:
    """Input-feature residency and host-to-device traffic (null for a system that counts none)."""
    cache = m.feature_cache or {}
    moved = [o.feature_bytes_moved for o in m.step_outcomes]
    counted = [o for o in measured if o.feature_bytes_moved is not None]
    mean = statistics.fmean(o.feature_bytes_moved for o in counted) if counted else None
    read = sum(o.feature_rows_read or 0 for o in counted)
    return {
        "feature_cache_mode": cache.get("mode"), "feature_cache_rows": cache.get("cache_rows"),
        "feature_cache_bytes": cache.get("cache_bytes"), "feature_cache_budget_share": _num(cache.get("budget_share")),
        "feature_h2d_bytes_steps": [None if v is None else int(v) for v in moved],
        "feature_h2d_bytes_per_step_mean": _num(mean),
        "feature_h2d_bytes_per_epoch": _num(mean * m.steps_per_epoch) if mean is not None and m.steps_per_epoch else None,
        "feature_cache_hit_rate": _num(1 - sum(o.feature_rows_missed or 0 for o in counted) / read) if read else None,
    }


def record_columns() -> tuple[str, ...]:
    """Every column of a record, in the schema's order."""
    return tuple(load_schema("record")["properties"])


def validate_record(record: dict) -> None:
    """Raise ValueError (one line naming the column) unless ``record`` matches the record schema."""
    problem = schema_problem(record, "record", "record")
    if problem is not None:
        raise ValueError(problem.replace("key ", "column ", 1))


def write_record(path: str | os.PathLike, record: dict) -> None:
    """Validate, then write ``record`` atomically as JSON."""
    from cherry.io import write_json_atomic

    validate_record(record)
    write_json_atomic(path, record)
