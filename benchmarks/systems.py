"""`cherry bench systems`: every system on the same data, model, K and budget, side by side.

Each system runs through the benchmark runner in its own process (as in the workflow), writing a
record under ``--out-dir``; the table is printed from those records: median step time (partitioning
and block construction included), tracked peak memory, input-layer redundancy, and the ratios to the
systems table's subject (cherry). When a library baseline (role ``library_baseline``: DGL, PyG) runs,
a ``cherry@K=1`` row compares the subject without micro-batching against the libraries' stock loops.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path




def _spec(args, system: str, k: int) -> dict:
    from cherry.spec import make_spec

    return make_spec(
        system=system, dataset=args.dataset, root=args.root, model="sage", aggr=args.aggr,
        num_layers=len(args.fanouts), hidden=args.hidden, fanouts=list(args.fanouts),
        batch_size=args.batch_size, num_microbatches=k, device_memory_bytes=args.device_memory,
        device=args.device, epochs=0, steps=args.steps, warmup=args.warmup, evaluate=False,
        experiment="bench_systems",
    ).to_dict()


def _run_one(args, label: str, spec: dict, out_dir: Path) -> dict:
    from cherry.io import write_json_atomic

    spec_path, record_path = out_dir / f"{label}.spec.json", out_dir / f"{label}.json"
    write_json_atomic(spec_path, spec)
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
    proc = subprocess.run([sys.executable, "-m", "cherry.bench.run", "--spec", str(spec_path),
                           "--out", str(record_path)], env=env, capture_output=True, text=True)
    if proc.returncode == 2 or not record_path.exists():
        raise ValueError(f"run {label} failed: {proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else proc.returncode}")
    return json.loads(record_path.read_text())


def _fmt(value, pattern: str) -> str:
    return pattern % value if value is not None else "-"


def run(args: argparse.Namespace) -> int:
    from cherry.memory import format_size
    from cherry.systems import is_whole_batch, subject_system, system_names, systems_with_role

    SYSTEM_NAMES = system_names()
    me = subject_system()

    systems = [s for s in args.systems.split(",") if s]
    unknown = [s for s in systems if s not in SYSTEM_NAMES]
    if unknown or not systems:
        raise ValueError(f"--systems has unknown names {unknown}; expected some of {list(SYSTEM_NAMES)}")
    if args.warmup < 0:
        raise ValueError(f"--warmup must be >= 0, got {args.warmup}")
    out_dir = Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    runs = [(s, s, 1 if is_whole_batch(s) else args.microbatches) for s in systems]
    if me in systems and set(systems) & set(systems_with_role("library_baseline")):
        runs.append((f"{me}@K=1", me, 1))  # the subject without micro-batching beside the libraries' loops
    print(f"cherry bench systems: {args.dataset}, sage-{args.aggr} H={args.hidden}, fanouts {args.fanouts}, "
          f"batch {args.batch_size}, K={args.microbatches}, device memory "
          f"{format_size(args.device_memory) if args.device_memory else 'unlimited'}, {args.threads} thread(s), "
          f"{args.steps} steps (+{args.warmup} warm-up)", flush=True)
    records = {}
    for label, system, k in runs:
        print(f"  running {label} ...", file=sys.stderr, flush=True)
        records[label] = _run_one(args, label.replace("@", "_").replace("=", ""), _spec(args, system, k), out_dir)
    ref = records.get(me)
    print(f"{'system':<11} {'status':<8} {'K':>3} {'step_s':>8} {'x ' + me:>8} {'plan+slice_s':>12} "
          f"{'peak':>11} {'peak/' + me:>11} {'redund.':>7}")
    for label, rec in records.items():
        ok = rec["status"] == "ok"
        step = rec["step_time_median_s"] if ok else None
        peak = rec["peak_tracked_bytes"] if ok else None
        prep = None
        if ok:
            prep = sum(rec.get(f"phase_{p}_median_s") or 0.0 for p in ("plan", "slice"))
        ratio = step / ref["step_time_median_s"] if ok and ref and ref["status"] == "ok" else None
        mem_ratio = peak / ref["peak_tracked_bytes"] if ok and ref and ref["status"] == "ok" and peak else None
        print(f"{label:<11} {rec['status']:<8} {_fmt(rec['num_microbatches_max'], '%d'):>3} "
              f"{_fmt(step, '%.3f'):>8} {_fmt(ratio, '%.2fx'):>8} {_fmt(prep, '%.3f'):>12} "
              f"{format_size(peak) if peak else '-':>11} {_fmt(mem_ratio, '%.2fx'):>11} "
              f"{_fmt(rec['redundancy_input'], '%.2f'):>7}")
        if not ok and rec.get("reason"):
            print(f"{'':<11} reason: {rec['reason']}")
    print(f"records: {out_dir}/")
    return 0
