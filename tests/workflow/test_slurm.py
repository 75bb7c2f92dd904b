"""The workflow through `--profile workflow/profiles/slurm` on a real SLURM.

Run by `make test-slurm` (and .ci/run), which first starts a one-node SLURM on this machine with
workflow/scripts/slurm_local.sh; skipped where no SLURM answers or the executor plugin is missing.
The profile's site-specific lines (partition names, 32-256 GB of memory) are overridden on the
command line for the one-node cluster, as a user edits them for a site; everything else (executor,
job status from squeue, rerun-incomplete, latency-wait) is the profile's own. The first status check
comes after 2 s instead of the plugin's 40 s only to keep the test short.

`test_two_task_srun_training_job_matches_one_process` runs one distributed training job of 2 tasks
through `srun` and compares its losses with one process's.
"""
from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from cherry.bench.experiments import plan_runs
from cherry.bench.record import validate_record
from tests.workflow.test_snakemake import REPO, SNAKEFILE, write_config

pytestmark = pytest.mark.slurm
SLURM_LOCAL = REPO / "workflow" / "scripts" / "slurm_local.sh"
PROFILE = REPO / "workflow" / "profiles" / "slurm"
# the one-node cluster of slurm_local.sh has a single partition, "cpu", and the machine's memory
SITE_OVERRIDES = ("--default-resources", "slurm_partition=cpu", "mem_mb=1000", "runtime=15",
                  "--set-resources", "run_benchmark:slurm_partition=cpu", "verify_gradient:slurm_partition=cpu",
                  "--slurm-init-seconds-before-status-checks", "2")


def slurm_missing() -> str | None:
    if importlib.util.find_spec("snakemake_executor_plugin_slurm") is None:
        return "snakemake-executor-plugin-slurm is not installed (make install)"
    check = subprocess.run(["bash", str(SLURM_LOCAL), "--check"], capture_output=True, timeout=60)
    if check.returncode != 0:
        return "no SLURM answers here (start one: sudo bash workflow/scripts/slurm_local.sh)"
    return None


def slurm_config(root: Path) -> dict:
    # no cherry run, so no seed-ordering job: four levels of SLURM jobs (data, runs, table, figures)
    return {
        "data": {"root": str(root)},
        "threads": 1,
        "run": {"device": "cpu", "aggr": "mean", "hidden": 16, "fanouts": [5, 10], "batch_size": 256,
                "warmup": 1, "steps": 2, "evaluate": False, "timeout_s": 300},
        "experiments": {"microbatch_cost": [{"dataset": "synth-tiny", "systems": {"full": [1], "naive": [2]}}]},
    }


def test_tiny_workflow_runs_to_the_end_through_the_slurm_profile(tmp_path):
    reason = slurm_missing()
    if reason:
        pytest.skip(reason)
    config = slurm_config(tmp_path / "data")
    write_config(tmp_path, config)
    command = [sys.executable, "-m", "snakemake", "--snakefile", str(SNAKEFILE), "--directory", str(tmp_path),
               "--profile", str(PROFILE), *SITE_OVERRIDES]
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=540)
    except subprocess.TimeoutExpired as exc:
        queue = subprocess.run(["squeue", "--states=all"], capture_output=True, text=True).stdout
        pytest.fail(f"Snakemake did not finish in 540 s (never saw a job end?); squeue:\n{queue}\n"
                    f"{(exc.stderr or b'')[-3000:]!r}")
    log = result.stdout + result.stderr
    assert result.returncode == 0, log[-5000:]
    submitted = log.count("has been submitted with SLURM jobid")
    assert submitted >= 5, log[-3000:]  # data, 2 runs, table, figures/summary: real SLURM jobs
    runs = plan_runs(config)
    for run in runs:
        record = json.loads((tmp_path / "results" / "records" / "runs" / f"{run}.json").read_text())
        validate_record(record)
        assert record["run_id"] == run and record["status"] == "ok"
    table = pd.read_csv(tmp_path / "results" / "records" / "runs.csv")
    assert sorted(table["run_id"]) == sorted(runs)
    assert (tmp_path / "results" / "summary.md").exists()
    for name in ("microbatch_cost", "redundancy"):
        assert (tmp_path / "results" / "figures" / f"{name}.png").read_bytes()[:4] == b"\x89PNG"


def test_two_task_srun_training_job_matches_one_process(tmp_path):
    """`srun -n 2 cherry train ...`: SLURM starts the two ranks (cherry.launch reads SLURM_PROCID and
    SLURM_STEP_NUM_TASKS); their losses equal one process's on the same logical batches."""
    reason = slurm_missing()
    if reason:
        pytest.skip(reason)
    import os

    env = dict(os.environ, CHERRY_DATA=str(tmp_path / "data"), MASTER_ADDR="127.0.0.1", OMP_NUM_THREADS="1")
    subprocess.run([sys.executable, "-m", "cherry", "data", "prepare", "synth-tiny"], env=env, check=True,
                   capture_output=True, timeout=300)  # once, before two ranks would both prepare it
    train = [sys.executable, "-m", "cherry", "train", "--dataset", "synth-tiny", "--hidden", "16", "--fanouts",
             "5,10", "--batch-size", "256", "--epochs", "1", "--max-steps", "3", "--no-eval", "--quiet"]
    two, one = tmp_path / "two.json", tmp_path / "one.json"
    proc = subprocess.run(["srun", "-n", "2", "-p", "cpu", "--mem=2000", *train, "--json", str(two)], env=env,
                          capture_output=True, text=True, timeout=600, cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-3000:]
    subprocess.run([*train, "--json", str(one)], env=env, check=True, capture_output=True, timeout=600, cwd=REPO)
    ranks, single = json.loads(two.read_text()), json.loads(one.read_text())
    assert ranks["status"] == "ok" and ranks["nproc"] == 2 and len(ranks["rank_peak_bytes"]) == 2
    assert len(ranks["step_losses"]) == len(single["step_losses"]) == 3
    for a, b in zip(ranks["step_losses"], single["step_losses"]):
        assert abs(a - b) <= 1e-5 * abs(b), (ranks["step_losses"], single["step_losses"])
