"""Run a Python script in a child process and read its peak resident memory (for the bounded-memory
data tests).

The child's peak is measured by a small parent of its own: a process's ``ru_maxrss`` survives execve,
so a child forked straight from the (large) test process would report the test process's resident
size. The child runs with the repository on its path, no native extension and one thread.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

_MEASURE = """
import resource, subprocess, sys
proc = subprocess.run(sys.argv[1:], capture_output=True, text=True)
sys.stderr.write(proc.stderr)
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
sys.exit(proc.returncode)
"""


def run_measured(script: str, *args: str, timeout_s: float = 180) -> tuple[subprocess.CompletedProcess, int]:
    """``(the completed measuring process, the child's peak resident bytes or -1)`` of ``python -c
    script args...``; the child's stderr is the measuring process's."""
    env = dict(os.environ, PYTHONPATH=str(REPO), CHERRY_NO_EXT="1", OMP_NUM_THREADS="1")
    proc = subprocess.run([sys.executable, "-c", _MEASURE, sys.executable, "-c", script, *map(str, args)],
                          env=env, capture_output=True, text=True, timeout=timeout_s)
    lines = proc.stdout.split()
    return proc, (int(lines[-1]) * 1024 if lines else -1)  # KiB on Linux
