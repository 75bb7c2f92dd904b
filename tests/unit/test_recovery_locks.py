"""cherry.bench.recovery: a Snakemake lock is released only when its owner is provably gone, and corrupt
records are set aside with one line each (the workflow-level test is tests/workflow/test_recovery.py)."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cherry.bench import recovery
from cherry.bench.recovery import (LOCK_DIR, OWNER_FILE, claim_lock, corrupt_copies, process_start,
                                   release_stale_lock, set_aside_corrupt_records)


def dead_pid() -> int:
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


def locked(workdir, owner: dict | None):
    (workdir / LOCK_DIR).mkdir(parents=True)
    (workdir / LOCK_DIR / "0.input.lock").write_text("results/x\n")
    if owner is not None:
        (workdir / OWNER_FILE).write_text(json.dumps(owner))


def lock_files(workdir):
    return list((workdir / LOCK_DIR).glob("*.lock"))


def test_lock_of_a_dead_snakemake_on_this_host_is_released(tmp_path):
    pid = dead_pid()
    locked(tmp_path, {"host": socket.gethostname(), "pid": pid, "start": "1"})
    messages = release_stale_lock(tmp_path)
    assert lock_files(tmp_path) == []
    assert messages == [f"cherry workflow: removed the lock left by a Snakemake that no longer runs (pid {pid}); "
                        "resuming"]


def test_lock_of_a_live_owner_is_kept(tmp_path):
    locked(tmp_path, None)
    claim_lock(tmp_path)  # locks exist: claims nothing
    assert not (tmp_path / OWNER_FILE).exists()
    (tmp_path / OWNER_FILE).write_text(json.dumps({"host": socket.gethostname(), "pid": 1,
                                                   "start": process_start(1)}))
    assert release_stale_lock(tmp_path) == [] and len(lock_files(tmp_path)) == 1


def test_lock_with_a_reused_pid_is_released(tmp_path):
    # the pid exists but started at another time: not the process that took the lock
    locked(tmp_path, {"host": socket.gethostname(), "pid": 1, "start": "not-its-start-time"})
    release_stale_lock(tmp_path)
    assert lock_files(tmp_path) == []


def test_lock_of_another_host_or_without_owner_is_kept(tmp_path):
    locked(tmp_path, {"host": "elsewhere.example", "pid": dead_pid(), "start": "1"})
    [message] = release_stale_lock(tmp_path)
    assert "host 'elsewhere.example'" in message and "snakemake --unlock" in message
    (tmp_path / OWNER_FILE).write_text("{truncated")
    assert release_stale_lock(tmp_path) == []
    assert len(lock_files(tmp_path)) == 1


def fake_snakemake(directory, body: str):
    """An executable named ``snakemake`` running ``body`` (Python): the kernel starts it as
    ``python .../snakemake``, as it starts Snakemake's console script."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "snakemake"
    path.write_text(f"#!{sys.executable}\n{body}\n")
    path.chmod(0o755)
    return path


def test_lock_is_kept_while_another_snakemake_works_in_the_directory(tmp_path):
    locked(tmp_path, {"host": socket.gethostname(), "pid": dead_pid(), "start": "1"})
    program = fake_snakemake(tmp_path.parent / f"{tmp_path.name}-bin", "import time; time.sleep(60)")
    other = subprocess.Popen([str(program)], cwd=tmp_path)
    try:
        deadline = time.monotonic() + 10  # the child's command line is readable once it has started
        while other.pid not in recovery.snakemake_processes_in(tmp_path) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert other.pid in recovery.snakemake_processes_in(tmp_path)
        assert release_stale_lock(tmp_path) == [] and len(lock_files(tmp_path)) == 1
    finally:
        other.kill()
        other.wait()


@pytest.mark.parametrize("wrapper", [["timeout", "60", "{program}"], ["sh", "-c", "{program}; exit $?"]])
def test_a_rerun_under_a_wrapper_releases_a_dead_snakemakes_lock(wrapper, tmp_path):
    # the wrapper's arguments mention snakemake, but the wrapper is no Snakemake: the rerun resumes
    locked(tmp_path, {"host": socket.gethostname(), "pid": dead_pid(), "start": "1"})
    program = fake_snakemake(tmp_path.parent / f"{tmp_path.name}-bin",
                             "from cherry.bench.recovery import release_stale_lock; print(release_stale_lock())")
    command = [part.format(program=program) for part in wrapper]
    result = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=120,
                            env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])})
    assert result.returncode == 0, result.stderr
    assert "removed the lock left by a Snakemake that no longer runs" in result.stdout, result.stdout
    assert lock_files(tmp_path) == []


@pytest.mark.parametrize("argv, is_snakemake", [
    (["/usr/bin/python3", "/venv/bin/snakemake", "--cores", "all"], True),
    (["python3.11", "-u", "-m", "snakemake", "-n"], True),
    (["python", "-X", "dev", "-m", "snakemake"], True),
    (["/venv/bin/snakemake"], True),
    (["timeout", "600", "snakemake", "--cores", "all"], False),
    (["sh", "-c", "snakemake --cores all"], False),
    (["/usr/bin/time", "-v", "snakemake"], False),
    (["srun", "snakemake"], False),
    (["python", ".snakemake/scripts/tmpab12.write_spec.py"], False),
    (["python", "-c", "import time  # snakemake"], False),
    ([], False),
])
def test_a_snakemake_is_known_by_its_own_program(argv, is_snakemake):
    assert recovery.runs_snakemake(argv) is is_snakemake


def test_a_record_holding_another_run_is_corrupt(tmp_path):
    from tests.unit.test_bench_measure import PROVENANCE, SPEC

    from cherry.bench.record import RunMeasurements, build_record

    record = build_record(SPEC, RunMeasurements(status="ok"), PROVENANCE)
    own, other = tmp_path / f"{record['run_id']}.json", tmp_path / "breakdown-cherry-synth-tiny-b64-k2-r0-abcdef.json"
    own.write_text(json.dumps(record))
    other.write_text(json.dumps(record))  # a valid record copied over another run's file
    messages = set_aside_corrupt_records([own, other])
    assert len(messages) == 1 and f"record {other} is corrupt (it holds run {record['run_id']!r}" in messages[0]
    assert own.exists() and not other.exists() and corrupt_copies([own, other]) == [str(other) + ".corrupt"]


def test_the_aggregation_refuses_two_records_of_one_run(tmp_path):
    from tests.unit.test_bench_measure import PROVENANCE, SPEC

    from cherry.bench.aggregate import collect_records
    from cherry.bench.record import RunMeasurements, build_record

    record = build_record(SPEC, RunMeasurements(status="ok"), PROVENANCE)
    paths = [tmp_path / "a.json", tmp_path / "b.json"]
    for path in paths:
        path.write_text(json.dumps(record))
    with pytest.raises(ValueError, match=f"b.json' holds run '{record['run_id']}', as '.*a.json' does"):
        collect_records(paths)


def test_claim_records_this_process_when_the_directory_is_free(tmp_path):
    claim_lock(tmp_path)
    owner = recovery.owner_of(tmp_path)
    assert owner == {"host": socket.gethostname(), "pid": os.getpid(), "start": process_start(os.getpid())}


def test_process_start_rejects_a_bad_pid_and_knows_a_dead_one():
    with pytest.raises(ValueError, match="pid must be a positive int"):
        process_start(0)
    assert process_start(dead_pid()) is None


def test_corrupt_records_are_moved_aside_with_one_line_each(tmp_path):
    # (valid records are kept: tests/workflow/test_recovery.py)
    truncated, wrong, missing = (tmp_path / f"{name}.json" for name in ("trunc", "wrong", "missing"))
    truncated.write_text('{"spec_id": "ab')
    wrong.write_text(json.dumps({"spec_id": 3}))
    paths = [truncated, wrong, missing]
    messages = set_aside_corrupt_records(paths)
    assert len(messages) == 2
    assert messages[0].startswith(f"cherry workflow: record {truncated} is corrupt (Unterminated string")
    assert messages[0].endswith("moved to trunc.json.corrupt, its run is redone")
    assert f"record {wrong} is corrupt (invalid record:" in messages[1]
    assert all("\n" not in m for m in messages)
    assert not truncated.exists() and not wrong.exists()
    assert corrupt_copies(paths) == [str(truncated) + ".corrupt", str(wrong) + ".corrupt"]
