"""Workflow faults survived by what docs/workflow.md promises: kill -9, a corrupt record, a failed
aggregation.

docs/workflow.md (Recovery) says: after a crash or `kill -9` of Snakemake, run the same command
again, `snakemake --cores all` (or `make run`). These tests run exactly that command (with
`--snakefile`/`--directory` pointing at a temporary working directory) on a tiny config of four runs:
the workflow is killed once two records exist, one of them is then truncated (as by a full disk), and
one run of the command must get past the stale lock, the incomplete jobs and the corrupt record.
"""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from cherry.bench.experiments import plan_runs
from cherry.bench.record import validate_record
from tests.workflow.test_snakemake import SNAKEFILE, snakemake, write_config

RESUME = ("--cores", "all")  # the documented resume command: the run command itself


def recovery_config(root: Path) -> dict:
    return {
        "data": {"root": str(root)},
        "threads": 1,
        "run": {"device": "cpu", "aggr": "mean", "hidden": 16, "fanouts": [5, 10], "batch_size": 256,
                "warmup": 1, "steps": 2, "evaluate": False, "timeout_s": 300},
        "experiments": {"microbatch_cost": [{"dataset": "synth-tiny",
                                             "systems": {"full": [1], "cherry": [2], "naive": [2],
                                                         "buffalo": [2]}}]},
    }


def records_dir(workdir: Path) -> Path:
    return workdir / "results" / "records" / "runs"


def finished_records(workdir: Path) -> list[Path]:
    return sorted(records_dir(workdir).glob("*.json")) if records_dir(workdir).exists() else []


def wait_for_group_to_exit(pgid: int, timeout_s: float) -> None:
    """Jobs of a Snakemake killed alone go on as orphans in its process group; wait for them."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.5)
    os.killpg(pgid, signal.SIGKILL)


def assert_every_record_once(workdir: Path, runs: dict) -> None:
    for run in runs:
        record = json.loads((records_dir(workdir) / f"{run}.json").read_text())
        validate_record(record)
        assert record["run_id"] == run
    table = pd.read_csv(workdir / "results" / "records" / "runs.csv")
    assert sorted(table["run_id"]) == sorted(runs)  # none lost, none duplicated
    assert sorted(pd.read_parquet(workdir / "results" / "records" / "runs.parquet")["run_id"]) == sorted(runs)


@pytest.fixture(scope="module")
def resumed(tmp_path_factory):
    """The tiny workflow killed with SIGKILL once two records exist, a record truncated, then the
    documented command run once."""
    workdir = tmp_path_factory.mktemp("recovery")
    config = recovery_config(workdir / "data")
    write_config(workdir, config)
    command = [sys.executable, "-m", "snakemake", "--snakefile", str(SNAKEFILE), "--directory", str(workdir),
               "--cores", "all"]
    with open(workdir / "killed.log", "w") as log:
        victim = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + 300
        while len(finished_records(workdir)) < 2 and victim.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert victim.poll() is None, "the workflow ended before it could be killed"
        victim.send_signal(signal.SIGKILL)  # Snakemake alone, as `kill -9 PID` does
        victim.wait()
    assert list((workdir / ".snakemake" / "locks").glob("*.lock")), "kill -9 should leave Snakemake's lock"
    before = {p.name: p.read_bytes() for p in finished_records(workdir)}
    assert 2 <= len(before) < len(plan_runs(config))
    truncated = finished_records(workdir)[0]
    truncated.write_bytes(before[truncated.name][: len(before[truncated.name]) // 2])
    resume = snakemake(workdir, *RESUME, timeout=600)
    wait_for_group_to_exit(victim.pid, timeout_s=120)
    return workdir, config, before, truncated, resume


def test_kill_9_then_the_run_command_resumes_with_every_record_once(resumed):
    workdir, config, before, _, resume = resumed
    assert resume.returncode == 0, resume.stderr[-4000:]
    assert "cherry workflow: removed the lock left by a Snakemake that no longer runs" in resume.stderr
    assert_every_record_once(workdir, plan_runs(config))
    for name in before:  # what was finished before the kill is still there and valid
        validate_record(json.loads((records_dir(workdir) / name).read_text()))
    leftovers = [p.name for p in (workdir / "results").rglob(".*") if p.name.endswith(".tmp")]
    assert leftovers == []
    again = snakemake(workdir, *RESUME, "-n")
    assert "Nothing to be done" in again.stdout + again.stderr, again.stdout[-3000:]


def test_corrupt_record_is_named_in_one_line_and_redone(resumed):
    workdir, _, before, truncated, resume = resumed
    lines = [line for line in resume.stderr.splitlines() if line.startswith("cherry workflow: record")]
    pattern = (rf"cherry workflow: record {re.escape(str(truncated.relative_to(workdir)))} is corrupt \(.+\); "
               rf"moved to {truncated.name}\.corrupt, its run is redone")
    assert len(lines) == 1 and re.fullmatch(pattern, lines[0]), resume.stderr[-3000:]
    corrupt = truncated.with_name(f"{truncated.name}.corrupt").read_bytes()
    assert corrupt == before[truncated.name][: len(before[truncated.name]) // 2]
    validate_record(json.loads(truncated.read_text()))  # redone


def test_failed_aggregation_keeps_the_previous_table(resumed, tmp_path):
    workdir, config, *_ = resumed
    tables = [workdir / "results" / "records" / name for name in ("runs.csv", "runs.parquet")]
    saved = [path.read_bytes() for path in tables]
    # every Python the job starts fails to write Parquet, after the CSV is already rewritten
    (tmp_path / "sitecustomize.py").write_text(
        "import pandas\n"
        "def _fail(*args, **kwargs):\n"
        "    raise OSError('parquet write failed (injected by the test)')\n"
        "pandas.DataFrame.to_parquet = _fail\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    command = [sys.executable, "-m", "snakemake", "--snakefile", str(SNAKEFILE), "--directory", str(workdir),
               "--cores", "1", "--forcerun", "aggregate_records", "--allowed-rules", "aggregate_records",
               "--", "results/records/runs.csv"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300, env=env)
    assert result.returncode != 0
    assert "parquet write failed" in (workdir / "results" / "logs" / "aggregate_records.log").read_text()
    assert [path.read_bytes() for path in tables] == saved
    assert_every_record_once(workdir, plan_runs(config))
