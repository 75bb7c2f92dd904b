"""A killed `cherry data prepare` leaves no temporary folder behind once prepare runs again.

The temporary siblings of a cache carry their writer's host and pid (`cherry.data.cache.temp_sibling`);
`remove_stale_temps` deletes those whose writer is dead and keeps live or foreign writers' ones.
"""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

from cherry.data.cache import remove_stale_temps, swap_into_place, temp_sibling


def dead_pid() -> int:
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


def hidden_entries(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob(".*"))


def test_only_dead_writers_temps_are_removed(tmp_path):
    target = tmp_path / "synth_tiny"
    host = socket.gethostname()
    dead = tmp_path / f".synth_tiny.tmp-{host}-{dead_pid()}-0123abcd"
    live = temp_sibling(target)
    foreign = tmp_path / ".synth_tiny.old-elsewhere-1-89abcdef"
    legacy = tmp_path / ".synth_tiny.tmp-deadbeef"  # before writers were named: owned by nobody
    unrelated = tmp_path / ".synth_tiny_other.tmp-deadbeef"
    for path in (dead, live, foreign, legacy, unrelated):
        (path / "raw").mkdir(parents=True)
    removed = remove_stale_temps(target)
    assert sorted(removed) == sorted([dead, legacy])
    assert live.exists() and foreign.exists() and unrelated.exists()
    assert str(os.getpid()) in live.name and host in live.name


def test_swap_tolerates_a_second_writer_that_placed_the_target_first(tmp_path, monkeypatch):
    target, ours = tmp_path / "cache", tmp_path / "ours"
    ours.mkdir()
    (ours / "x").write_text("ours")
    rename, raced = os.rename, []

    def racing_rename(src, dst):  # another writer places its complete copy just before ours lands
        if Path(src) == ours and not raced:
            raced.append(True)
            target.mkdir()
            (target / "x").write_text("theirs")
        rename(src, dst)

    monkeypatch.setattr("cherry.data.cache.os.rename", racing_rename)
    swap_into_place(ours, target)
    assert (target / "x").read_text() == "ours"
    assert hidden_entries(tmp_path) == [] and not ours.exists()


def test_prepare_killed_mid_write_leaves_no_temporary_folder_after_the_next_prepare(tmp_path):
    root = tmp_path / "data"
    command = [sys.executable, "-m", "cherry", "data", "prepare", "synth-tiny", "--root", str(root)]
    process = subprocess.Popen(command, stderr=subprocess.PIPE, text=True)
    # the raw layout is written in a temporary folder; kill once it is being read back
    for line in process.stderr:
        if "reading back" in line:
            process.send_signal(signal.SIGKILL)
            break
    process.wait(timeout=120)
    assert process.returncode == -signal.SIGKILL, "prepare finished before it could be killed"
    assert any(".tmp-" in name for name in hidden_entries(root)), hidden_entries(root)
    again = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr[-2000:]
    assert hidden_entries(root) == []
    assert (root / "synth_tiny" / "cherry" / "manifest.json").exists()
