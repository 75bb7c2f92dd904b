"""Beyond host memory: prepare and train a generated graph larger than a memory limit.

    python -m benchmarks.large_scale [--scale 0.01] [--limit 640MiB] [--repeats 3] [--steps 20] [--ablate N]

A cgroup memory limit (v1 ``memory.limit_in_bytes``, or v2 ``memory.max``) below the dataset's size is
put on child processes: ``cherry data prepare synth-papers --scale S`` (the bounded prepare), then
``cherry train`` on that cache (features and graph memory-mapped), each beside the same command
without a limit. The cgroup charges page cache to the group, so the limited run cannot keep the
dataset cached, while the unlimited one reads it from a warm page cache (its files are read once
before each unlimited run; before each limited run they are evicted with ``POSIX_FADV_DONTNEED``,
as pages cached by another group would otherwise be read for free).

Reported per run: exit status (a kill by the limit shows as ``killed``), wall time, the child's peak
resident memory (``ru_maxrss``, which counts mapped file pages too), the group's peak usage (page
cache included), and for training the throughput (seeds per second over the measured steps). Training
runs alternate limited / unlimited, ``--repeats`` times; the ratio limited / unlimited is the median of
the per-pair ratios with a bootstrap 95% interval. Prepare runs once each (minutes; a deterministic
program, so its peak needs no repeats). ``--ablate N`` adds N interleaved pairs of limited runs with
and without sorted gathers (`benchmarks/large_scale_ablation.py`), to show what sorting brings;
``--skip-prepare`` reuses the caches under ``--root``. Needs root and a cgroup memory controller;
otherwise it prints one line saying why and exits 0.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from cherry.outputs import add_output, parse_checked

V1_ROOT = Path("/sys/fs/cgroup/memory")
V2_ROOT = Path("/sys/fs/cgroup")
PLUGIN = Path(__file__).with_name("large_scale_dataset.py")
ABLATION = Path(__file__).with_name("large_scale_ablation.py")
DATASET = "synth-papers-large"  # registered by PLUGIN: synth-papers at $CHERRY_LARGE_SCALE in $CHERRY_LARGE_ROOT


def _bytes(text: str) -> int:
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMG]i?B?)?\s*", text)
    if not match:
        raise argparse.ArgumentTypeError(f"expected a size like 512MiB, got {text!r}")
    unit = (match.group(2) or "").rstrip("B").rstrip("i")
    return int(float(match.group(1)) * {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}[unit])


class MemoryGroup:
    """A fresh cgroup with a memory limit; `enter` (a ``preexec_fn``) moves a child into it."""

    def __init__(self, limit_bytes: int) -> None:
        name = f"cherry-large-{os.getpid()}"
        if (V1_ROOT / "memory.limit_in_bytes").exists():
            self.path, self.version = V1_ROOT / name, 1
        else:
            self.path, self.version = V2_ROOT / name, 2
        self.path.mkdir()
        limit_file = "memory.limit_in_bytes" if self.version == 1 else "memory.max"
        (self.path / limit_file).write_text(str(limit_bytes))
        if self.version == 1 and (self.path / "memory.memsw.limit_in_bytes").exists():
            try:  # no swap either (there is none here; where there is, the limit must hold for it too)
                (self.path / "memory.memsw.limit_in_bytes").write_text(str(limit_bytes))
            except OSError:
                pass
        self.limit_bytes = limit_bytes

    def reset_peak(self) -> None:
        if self.version == 1:
            (self.path / "memory.max_usage_in_bytes").write_text("0")
        elif (self.path / "memory.peak").exists():
            try:
                (self.path / "memory.peak").write_text("0")  # resettable on recent kernels
            except OSError:
                pass

    def peak_bytes(self) -> int | None:
        f = self.path / ("memory.max_usage_in_bytes" if self.version == 1 else "memory.peak")
        return int(f.read_text()) if f.exists() else None

    def enter(self) -> None:
        (self.path / "cgroup.procs").write_text(str(os.getpid()))

    def remove(self) -> None:
        for _ in range(50):
            try:
                self.path.rmdir()
                return
            except OSError:
                time.sleep(0.1)


def cgroup_unavailable() -> str | None:
    """Why a memory limit cannot be set here, or None."""
    if os.geteuid() != 0:
        return "not root (creating a cgroup needs root)"
    if (V1_ROOT / "memory.limit_in_bytes").exists():
        return None if os.access(V1_ROOT, os.W_OK) else f"{V1_ROOT} is not writable"
    controllers = V2_ROOT / "cgroup.controllers"
    if controllers.exists() and "memory" in controllers.read_text().split():
        return None if os.access(V2_ROOT, os.W_OK) else f"{V2_ROOT} is not writable"
    return "no cgroup memory controller (neither v1 /sys/fs/cgroup/memory nor v2 memory.max)"


_MEASURE = """
import resource, subprocess, sys
proc = subprocess.run(sys.argv[1:])
print("RU_MAXRSS_KIB", resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stderr)
sys.exit(proc.returncode)
"""


def _run(cmd: list[str], env: dict, group: MemoryGroup | None, log: Path, timeout_s: float) -> dict:
    """Run ``cmd`` (under ``group``'s limit if given); exit status, wall time and peaks."""
    if group is not None:
        group.reset_peak()
    start = time.perf_counter()
    with open(log, "w") as out:
        proc = subprocess.Popen([sys.executable, "-c", _MEASURE, *cmd], env=env, stdout=out, stderr=subprocess.STDOUT,
                                preexec_fn=group.enter if group is not None else None, start_new_session=True)
        try:
            returncode = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            returncode = None
    wall_s = time.perf_counter() - start
    text = log.read_text()
    rss = re.findall(r"RU_MAXRSS_KIB (\d+)", text)
    status = "ok" if returncode == 0 else "timeout" if returncode is None else (
        "killed" if returncode in (-9, 137) or "Killed" in text else f"exit {returncode}")
    return {"status": status, "wall_s": wall_s, "peak_rss_bytes": int(rss[-1]) * 1024 if rss else None,
            "group_peak_bytes": group.peak_bytes() if group is not None else None}


def _cache_files(root: Path) -> list[Path]:
    return sorted(root.rglob("cherry/*.npy"))


def _evict(files: list[Path]) -> None:
    for path in files:
        with open(path, "rb") as f:
            os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)


def _warm(files: list[Path]) -> None:
    for path in files:
        with open(path, "rb") as f:
            while f.read(16 << 20):
                pass


def _interval(ratios: list[float], draws: int = 2000) -> tuple[float, float]:
    rng = random.Random(0)
    medians = sorted(statistics.median(rng.choices(ratios, k=len(ratios))) for _ in range(draws))
    return medians[int(0.025 * draws)], medians[int(0.975 * draws) - 1]


def _mib(x) -> str:
    return "-" if x is None else f"{x / 2**20:,.0f}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.large_scale", description=__doc__.splitlines()[0])
    p.add_argument("--scale", type=float, default=0.01, help="synth-papers scale (0.01: 1.1 M nodes, 16 M edges)")
    p.add_argument("--limit", type=_bytes, default=_bytes("640MiB"), help="the cgroup's memory limit")
    p.add_argument("--repeats", type=int, default=3, help="limited / unlimited training pairs")
    p.add_argument("--steps", type=int, default=20, help="training steps per run (batch 512, fanouts 10,10)")
    p.add_argument("--root", type=Path, default=None, help="where the datasets go (default: a temporary directory)")
    p.add_argument("--ablate", type=int, default=0, metavar="N",
                   help="also train limited N times each with and without sorted gathers (interleaved)")
    p.add_argument("--skip-prepare", action="store_true", help="reuse the caches already under --root")
    p.add_argument("--timeout-s", type=float, default=900.0, help="a run taking longer is stopped (status timeout)")
    add_output(p, "--json", type=Path, default=None, help="write the figures here")
    args = parse_checked(p, argv)
    why = cgroup_unavailable()
    if why is not None:
        print(f"large_scale: skipped: {why}")
        return 0
    root = args.root or Path(tempfile.mkdtemp(prefix="cherry-large-"))
    root.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"), CHERRY_PLUGINS=str(PLUGIN),
               CHERRY_LARGE_SCALE=str(args.scale))
    group = MemoryGroup(args.limit)
    results: dict = {"scale": args.scale, "limit_bytes": args.limit, "prepare": {}, "train": []}
    try:
        for label, limited in (("limited", True), ("unlimited", False)) if not args.skip_prepare else ():
            where = root / label
            cmd = [sys.executable, "-m", "cherry", "data", "prepare", "synth-papers", "--scale", str(args.scale),
                   "--root", str(where), "--force"]
            run = _run(cmd, env, group if limited else None, root / f"prepare-{label}.log", args.timeout_s)
            files = _cache_files(where)
            run["cache_bytes"] = sum(f.stat().st_size for f in files)
            results["prepare"][label] = run
            print(f"prepare {label:9s}: {run['status']:6s} {run['wall_s']:6.1f} s  peak RSS {_mib(run['peak_rss_bytes'])} MiB"
                  f"  group peak {_mib(run['group_peak_bytes'])} MiB  cache {_mib(run['cache_bytes'])} MiB", flush=True)
        if not args.skip_prepare and results["prepare"]["limited"]["status"] != "ok":
            print("large_scale: the limited prepare failed; see", root / "prepare-limited.log")
            return 1
        data_root = root / "limited"  # the cache the limited prepare wrote (identical bytes to the other)
        files = _cache_files(data_root)
        env["CHERRY_LARGE_ROOT"] = str(data_root)
        train_cmd = [sys.executable, "-m", "cherry", "train", "--dataset", DATASET, "--epochs", "1",
                     "--max-steps", str(args.steps), "--no-eval", "--quiet", "--hidden", "64", "--fanouts", "10,10",
                     "--batch-size", "512"]
        for r in range(args.repeats):
            for label, limited in (("limited", True), ("unlimited", False)) if r % 2 == 0 else (
                    ("unlimited", False), ("limited", True)):
                _evict(files) if limited else _warm(files)
                out = root / f"train-{label}-{r}.json"
                run = _run(train_cmd + ["--json", str(out)], env, group if limited else None,
                           root / f"train-{label}-{r}.log", args.timeout_s)
                if run["status"] == "ok":
                    epoch = json.loads(out.read_text())["epochs"][0]
                    run["steps"], run["train_wall_s"] = epoch["num_steps"], epoch["wall_s"]
                    run["seeds_per_s"] = epoch["num_steps"] * 512 / epoch["wall_s"]
                run.update(label=label, repeat=r)
                results["train"].append(run)
                print(f"train {label:9s} #{r}: {run['status']:6s} {run.get('seeds_per_s', float('nan')):8.0f} seeds/s"
                      f"  peak RSS {_mib(run['peak_rss_bytes'])} MiB  group peak {_mib(run['group_peak_bytes'])} MiB",
                      flush=True)
        for r in range(args.ablate):  # limited only: what sorted gathers bring
            for mode in ("sorted", "plain")[::1 if r % 2 == 0 else -1]:
                _evict(files)
                out = root / f"train-{mode}-{r}.json"
                ablated = env if mode == "sorted" else dict(env, CHERRY_PLUGINS=f"{PLUGIN},{ABLATION}")
                run = _run(train_cmd + ["--json", str(out)], ablated, group, root / f"train-{mode}-{r}.log",
                           args.timeout_s)
                if run["status"] == "ok":
                    epoch = json.loads(out.read_text())["epochs"][0]
                    run["seeds_per_s"] = epoch["num_steps"] * 512 / epoch["wall_s"]
                run.update(label=f"limited, {mode}", repeat=r)
                results["train"].append(run)
                print(f"train limited {mode:12s} #{r}: {run['status']:7s} {run.get('seeds_per_s', float('nan')):8.0f} "
                      f"seeds/s  wall {run['wall_s']:.0f} s", flush=True)
    finally:
        group.remove()
        if args.root is None:
            shutil.rmtree(root, ignore_errors=True)
    by = {(t["label"], t["repeat"]): t for t in results["train"]}
    ratios = [by[("limited", r)]["seeds_per_s"] / by[("unlimited", r)]["seeds_per_s"] for r in range(args.repeats)
              if "seeds_per_s" in by[("limited", r)] and "seeds_per_s" in by[("unlimited", r)]]
    if ratios:
        lo, hi = _interval(ratios)
        results["throughput_ratio"] = {"median": statistics.median(ratios), "interval95": [lo, hi], "pairs": ratios}
        print(f"throughput limited / unlimited: x{statistics.median(ratios):.2f} [{lo:.2f}, {hi:.2f}] "
              f"({len(ratios)} interleaved pairs)")
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    from cherry.errors import run_boundary

    sys.exit(run_boundary("benchmarks.large_scale", main))
