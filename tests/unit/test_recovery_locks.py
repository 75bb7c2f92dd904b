"""cherry.bench.recovery: a Snakemake lock is released only when its owner is provably gone, and corrupt
records are set aside with one line each (the workflow-level test is tests/workflow/test_recovery.py)."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time

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


def test_lock_is_kept_while_another_snakemake_works_in_the_directory(tmp_path):
    locked(tmp_path, {"host": socket.gethostname(), "pid": dead_pid(), "start": "1"})
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)  # snakemake"], cwd=tmp_path)
    try:
        deadline = time.monotonic() + 10  # the child's command line is readable once it has started
        while other.pid not in recovery.snakemake_processes_in(tmp_path) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert other.pid in recovery.snakemake_processes_in(tmp_path)
        assert release_stale_lock(tmp_path) == [] and len(lock_files(tmp_path)) == 1
    finally:
        other.kill()
        other.wait()


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
