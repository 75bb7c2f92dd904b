"""What the Snakefile does before Snakemake plans, so that rerunning the run command resumes any crash.

Two faults a plain rerun of Snakemake cannot get past by itself (the third, outputs of jobs that were
running at the kill, is `rerun-incomplete` in profiles/default):
- a stale lock: `kill -9` of Snakemake leaves `.snakemake/locks/*` behind and the next run stops with
  "Directory cannot be locked". `release_stale_lock` removes it only when the Snakemake that took it
  is provably gone. That is: it was started on this host (`claim_lock` wrote its host, pid and start
  time), that process no longer exists, and no other Snakemake process works in this directory. Only
  a process that is itself a Snakemake counts (`runs_snakemake`), so a rerun under `timeout` or
  `sh -c` is not blocked by its own wrapper, whose arguments mention snakemake.
- a corrupt record is a finished output to Snakemake, so the aggregation fails on it forever. It is
  truncated, not JSON, fails the record schema, or holds another run than its file names (a
  ``run_id`` that differs from the file's, whose hash covers the spec). Deleting it would not help:
  Snakemake regenerates a missing intermediate file only when a job downstream must run anyway.
  `set_aside_corrupt_records` names each one in one line and moves it to `<record>.corrupt`; those
  files are inputs of the aggregation (`corrupt_copies`), whose changed set of inputs makes Snakemake
  rerun it, and so the run of the now missing record, which it needs.
The functions return the one-line messages they have for the user; none raises on a damaged file.
"""
from __future__ import annotations

import json
import os
import re
import socket
from pathlib import Path
from typing import Iterable, Optional

from cherry.bench.record import validate_record
from cherry.io import read_json, write_json_atomic

LOCK_DIR = Path(".snakemake") / "locks"
OWNER_FILE = Path(".snakemake") / "cherry-lock-owner.json"
CORRUPT_SUFFIX = ".corrupt"


def process_start(pid: int) -> Optional[str]:
    """The start time of process ``pid`` (clock ticks since boot, from /proc), None if it does not exist.

    Where /proc is absent the answer is "0" for a live process: a pid alone then identifies it."""
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        raise ValueError(f"pid must be a positive int, got {pid!r}")
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        if Path("/proc/self/stat").exists():
            return None
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return None
        except PermissionError:
            pass
        return "0"
    except OSError:
        return None
    # fields after the parenthesised command name start at field 3; starttime is field 22
    return stat.rsplit(")", 1)[1].split()[19]


_PYTHON = re.compile(r"^python[0-9.]*$")
_PYTHON_OPTIONS_WITH_VALUE = {"-W", "-X", "-Q"}


def runs_snakemake(argv: list[str]) -> bool:
    """Whether a process with command line ``argv`` is itself a Snakemake: its program is
    ``snakemake`` (the console script, which the kernel starts as ``python .../bin/snakemake``) or
    ``python -m snakemake``. Only the program counts, not the arguments: a wrapper that starts one
    (``timeout``, ``sh -c "snakemake ..."``, ``srun``, ``/usr/bin/time``) is not a Snakemake, nor is
    a job's script under ``.snakemake/scripts``."""
    if not argv:
        return False
    program = os.path.basename(argv[0])
    i = 1
    if _PYTHON.match(program):
        while i < len(argv) and argv[i].startswith("-") and argv[i] != "-m":
            i += 2 if argv[i] in _PYTHON_OPTIONS_WITH_VALUE else 1
        if i >= len(argv):
            return False
        if argv[i] == "-m":
            return i + 1 < len(argv) and argv[i + 1].split(".")[0] == "snakemake"
        program = os.path.basename(argv[i])
    return program == "snakemake"


def snakemake_processes_in(directory: str | os.PathLike) -> list[int]:
    """Pids of other processes that are a Snakemake (`runs_snakemake`) with ``directory`` as working
    directory (Linux)."""
    directory = os.path.realpath(directory)
    pids = []
    for entry in Path("/proc").glob("[0-9]*"):
        pid = int(entry.name)
        if pid == os.getpid():
            continue
        try:
            argv = [os.fsdecode(a) for a in (entry / "cmdline").read_bytes().split(b"\0") if a]
            cwd = os.readlink(entry / "cwd")
        except OSError:
            continue
        if runs_snakemake(argv) and os.path.realpath(cwd) == directory:
            pids.append(pid)
    return pids


def _lock_files(workdir: Path) -> list[Path]:
    return sorted((workdir / LOCK_DIR).glob("*.lock"))


def release_stale_lock(workdir: str | os.PathLike = ".") -> list[str]:
    """Remove Snakemake's lock files in ``workdir`` if the Snakemake that wrote them is gone."""
    workdir = Path(workdir)
    locks = _lock_files(workdir)
    if not locks:
        return []
    try:
        owner = read_json(workdir / OWNER_FILE, "lock owner")
        host, pid, start = owner["host"], int(owner["pid"]), owner["start"]
    except (ValueError, KeyError, TypeError):
        return []  # not taken through this Snakefile: Snakemake's own message says what to do
    if host != socket.gethostname():
        return [f"cherry workflow: the lock in {workdir / LOCK_DIR} belongs to a Snakemake on host {host!r} "
                f"(pid {pid}); if it is no longer running there: snakemake --unlock"]
    if process_start(pid) == start:
        return []  # still running: Snakemake refuses to start, as it should
    others = snakemake_processes_in(workdir)
    if others:
        return []
    for lock in locks:
        lock.unlink(missing_ok=True)
    return [f"cherry workflow: removed the lock left by a Snakemake that no longer runs (pid {pid}); resuming"]


def claim_lock(workdir: str | os.PathLike = ".") -> None:
    """Record this process as the one about to take Snakemake's lock in ``workdir`` (if it is free)."""
    workdir = Path(workdir)
    if _lock_files(workdir):
        return
    pid = os.getpid()
    owner = {"host": socket.gethostname(), "pid": pid, "start": process_start(pid)}
    write_json_atomic(workdir / OWNER_FILE, owner)


def set_aside_corrupt_records(paths: Iterable[str | os.PathLike], named: bool = True) -> list[str]:
    """Rename each existing record among ``paths`` that is unreadable or invalid to ``<path>.corrupt``;
    one line for each. ``named``: a record must hold the run its file names (not so for a run whose
    setting was searched first: its file names the spec before the fit)."""
    messages = []
    for path in map(Path, paths):
        if not path.exists():
            continue
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
            validate_record(record)
            if named and record["run_id"] != path.stem:  # a valid record of another run copied over this one
                raise ValueError(f"it holds run {record['run_id']!r}, not {path.stem!r}")
        except (OSError, ValueError) as exc:  # JSON and UTF-8 decoding errors are ValueErrors
            aside = corrupt_copy(path)
            os.replace(path, aside)
            reason = " ".join(str(exc).split())
            messages.append(f"cherry workflow: record {path} is corrupt ({reason}); "
                            f"moved to {aside.name}, its run is redone")
    return messages


def corrupt_copy(path: str | os.PathLike) -> Path:
    path = Path(path)
    return path.with_name(path.name + CORRUPT_SUFFIX)


def corrupt_copies(paths: Iterable[str | os.PathLike]) -> list[str]:
    """The ``<record>.corrupt`` files that exist for ``paths``: extra inputs of the aggregation, so that
    a new one changes its set of inputs and Snakemake reruns it, and with it the missing record."""
    return [str(corrupt_copy(path)) for path in paths if corrupt_copy(path).exists()]


def owner_of(workdir: str | os.PathLike = ".") -> Optional[dict]:
    """The recorded lock owner of ``workdir`` (None if none or unreadable); for messages and tests."""
    try:
        return json.loads((Path(workdir) / OWNER_FILE).read_text())
    except (OSError, ValueError):
        return None
