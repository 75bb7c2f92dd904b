"""A benchmark run of ``nproc > 1`` data-parallel ranks: launch them, merge their records into one.

Each rank (`cherry.launch.launch`, spawned here) joins the world and runs the ordinary one-process
runner it is handed (`cherry.bench.runner` passes its own, so this module does not import the runner
that dispatches to it) with cherry's `DistributedTrainer` inside, writing its own record
next to ``out_path`` (``<out_path>.rank<r>``). The merged record is rank 0's (its step times include
the all-reduce, so they are the job's step times; its losses are the whole batch's) with:

- ``nproc`` and per-rank ``rank_peak_tracked_bytes`` / ``rank_peak_reserved_bytes`` /
  ``rank_process_peak_rss_bytes``; the plain peak columns become the largest over ranks (what the
  largest device needed);
- the outcome: ok when every rank is ok; otherwise the first rank with a result status (oom,
  timeout, skipped), else the first error, its reason prefixed by the rank (a peer's broken
  connection is a consequence of the cause, not the cause).

A rank that dies without a record (killed, crashed in the launcher) makes the run an ``error`` with
the launcher's one-line reason. The rank records are removed once merged.
"""
from __future__ import annotations

import json
import os
from typing import Callable, Optional

from cherry.spec import RunSpec

# the one-process runner: (spec, out_path, log) -> exit code; a module-level function (it must pickle)
RunOne = Callable[[RunSpec, str, Callable[[str], None]], int]

_RESULT_STATUSES = ("oom", "timeout", "skipped", "diverged")
_LAUNCH_MARGIN_S = 120.0  # above the run's own timeout: start-up of the ranks and the rendezvous


def _rank_path(out_path: str, rank: int) -> str:
    return f"{out_path}.rank{rank}"


def _rank_execute(spec_dict: dict, out_path: str, quiet: bool, execute: RunOne) -> int:
    """One rank (module-level: it must pickle): join the world, run the ordinary runner ``execute``."""
    import sys

    from cherry.launch import process_group, world_from_env
    from cherry.spec import spec_from_dict

    spec = spec_from_dict(spec_dict)
    world = world_from_env()

    def log(line: str) -> None:
        if not quiet and world.rank == 0:
            print(line, file=sys.stderr, flush=True)

    with process_group(world, spec.device):
        return execute(spec, _rank_path(out_path, world.rank), log)


def merge_rank_records(records: list[Optional[dict]]) -> dict:
    """One record from the ranks' (index = rank; None: that rank wrote none). Needs rank 0's or another's."""
    present = [(r, rec) for r, rec in enumerate(records) if rec is not None]
    if not present:
        raise ValueError("no rank wrote a record")
    merged = dict(records[0] if records[0] is not None else present[0][1])
    merged["nproc"] = len(records)
    for column in ("peak_tracked_bytes", "peak_reserved_bytes", "process_peak_rss_bytes"):
        values = [rec.get(column) if rec is not None else None for rec in records]
        merged[f"rank_{column}"] = values
        known = [v for v in values if v is not None]
        merged[column] = max(known) if known else None
    failed = [(r, rec) for r, rec in present if rec["status"] != "ok"]
    missing = [r for r, rec in enumerate(records) if rec is None]
    cause = next(((r, rec) for r, rec in failed if rec["status"] in _RESULT_STATUSES), failed[0] if failed else None)
    if cause is not None:
        r, rec = cause
        merged["status"], merged["reason"] = rec["status"], f"rank {r}: {rec['reason']}"
    elif missing:
        merged["status"], merged["reason"] = "error", f"rank {missing[0]} wrote no record"
    return merged


def execute_ranks(spec: RunSpec, out_path: str, log: Callable[[str], None], execute: RunOne) -> str:
    """Run ``spec`` on ``spec.nproc`` local ranks, each through ``execute``, and write the merged
    record; returns its status (the caller maps it to an exit code, as for one process)."""
    from cherry.bench.record import RunMeasurements, build_record, write_record
    from cherry.launch import RankFailed, launch

    paths = [_rank_path(out_path, r) for r in range(spec.nproc)]
    for path in paths:
        if os.path.exists(path):
            os.remove(path)
    timeout_s = None if spec.timeout_s is None else spec.timeout_s + _LAUNCH_MARGIN_S
    failure = None
    try:
        launch(_rank_execute, (spec.to_dict(), out_path, False, execute), spec.nproc, timeout_s=timeout_s)
    except RankFailed as exc:  # a rank died without finishing its record
        failure = str(exc)
    records = []
    for path in paths:
        try:
            with open(path, encoding="utf-8") as f:
                records.append(json.load(f))
        except (OSError, ValueError):
            records.append(None)
    if any(rec is not None for rec in records):
        record = merge_rank_records(records)
        if failure is not None and record["status"] == "ok":
            record["status"], record["reason"] = "error", failure
    else:
        m = RunMeasurements(status="error", reason=failure or "no rank wrote a record", device=spec.device)
        record = build_record(spec, m)
        record["nproc"] = spec.nproc
    write_record(out_path, record)
    for path in paths:
        if os.path.exists(path):
            os.remove(path)
    log(f"[{spec.system}] {spec.nproc} ranks: {record['status']}"
        f"{': ' + record['reason'] if record['reason'] else ''} -> {out_path}")
    return record["status"]


__all__ = ["execute_ranks", "merge_rank_records"]
